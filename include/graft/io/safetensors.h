// safetensors: reading (mmap, zero-copy views, full validation of the header) and writing.
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets},
// "__metadata__": {str: str}}, then the data section that data_offsets index into.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graft/core/mapped_file.h"
#include "graft/core/tensor.h"

namespace graft::io {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsFile {
 public:
  // Validates the header completely: length within the file, JSON object, known dtypes, offsets in
  // range, sizes equal to dtype × shape, no overlapping ranges. Errors name the file and tensor.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // header order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsEntry* find(const std::string& name) const;
  // A zero-copy view kept alive by the mapping; throws naming the file if the tensor is absent.
  Tensor tensor(const std::string& name) const;
  // Drops the tensor's pages from the process (MappedFile::release); no-op for unknown names.
  void release(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  const uint8_t* data_begin_ = nullptr;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Streams a safetensors file tensor by tensor, so a writer holds at most one tensor in memory:
// the header is written from the declared names/dtypes/shapes, then write() is called for each in
// the declared order. Output goes to path + ".tmp" and is renamed by finish(); a writer destroyed
// before finish() removes the temporary file, so a failure never leaves a truncated checkpoint.
class SafetensorsWriter {
 public:
  struct Declared {
    std::string name;
    DType dtype;
    Shape shape;
  };
  SafetensorsWriter(std::string path, std::vector<Declared> tensors, const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  void write(const Tensor& t);  // the next declared tensor; dtype and shape must match
  void finish();
  static uint64_t header_bytes(const std::vector<Declared>& tensors, const std::map<std::string, std::string>& metadata);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Writes tensors (F32/F16/BF16/int types) in the given order, with optional __metadata__. The file
// is written to path + ".tmp" and renamed, so a failed write never leaves a truncated checkpoint.
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Parses a safetensors dtype string ("F32", "BF16", ...); throws listing the supported ones.
DType parse_safetensors_dtype(const std::string& s, const std::string& context);
const char* safetensors_dtype_name(DType t);

}  // namespace graft::io
