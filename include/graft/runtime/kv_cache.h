// KV cache of one sequence: per layer, keys and values for every position so far, stored as F32,
// F16 or BF16 (chosen at creation; F16 is the default, half the memory and bandwidth of F32).
// Each layer's keys (and values) are stored head-major, [kv head][position][head_dim]: attention
// reads one key/value head over all positions, and so streams one contiguous run of memory. (In
// position-major order, a head's 256 bytes of an F16 row of 128 sat in every 2 KiB of a 3B
// model's cache, two to a 4 KiB page, where the hardware prefetchers stop: a decode step's
// attention read the cache at a quarter of the memory's speed. bench: BM_AttendDecode3B.)
// Rows are written in F32 and rounded on the way in (round to nearest even); attention reads the
// stored type directly (attend_cached). Storage grows in steps as the sequence grows, up to the
// capacity fixed at creation (the context size), so a short chat does not pay for a long context
// up front.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "graft/core/dtype.h"
#include "graft/model/config.h"

namespace graft::runtime {

// What `--cache-type` defaults to (and KVCache without a type). Tests comparing logits against
// reference tools at tight tolerances pass DType::F32 explicitly.
inline constexpr DType kDefaultKVCacheType = DType::F16;

// "f32" | "f16" | "bf16" (any case) -> the DType; anything else throws kBadRequest naming `option`
// and the allowed values.
DType parse_kv_cache_type(std::string_view name, std::string_view option = "--cache-type");
// "f32" | "f16" | "bf16".
std::string_view kv_cache_type_name(DType t);

class KVCache {
 public:
  KVCache(const model::ModelConfig& config, int64_t capacity, DType dtype = kDefaultKVCacheType);

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return size_; }  // positions filled (the next token's position)
  int64_t kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  // Bytes one position takes over all layers, keys and values.
  int64_t bytes_per_position() const;
  // Bytes allocated now (grows with reserve_more).
  int64_t allocated_bytes() const { return allocated_ * bytes_per_position(); }

  // Makes room for n more positions (throws if the capacity would be exceeded).
  void reserve_more(int64_t n);
  // Marks n more positions as filled (after a forward pass wrote them).
  void advance(int64_t n);
  // Drops positions >= n (keeps a shared prefix, e.g. to reuse a cached prompt).
  void truncate(int64_t n);
  // Becomes a copy of `from`'s first n positions (same model and type; n <= from.size() and
  // <= capacity()): another sequence's prompt KV, reused without evaluating it again.
  void copy_prefix(const KVCache& from, int64_t n);

  // Writes one position's keys and values of a layer (kv_dim floats each), rounded to dtype().
  // The position must be reserved.
  void store(int64_t layer, int64_t pos, const float* key, const float* value);
  // One stored key/value element of a layer and position, widened to F32 (exact).
  float key_at(int64_t layer, int64_t pos, int64_t i) const;
  float value_at(int64_t layer, int64_t pos, int64_t i) const;

  int64_t head_dim() const { return head_dim_; }
  int64_t kv_heads() const { return kv_dim_ / head_dim_; }
  // Key/value head `head` of a layer from position `pos` on, head_dim() elements a position, the
  // positions contiguous: F32 caches only...
  const float* key_f32(int64_t layer, int64_t head, int64_t pos) const { return &kf_[layer][at(head, pos)]; }
  const float* value_f32(int64_t layer, int64_t head, int64_t pos) const { return &vf_[layer][at(head, pos)]; }
  // ... and the 16-bit caches (F16 or BF16 bits).
  const uint16_t* key_16(int64_t layer, int64_t head, int64_t pos) const { return &kh_[layer][at(head, pos)]; }
  const uint16_t* value_16(int64_t layer, int64_t head, int64_t pos) const { return &vh_[layer][at(head, pos)]; }

 private:
  size_t at(int64_t head, int64_t pos) const { return static_cast<size_t>((head * allocated_ + pos) * head_dim_); }
  template <class T>
  std::vector<T> regrown(const std::vector<T>& plane, int64_t grown) const;

  int64_t capacity_, size_ = 0, kv_dim_, head_dim_, allocated_ = 0;
  DType dtype_;
  std::vector<std::vector<float>> kf_, vf_;     // F32
  std::vector<std::vector<uint16_t>> kh_, vh_;  // F16, BF16
};

// One query row's attention (ops' attend) over positions [first, first + n) of a layer's cache,
// key/value head `kv_head` (of head_dim() = hd elements), reading the cache in its stored type: F32
// caches give exactly attend's bits; F16/BF16 caches give F32 math on the rounded keys and values
// (each element widened exactly as it is loaded; the same operations in the same order).
// heads > 1: that many query heads sharing this key/value head (ops' attend with heads). softcap:
// as attend's.
void attend_cached(const KVCache& cache, int64_t layer, int64_t first, int64_t n, int64_t kv_head, const float* q,
                   int64_t hd, float scale, float* scores, float* out, int64_t heads = 1, float softcap = 0);

}  // namespace graft::runtime
