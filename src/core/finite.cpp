#include "graft/core/finite.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "graft/core/gguf_blocks.h"

namespace graft {

namespace {

// The first index i < n whose bits have every exponent bit set (NaN or ±inf).
template <class U>
int64_t first_all_ones(const uint8_t* p, int64_t n, U exponent) {
  // Blocks of 64: an OR of the per-element tests (vectorized by the compiler), then the exact index
  // only in the block that has one.
  for (int64_t b = 0; b < n; b += 64) {
    const int64_t e = b + 64 < n ? b + 64 : n;
    bool any = false;
    for (int64_t i = b; i < e; ++i) {
      U v;
      std::memcpy(&v, p + i * sizeof(U), sizeof(U));
      any |= (v & exponent) == exponent;
    }
    if (!any) continue;
    for (int64_t i = b; i < e; ++i) {
      U v;
      std::memcpy(&v, p + i * sizeof(U), sizeof(U));
      if ((v & exponent) == exponent) return i;
    }
  }
  return -1;
}

// Elements [e0, e1) of t (e0, e1 on block boundaries): the first non-finite one, or -1.
int64_t first_in(const Tensor& t, int64_t e0, int64_t e1) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  const int64_t n = e1 - e0;
  auto found = [e0](int64_t i) { return i < 0 ? i : e0 + i; };
  switch (t.dtype) {
    case DType::F32: return found(first_all_ones<uint32_t>(p + e0 * 4, n, 0x7f800000u));
    case DType::F16: return found(first_all_ones<uint16_t>(p + e0 * 2, n, uint16_t{0x7c00}));
    case DType::BF16: return found(first_all_ones<uint16_t>(p + e0 * 2, n, uint16_t{0x7f80}));
    default: break;
  }
  const int64_t block_bytes = dtype_block_bytes(t.dtype), block_elems = dtype_block_elems(t.dtype);
  const std::vector<int> fields = gguf_block_f16_fields(t.dtype);
  for (int64_t b = e0 / block_elems; b < e1 / block_elems; ++b)
    for (int off : fields) {
      uint16_t h;
      std::memcpy(&h, p + b * block_bytes + off, 2);
      if ((h & 0x7c00) == 0x7c00) return b * block_elems;
    }
  return -1;
}

}  // namespace

int64_t first_non_finite(const Tensor& t, ThreadPool* pool) {
  const int64_t n = t.numel();
  const bool floats = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16;
  if (!t.data || n == 0 || (!floats && !dtype_is_quantized(t.dtype))) return -1;
  // Pieces of 1 MiB or more (whole blocks): below that a parallel_for costs more than the pass.
  const int64_t unit = floats ? 1 : dtype_block_elems(t.dtype), units = n / unit;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 20) / std::max<int64_t>(1, t.nbytes() / units));
  if (!pool || pool->size() < 2 || units < 2 * grain) return first_in(t, 0, n);
  std::mutex mu;
  int64_t first = -1;
  pool->parallel_for(
      units,
      [&](int64_t u0, int64_t u1) {
        const int64_t i = first_in(t, u0 * unit, u1 * unit);
        std::lock_guard<std::mutex> lock(mu);
        if (i >= 0 && (first < 0 || i < first)) first = i;
      },
      grain);
  return first;
}

}  // namespace graft
