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
    : capacity_(capacity), kv_dim_(c.kv_dim()), head_dim_(c.head_dim), dtype_(dtype) {
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
  for (auto* planes : {&kf_, &vf_})
    for (auto& p : *planes) p = regrown(p, grown);
  for (auto* planes : {&kh_, &vh_})
    for (auto& p : *planes) p = regrown(p, grown);
  allocated_ = grown;
}

// A layer's plane for `grown` positions a head, each head's allocated_ positions moved to its new place.
template <class T>
std::vector<T> KVCache::regrown(const std::vector<T>& plane, int64_t grown) const {
  std::vector<T> out(static_cast<size_t>(grown * kv_dim_));
  const int64_t run = allocated_ * head_dim_;
  for (int64_t h = 0; h < kv_heads() && run > 0; ++h)
    std::copy_n(plane.begin() + h * run, run, out.begin() + h * grown * head_dim_);
  return out;
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
  // Head by head: the two caches' allocations differ, so do their heads' places.
  auto copy = [&](const auto& src, auto& dst) {
    for (size_t l = 0; l < src.size(); ++l)
      for (int64_t h = 0; h < kv_heads(); ++h)
        std::copy_n(src[l].begin() + static_cast<std::ptrdiff_t>(from.at(h, 0)), n * head_dim_,
                    dst[l].begin() + static_cast<std::ptrdiff_t>(at(h, 0)));
  };
  copy(from.kf_, kf_);
  copy(from.vf_, vf_);
  copy(from.kh_, kh_);
  copy(from.vh_, vh_);
  size_ = n;
}

void KVCache::store(int64_t layer, int64_t pos, const float* key, const float* value) {
  for (int64_t h = 0; h < kv_heads(); ++h) {
    const float* k = key + h * head_dim_;
    const float* v = value + h * head_dim_;
    if (dtype_ == DType::F32) {
      std::copy_n(k, head_dim_, kf_[layer].data() + at(h, pos));
      std::copy_n(v, head_dim_, vf_[layer].data() + at(h, pos));
    } else {
      convert_from_f32(k, dtype_, kh_[layer].data() + at(h, pos), head_dim_);
      convert_from_f32(v, dtype_, vh_[layer].data() + at(h, pos), head_dim_);
    }
  }
}

float KVCache::key_at(int64_t layer, int64_t pos, int64_t i) const {
  const size_t a = at(i / head_dim_, pos) + static_cast<size_t>(i % head_dim_);
  if (dtype_ == DType::F32) return kf_[layer][a];
  return dtype_ == DType::F16 ? f16_to_f32(kh_[layer][a]) : bf16_to_f32(kh_[layer][a]);
}

float KVCache::value_at(int64_t layer, int64_t pos, int64_t i) const {
  const size_t a = at(i / head_dim_, pos) + static_cast<size_t>(i % head_dim_);
  if (dtype_ == DType::F32) return vf_[layer][a];
  return dtype_ == DType::F16 ? f16_to_f32(vh_[layer][a]) : bf16_to_f32(vh_[layer][a]);
}

void attend_cached(const KVCache& cache, int64_t layer, int64_t first, int64_t n, int64_t kv_head, const float* q,
                   int64_t hd, float scale, float* scores, float* out, int64_t heads, float softcap) {
  const int64_t h = kv_head;
  switch (cache.dtype()) {
    case DType::F32:
      return compute::attend(q, cache.key_f32(layer, h, first), cache.value_f32(layer, h, first), hd, n, hd, scale,
                             scores, out, heads, softcap);
    case DType::F16:
      return compute::attend_f16(q, cache.key_16(layer, h, first), cache.value_16(layer, h, first), hd, n, hd, scale,
                                 scores, out, heads, softcap);
    default:
      return compute::attend_bf16(q, cache.key_16(layer, h, first), cache.value_16(layer, h, first), hd, n, hd, scale,
                                  scores, out, heads, softcap);
  }
}

}  // namespace graft::runtime
