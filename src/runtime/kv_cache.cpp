#include "graft/runtime/kv_cache.h"

#include <algorithm>
#include <string>

#include "graft/core/ascii.h"
#include "graft/core/error.h"
#include "graft/core/tensor.h"
#include "graft/compute/ops.h"

namespace graft::runtime {

DType parse_kv_cache_type(std::string_view name, std::string_view option) {
  const std::string s = ascii_lower(name);
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  if (s == "bf16") return DType::BF16;
  fail_as(ErrorKind::kBadRequest, option, ": '", name, "' is not a KV cache type (allowed: f32, f16, bf16)");
}

std::string_view kv_cache_type_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    default: return "?";
  }
}

KVCache::KVCache(const model::ModelConfig& c, int64_t capacity, DType dtype)
    : capacity_(capacity), kv_dim_(c.kv_dim()), dtype_(dtype) {
  if (capacity <= 0) fail("KV cache capacity must be positive, got ", capacity);
  if (dtype == DType::F32) {
    kf_.resize(static_cast<size_t>(c.num_layers));
    vf_.resize(static_cast<size_t>(c.num_layers));
  } else if (dtype == DType::F16 || dtype == DType::BF16) {
    kh_.resize(static_cast<size_t>(c.num_layers));
    vh_.resize(static_cast<size_t>(c.num_layers));
  } else {
    fail_as(ErrorKind::kBadRequest, "KV cache type ", dtype_name(dtype), " is not one of F32, F16, BF16");
  }
}

int64_t KVCache::bytes_per_position() const {
  const int64_t layers = static_cast<int64_t>(dtype_ == DType::F32 ? kf_.size() : kh_.size());
  return 2 * layers * kv_dim_ * dtype_bytes(dtype_, 1);
}

void KVCache::reserve_more(int64_t n) {
  const int64_t need = size_ + n;
  if (need > capacity_)
    fail("context full: ", size_, " tokens cached + ", n, " new exceed the context size ", capacity_);
  if (need <= allocated_) return;
  // Grow geometrically (at least 256 positions) to keep reallocations rare.
  const int64_t grown = std::min(capacity_, std::max({need, allocated_ * 2, int64_t{256}}));
  const auto len = static_cast<size_t>(grown * kv_dim_);
  for (auto* planes : {&kf_, &vf_})
    for (auto& p : *planes) p.resize(len);
  for (auto* planes : {&kh_, &vh_})
    for (auto& p : *planes) p.resize(len);
  allocated_ = grown;
}

void KVCache::advance(int64_t n) {
  if (size_ + n > allocated_) fail("KVCache::advance past reserved storage");
  size_ += n;
}

void KVCache::truncate(int64_t n) { size_ = std::min(size_, std::max<int64_t>(0, n)); }

void KVCache::copy_prefix(const KVCache& from, int64_t n) {
  if (from.dtype_ != dtype_ || from.kv_dim_ != kv_dim_ || from.kf_.size() != kf_.size() || from.kh_.size() != kh_.size())
    fail("KVCache::copy_prefix between caches of different shapes or types");
  if (n < 0 || n > from.size_) fail("KVCache::copy_prefix: ", n, " positions of ", from.size_);
  size_ = 0;
  reserve_more(n);
  const auto len = static_cast<std::ptrdiff_t>(n * kv_dim_);
  for (size_t l = 0; l < kf_.size(); ++l) {
    std::copy(from.kf_[l].begin(), from.kf_[l].begin() + len, kf_[l].begin());
    std::copy(from.vf_[l].begin(), from.vf_[l].begin() + len, vf_[l].begin());
  }
  for (size_t l = 0; l < kh_.size(); ++l) {
    std::copy(from.kh_[l].begin(), from.kh_[l].begin() + len, kh_[l].begin());
    std::copy(from.vh_[l].begin(), from.vh_[l].begin() + len, vh_[l].begin());
  }
  size_ = n;
}

void KVCache::store(int64_t layer, int64_t pos, const float* key, const float* value) {
  const auto at = static_cast<size_t>(pos * kv_dim_);
  if (dtype_ == DType::F32) {
    std::copy(key, key + kv_dim_, kf_[layer].data() + at);
    std::copy(value, value + kv_dim_, vf_[layer].data() + at);
  } else {
    convert_from_f32(key, dtype_, kh_[layer].data() + at, kv_dim_);
    convert_from_f32(value, dtype_, vh_[layer].data() + at, kv_dim_);
  }
}

float KVCache::key_at(int64_t layer, int64_t pos, int64_t i) const {
  const auto at = static_cast<size_t>(pos * kv_dim_ + i);
  if (dtype_ == DType::F32) return kf_[layer][at];
  return dtype_ == DType::F16 ? f16_to_f32(kh_[layer][at]) : bf16_to_f32(kh_[layer][at]);
}

float KVCache::value_at(int64_t layer, int64_t pos, int64_t i) const {
  const auto at = static_cast<size_t>(pos * kv_dim_ + i);
  if (dtype_ == DType::F32) return vf_[layer][at];
  return dtype_ == DType::F16 ? f16_to_f32(vh_[layer][at]) : bf16_to_f32(vh_[layer][at]);
}

void attend_cached(const KVCache& cache, int64_t layer, int64_t first, int64_t n, int64_t offset, const float* q,
                   int64_t hd, float scale, float* scores, float* out, int64_t heads, float softcap) {
  const int64_t stride = cache.kv_dim();
  switch (cache.dtype()) {
    case DType::F32:
      return compute::attend(q, cache.key_f32(layer, first) + offset, cache.value_f32(layer, first) + offset, stride, n, hd,
                    scale, scores, out, heads, softcap);
    case DType::F16:
      return compute::attend_f16(q, cache.key_16(layer, first) + offset, cache.value_16(layer, first) + offset, stride, n, hd,
                        scale, scores, out, heads, softcap);
    default:
      return compute::attend_bf16(q, cache.key_16(layer, first) + offset, cache.value_16(layer, first) + offset, stride, n, hd,
                         scale, scores, out, heads, softcap);
  }
}

}  // namespace graft::runtime
