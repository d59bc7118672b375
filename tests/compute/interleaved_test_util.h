// Running an interleaved copy (compute/interleaved_blocks.h) on one chosen kernel, the SIMD kernels
// as a test parameter, and activations at the ends of their range: shared by the GGUF-block and the
// mlx-affine interleaved tests.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "graft/core/thread_pool.h"
#include "compute/interleaved_blocks.h"
#include "compute/matmul_q8.h"

namespace graft::test {

using compute::detail::Q8Kernel;

// y = x·wᵀ on the copy b with `kernel`, columns j0 .. j1 (the others keep −1).
inline std::vector<float> run_interleaved(const compute::InterleavedBlocks& b, const float* x, int64_t m,
                                          Q8Kernel kernel, int64_t j0 = 0, int64_t j1 = -1) {
  compute::detail::Q8Activations act;
  compute::detail::quantize_activations(x, m, b.k, act);
  ThreadPool pool(1);
  compute::detail::prepare_interleaved(act, kernel, &pool);
  std::vector<float> y(static_cast<size_t>(m * b.n), -1.0f);
  compute::detail::interleaved_cols(b, act, y.data(), b.n, false, j0, j1 < 0 ? b.n : j1, kernel);
  return y;
}

// The SIMD group kernels, each tested where the CPU has it (skipped, and said so, where it has not).
inline constexpr Q8Kernel kSimdKernels[] = {Q8Kernel::Avx2, Q8Kernel::AvxVnni, Q8Kernel::Avx512Vnni};
inline bool kernel_missing(Q8Kernel k) { return !compute::detail::q8_kernel_supported(k); }
inline std::string kernel_name(Q8Kernel k) { return compute::detail::q8_kernel_name(k); }

// Activation rows at ±127 (every group's max |x| is its value): all +1, all −1, then signs
// alternating every 1, 2, 3 … columns: the pairs of a naive maddubs add up, cancel, and mix; every
// fourth row's halves 0..15 at ±2048 (the largest shift, 11: the block's shifted integer sum at its
// largest, 2^11·16·255·127 < 2^31).
inline std::vector<float> extreme_x(int64_t m, int64_t k) {
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c) {
      const float v = i == 0 ? 1.0f : i == 1 ? -1.0f : (c / (i - 1)) % 2 ? 1.0f : -1.0f;
      x[i * k + c] = i % 4 == 3 && c % 32 < 16 ? 2048.0f * v : v;
    }
  return x;
}

}  // namespace graft::test
