// SHA-256 content digests of adapter files (OpenSSL's libcrypto does the hashing).
#include <openssl/evp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>

#include "engine/sha256.h"
#include "graft/core/error.h"
#include "graft/engine/adapter_registry.h"

namespace graft::engine {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (!impl_->ctx || EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) != 1)
    fail_as(ErrorKind::kInternal, "SHA-256: cannot initialize the digest (libcrypto)");
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(impl_->ctx, data, n) != 1) fail_as(ErrorKind::kInternal, "SHA-256: update failed");
}

Digest Sha256::finish() {
  Digest d{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(impl_->ctx, d.data(), &len) != 1 || len != d.size())
    fail_as(ErrorKind::kInternal, "SHA-256: final failed");
  return d;
}

std::string digest_hex(const Digest& d) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : d) {
    s += hex[b >> 4];
    s += hex[b & 15];
  }
  return s;
}

namespace {

void hash_file(Sha256& h, const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail_as(ErrorKind::kIo, "cannot read adapter file '", p.string(), "'");
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) fail_as(ErrorKind::kIo, "error reading adapter file '", p.string(), "'");
}

}  // namespace

Digest content_digest(const std::string& path) {
  namespace fs = std::filesystem;
  Sha256 h;
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
      hash_file(h, f);
    }
  } else {
    hash_file(h, path);
  }
  return h.finish();
}

}  // namespace graft::engine
