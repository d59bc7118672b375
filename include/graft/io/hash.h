// Cryptographic hashes (OpenSSL's libcrypto behind a small RAII class): SHA-256 for adapter content
// digests, KV block keys and Hub LFS files, SHA-1 for the Hub's git blob ids.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace graft::io {

using Sha256Digest = std::array<uint8_t, 32>;

class Hasher {
 public:
  enum class Kind { kSha256, kSha1 };
  explicit Hasher(Kind kind = Kind::kSha256);
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void update(const void* data, size_t n);
  // Reads `path` to its end into the hash; kIo naming `what` and the path when it cannot be read.
  void update_file(const std::string& path, const std::string& what);
  std::vector<uint8_t> finish();  // 32 bytes (SHA-256) or 20 (SHA-1); the hasher is spent

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// finish() of a kSha256 hasher, as its fixed-size digest.
Sha256Digest finish_sha256(Hasher& h);
std::string to_hex(const uint8_t* data, size_t n);

}  // namespace graft::io
