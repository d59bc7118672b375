// Internal to the compute layer: the AVX512-BF16 kernels behind compute/bf16_dot.h.
#pragma once
#include <cstdint>

namespace graft::compute::detail {

// Rows [i0, i1) of x [*, k] rounded to BF16 by vcvtne2ps2bf16 into out [*, kp] (the padding is
// left as it is: zero).
void round_rows_bf16_avx512(const float* x, int64_t k, int64_t kp, uint16_t* out, int64_t i0, int64_t i1);

// Columns [j0, j1) of y [m, n] from BF16 rows x [m, kp] and weights w [n, k].
void bf16_dot_cols_avx512(const uint16_t* x, int64_t m, int64_t k, int64_t kp, const uint16_t* w, int64_t n, float* y,
                          bool accumulate, int64_t j0, int64_t j1);

}  // namespace graft::compute::detail
