// Internal to the compute layer (compute/weight.cpp dispatches through it): GGUF block formats as the integer kernels see them.
//
// A weight row of k columns is unpacked (into a small per-thread buffer, once per matmul call and
// row, whatever the number of activation rows) to one 8-bit code per weight and F32 scales:
//   w[c] = a[c / 16] · q[c] + b[c / 16]
// with a and b exact in F32 (an f16 scale times a small integer). Formats with a per-sub-block
// minimum (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) keep unsigned codes 0..31 and b ≠ 0; all others fold their
// offset into signed codes (−128..127) and have b = 0. The scales are stored expanded: a4[c / 4] =
// a[c / 16] (one per four columns, the granularity of the integer dot products' lanes).
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "graft/core/dtype.h"

namespace graft::compute::detail {

struct QuantFormat {
  DType type;
  bool has_min;  // unsigned codes and a per-16 min term b; otherwise signed codes and b = 0
  // Unpacks one row of k columns (k a multiple of the block size): q[k], a4[k / 4], and when
  // has_min, b16[k / 16].
  void (*unpack)(const uint8_t* row, int64_t k, int8_t* q, float* a4, float* b16);
};

// The format of a GGUF block dtype, or nullptr for any other dtype.
const QuantFormat* quant_format(DType t);

const QuantFormat* quant_format_legacy(DType t);   // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL
const QuantFormat* quant_format_kquants(DType t);  // Q2_K .. Q6_K, IQ4_XS

// Helpers shared by the unpackers.
inline void fill4(float* a4, float v) { a4[0] = a4[1] = a4[2] = a4[3] = v; }  // one 16-column group
inline float f16_at(const uint8_t* p) {  // exact, as f16_to_f32 (F16C is the build's baseline)
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

}  // namespace graft::compute::detail
