// KV cache of one sequence: per layer, keys and values for every position so far, F32.
// Storage grows in steps as the sequence grows, up to the capacity fixed at creation (the context
// size), so a short chat does not pay for a long context up front.
#pragma once
#include <cstdint>
#include <vector>

#include "graft/model/config.h"

namespace graft::runtime {

class KVCache {
 public:
  KVCache(const model::ModelConfig& config, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return size_; }  // positions filled (the next token's position)
  int64_t kv_dim() const { return kv_dim_; }

  // Makes room for n more positions (throws if the capacity would be exceeded).
  void reserve_more(int64_t n);
  // Marks n more positions as filled (after a forward pass wrote them).
  void advance(int64_t n);
  // Drops positions >= n (keeps a shared prefix, e.g. to reuse a cached prompt).
  void truncate(int64_t n);

  float* key(int64_t layer, int64_t pos) { return &k_[layer][pos * kv_dim_]; }
  float* value(int64_t layer, int64_t pos) { return &v_[layer][pos * kv_dim_]; }
  const float* key(int64_t layer, int64_t pos) const { return &k_[layer][pos * kv_dim_]; }
  const float* value(int64_t layer, int64_t pos) const { return &v_[layer][pos * kv_dim_]; }

 private:
  int64_t capacity_, size_ = 0, kv_dim_, allocated_ = 0;
  std::vector<std::vector<float>> k_, v_;
};

}  // namespace graft::runtime
