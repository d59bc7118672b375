#include "graft/io/hash.h"

#include <openssl/evp.h>

#include <algorithm>
#include <fstream>

#include "graft/core/error.h"

namespace graft::io {

struct Hasher::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Hasher::Hasher(Kind kind) : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (!impl_->ctx || EVP_DigestInit_ex(impl_->ctx, kind == Kind::kSha1 ? EVP_sha1() : EVP_sha256(), nullptr) != 1)
    fail_as(ErrorKind::kInternal, "hash: cannot initialize the digest (libcrypto)");
}

Hasher::~Hasher() { EVP_MD_CTX_free(impl_->ctx); }

void Hasher::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(impl_->ctx, data, n) != 1) fail_as(ErrorKind::kInternal, "hash: update failed");
}

void Hasher::update_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_as(ErrorKind::kIo, "cannot read ", what, " '", path, "'");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) fail_as(ErrorKind::kIo, "error reading ", what, " '", path, "'");
}

std::vector<uint8_t> Hasher::finish() {
  std::vector<uint8_t> d(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(impl_->ctx, d.data(), &len) != 1) fail_as(ErrorKind::kInternal, "hash: final failed");
  d.resize(len);
  return d;
}

Sha256Digest finish_sha256(Hasher& h) {
  const std::vector<uint8_t> v = h.finish();
  Sha256Digest d{};
  if (v.size() != d.size()) fail_as(ErrorKind::kInternal, "hash: a SHA-256 digest of ", v.size(), " bytes");
  std::copy(v.begin(), v.end(), d.begin());
  return d;
}

std::string to_hex(const uint8_t* data, size_t n) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    s += hex[data[i] >> 4];
    s += hex[data[i] & 15];
  }
  return s;
}

}  // namespace graft::io
