// BF16 weights against BF16-rounded activations on vdpbf16ps (AVX512-BF16): the fast path for
// dense BF16 matrices under `--activations q8` on CPUs that have the instruction (runtime's
// prepare_weight sets compute::Weight::bf16_activations). `--activations f32`, AVX2-only CPUs and
// GRAFT_BF16_DOT=0 keep kernels.h's exact F32-FMA path (BF16 weights widened, x never rounded).
//
// The arithmetic, fixed for every m, tile and thread count (so a prefill row equals its decode bit
// for bit; it differs from the F32 path's bits):
//  1. each activation row is rounded once to BF16 (round_to_bf16: vcvtne2ps2bf16's rounding) and
//     padded with zeros to kp = k rounded up to 32;
//  2. each output keeps 16 F32 lanes; for every step of 32 k (the last one masked: weights beyond k
//     read as zero), lane j gets vdpbf16ps's two products (bf16_dot_lane);
//  3. the 16 lanes are summed by the dense kernels' fixed tree (halves, quarters, pairs), then added
//     to y when accumulating.
// Error against F32 math on the unrounded x: each x element is off by at most 2^-9 relative (BF16
// keeps 8 significant bits), so |y - Σ x·w| <= 2^-8 · Σ|x·w| (the rounding of x, with a factor two
// to cover the F32 summation error for k up to 2^15); tests/runtime/bf16_dot_test.cpp checks it.
#pragma once
#include <cstdint>
#include <vector>

#include "graft/core/tensor.h"
#include "graft/compute/kernels.h"

namespace graft::compute {

// Whether matmul_bf16_dot can run here: AVX-512 F/BW/VL + BF16, GRAFT_BF16_DOT is not "0" and
// GRAFT_MATMUL_ISA is not "avx2" (which stands for an AVX2-only machine).
bool bf16_dot_supported();

// vcvtne2ps2bf16's rounding of one F32 (Intel SDM's convert_fp32_to_bfloat16): round to nearest
// even; zero and denormal inputs to a zero of the same sign; infinities truncated; NaNs truncated
// with the quiet bit set.
uint16_t round_to_bf16(float x);

// One lane of vdpbf16ps (Intel SDM pseudo-code): acc += x_odd·w_odd, then acc += x_even·w_even,
// each an F32 fma rounded to nearest even with denormal inputs read as zero and denormal results
// flushed to zero (MXCSR neither read nor written).
float bf16_dot_lane(float acc, uint16_t x_even, uint16_t w_even, uint16_t x_odd, uint16_t w_odd);

// x [m, k] rounded to BF16 row by row, each row padded with zeros to kp (a multiple of 32).
struct Bf16Rows {
  int64_t m = 0, k = 0, kp = 0;
  std::vector<uint16_t> bits;  // [m][kp]
};
void round_rows_bf16(const float* x, int64_t m, int64_t k, Bf16Rows& out, ThreadPool* pool = nullptr);

// Output columns [j0, j1) of y[m, n] = x · wᵀ (+ y) for a BF16 weight w [n, k] with the same k;
// bf16_dot_supported() must hold.
void bf16_dot_cols(const Bf16Rows& x, const Tensor& w, float* y, bool accumulate, int64_t j0, int64_t j1);

// The whole product: x rounded once, then every column over the pool.
void matmul_bf16_dot(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
                     bool accumulate = false, const ColumnEpilogue* epilogue = nullptr);

// The same arithmetic in plain scalar code (round_to_bf16, bf16_dot_lane, the same tree): the
// reference the kernel matches bit for bit. Runs on any CPU.
void matmul_bf16_dot_reference(const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
                               bool accumulate = false);

}  // namespace graft::compute
