#include "graft/core/finite.h"

#include <cstring>

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

}  // namespace

int64_t first_non_finite(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data);
  const int64_t n = t.numel();
  if (!p || n == 0) return -1;
  switch (t.dtype) {
    case DType::F32: return first_all_ones<uint32_t>(p, n, 0x7f800000u);
    case DType::F16: return first_all_ones<uint16_t>(p, n, uint16_t{0x7c00});
    case DType::BF16: return first_all_ones<uint16_t>(p, n, uint16_t{0x7f80});
    default: break;
  }
  if (!dtype_is_quantized(t.dtype)) return -1;
  const int64_t block_bytes = dtype_block_bytes(t.dtype), block_elems = dtype_block_elems(t.dtype);
  const std::vector<int> fields = gguf_block_f16_fields(t.dtype);
  for (int64_t b = 0; b < n / block_elems; ++b)
    for (int off : fields) {
      uint16_t h;
      std::memcpy(&h, p + b * block_bytes + off, 2);
      if ((h & 0x7c00) == 0x7c00) return b * block_elems;
    }
  return -1;
}

}  // namespace graft
