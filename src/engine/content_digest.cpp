// SHA-256 content digests of adapter files.
#include <algorithm>
#include <filesystem>

#include "graft/core/error.h"
#include "graft/engine/adapter_registry.h"
#include "graft/io/hash.h"

namespace graft::engine {

std::string digest_hex(const Digest& d) { return io::to_hex(d.data(), d.size()); }

Digest content_digest(const std::string& path) {
  namespace fs = std::filesystem;
  io::Hasher h;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    if (ec) fail_as(ErrorKind::kIo, "cannot list adapter directory '", path, "': ", ec.message());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      // Name, NUL and length first: no two different file sets hash the same byte stream.
      const std::string name = f.filename().string();
      h.update(name.data(), name.size() + 1);
      const uint64_t size = fs::file_size(f, ec);
      if (ec) fail_as(ErrorKind::kIo, "cannot read adapter file '", f.string(), "': ", ec.message());
      h.update(&size, sizeof size);
      h.update_file(f.string(), "adapter file");
    }
  } else {
    h.update_file(path, "adapter file");
  }
  return io::finish_sha256(h);
}

}  // namespace graft::engine
