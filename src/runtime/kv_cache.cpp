#include "graft/runtime/kv_cache.h"

#include <algorithm>

#include "graft/core/error.h"

namespace graft::runtime {

KVCache::KVCache(const model::ModelConfig& c, int64_t capacity)
    : capacity_(capacity), kv_dim_(c.kv_dim()), k_(c.num_layers), v_(c.num_layers) {
  if (capacity <= 0) fail("KV cache capacity must be positive, got ", capacity);
}

void KVCache::reserve_more(int64_t n) {
  const int64_t need = size_ + n;
  if (need > capacity_)
    fail("context full: ", size_, " tokens cached + ", n, " new exceed the context size ", capacity_);
  if (need <= allocated_) return;
  // Grow geometrically (at least 256 positions) to keep reallocations rare.
  const int64_t grown = std::min(capacity_, std::max({need, allocated_ * 2, int64_t{256}}));
  for (auto& k : k_) k.resize(static_cast<size_t>(grown * kv_dim_));
  for (auto& v : v_) v.resize(static_cast<size_t>(grown * kv_dim_));
  allocated_ = grown;
}

void KVCache::advance(int64_t n) {
  if (size_ + n > allocated_) fail("KVCache::advance past reserved storage");
  size_ += n;
}

void KVCache::truncate(int64_t n) { size_ = std::min(size_, std::max<int64_t>(0, n)); }

}  // namespace graft::runtime
