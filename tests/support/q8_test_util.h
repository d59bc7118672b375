// Test inputs for the GGUF block kernels: random blocks of any format and random activations.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "graft/core/gguf_blocks.h"
#include "graft/core/tensor.h"
#include "graft/compute/weight.h"
#include "graft/core/thread_pool.h"

namespace graft::test {

// Random codes with finite random f16 scales (and mins) of about 0.01.
inline Tensor random_blocks(DType t, int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t bb = dtype_block_bytes(t), blocks = n * k / dtype_block_elems(t);
  std::vector<uint8_t> bytes(static_cast<size_t>(blocks * bb));
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < blocks; ++b)
    for (int off : gguf_block_f16_fields(t)) {
      const uint16_t h = f32_to_f16(nd(rng) * 0.01f);
      std::memcpy(&bytes[b * bb + off], &h, 2);
    }
  return Tensor::owned(t, {n, k}, std::move(bytes));
}

// Normal activations, each 16 columns at its own magnitude (2^-6 .. 2^5: so that the two halves of
// a block get scales a power of two apart, up to the shift limit of 11), with one all-zero block
// when there is room.
inline std::vector<float> random_x(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (size_t g = 0; g < x.size(); g += 16) {
    const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 12) - 6);
    for (size_t c = g; c < std::min(x.size(), g + 16); ++c) x[c] = mag * nd(rng);
  }
  if (m * k >= 64) std::fill_n(x.begin() + 32, 32, 0.0f);  // an all-zero activation block
  return x;
}

// How far an 8-bit-activation result may be from F32 math on the dequantized weights: the
// activation rounding Σ_groups (d_x / 2)·Σ|w| over the groups of 16 (d_x at most twice the group's
// own max|x| / 127, and at most the block's: matmul_q8.h's scales), plus 1e-5 relative of Σ|w·x| for
// F32 rounding.
inline double activation_rounding_bound(const float* x, const float* w, int64_t k) {
  double bound = 1e-30, mag = 0;
  for (int64_t c0 = 0; c0 < k; c0 += 32) {
    float amax[2] = {0, 0}, wabs[2] = {0, 0};
    for (int64_t c = c0; c < c0 + 32; ++c) {
      amax[(c - c0) / 16] = std::max(amax[(c - c0) / 16], std::fabs(x[c]));
      wabs[(c - c0) / 16] += std::fabs(w[c]);
      mag += std::fabs(x[c] * w[c]);
    }
    for (int h = 0; h < 2; ++h) bound += std::min(2.0f * amax[h], std::max(amax[0], amax[1])) / 127.0 / 2.0 * wabs[h];
  }
  return bound + 1e-5 * mag;
}

// Checks every element of got [m, n] (= x [m, k] · w [n, k]ᵀ by an 8-bit-activation kernel) against
// F32 math on the dequantized weights within activation_rounding_bound; returns the largest share
// of its bound an error used (callers check it is not vacuous).
inline double check_activation_rounding(const std::vector<float>& got, const std::vector<float>& x, int64_t m,
                                        int64_t k, const Tensor& w, const std::string& label) {
  const int64_t n = w.shape[0];
  std::vector<float> ref(got.size());
  compute::matmul_reference(x.data(), m, k, w, ref.data());
  const Tensor wf = to_f32(w);
  double worst = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const double bound = activation_rounding_bound(&x[i * k], wf.as<float>() + j * k, k);
      const double err = std::fabs(static_cast<double>(got[i * n + j]) - ref[i * n + j]);
      EXPECT_LE(err, bound) << label << " m=" << m << " n=" << n << " k=" << k << " at [" << i << ", " << j << "]";
      if (err > bound) return worst;
      worst = std::max(worst, err / bound);
    }
  return worst;
}

// y = x · wᵀ through the public entry point on a prepared matrix, as a model runs it.
inline std::vector<float> run_matrix(const compute::Weight& w, const float* x, int64_t m, int threads) {
  ThreadPool pool(threads);
  std::vector<float> y(static_cast<size_t>(m * w.rows), -1.0f);
  compute::matmul(pool, x, m, w, y.data());
  return y;
}

// matmul_many over `ws` (one call, 2 threads: their columns share the parallel split) gives each
// matrix the bits of its own matmul.
inline void expect_many_equals_each(std::initializer_list<const compute::Weight*> ws, const float* x, int64_t m) {
  ThreadPool pool(2);
  std::vector<std::vector<float>> ys;
  std::vector<compute::MatmulTarget> targets;
  for (const compute::Weight* w : ws) ys.emplace_back(static_cast<size_t>(m * w->rows));
  size_t i = 0;
  for (const compute::Weight* w : ws) targets.push_back({w, ys[i++].data()});
  compute::matmul_many(pool, x, m, targets);
  i = 0;
  for (const compute::Weight* w : ws) EXPECT_EQ(ys[i++], run_matrix(*w, x, m, 1)) << "matrix " << i - 1;
}

}  // namespace graft::test
