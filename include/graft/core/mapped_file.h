// A read-only memory map of a whole file; the bytes stay valid while the object lives.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace graft {

class MappedFile {
 public:
  // Throws graft::Error naming the path if it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the whole pages inside [begin, begin + n) from this process (madvise DONTNEED): a memory
  // hint for bytes that will not be read again. The mapping stays valid; a later read reloads the
  // pages from the file, so views into the range remain correct.
  void release(const void* begin, size_t n) const;

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace graft
