// Incremental SHA-256 (libcrypto's EVP interface behind a small RAII class).
#pragma once
#include <cstddef>
#include <memory>

#include "graft/engine/adapter_registry.h"

namespace graft::engine {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  Digest finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graft::engine
