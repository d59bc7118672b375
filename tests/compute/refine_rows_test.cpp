// compute::refine_rows (graft/compute/weight.h): chosen outputs of an 8-bit-activation matmul moved
// to the dequantized rows' unrounded dot products, whatever else was added to them staying, on each
// weight kind that rounds (GGUF blocks as stored, interleaved; mlx affine interleaved); a no-op on
// the kinds that do not. Reference: the dequantized row times x in double (tolerance 1e-6 relative:
// the refined value is that double sum, rounded to F32 once, plus the F32 remainder of the rest).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string_view>
#include <vector>

#include "graft/compute/weight.h"
#include "graft/core/affine_quant.h"
#include "graft/core/gguf_blocks.h"
#include "graft/core/thread_pool.h"
#include "support/q8_test_util.h"

namespace graft::compute {
namespace {

std::vector<double> exact_dots(const std::vector<float>& dense, const float* x, int64_t n, int64_t k) {
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t c = 0; c < k; ++c) out[static_cast<size_t>(j)] += static_cast<double>(dense[j * k + c]) * x[c];
  return out;
}

// matmul, 0.25 added to every output (an adapter's term), refine rows {0, 5, 17, n − 1}: those are
// exact + 0.25, the rest keep matmul's value + 0.25, which differs from exact somewhere.
void check(Weight w, const std::vector<float>& dense, bool prepare, std::string_view what) {
  const int64_t n = w.rows, k = w.cols;
  ThreadPool pool(2);
  if (prepare) prepare_weight(w, &pool);
  const auto x = test::random_x(1, k, 5);
  std::vector<float> y(static_cast<size_t>(n));
  matmul(pool, x.data(), 1, w, y.data());
  for (float& v : y) v += 0.25f;
  const std::vector<float> before = y;
  const std::vector<int64_t> rows = {0, 5, 17, n - 1};
  refine_rows(w, x.data(), rows, y.data());
  const auto exact = exact_dots(dense, x.data(), n, k);
  double rest = 0;
  for (int64_t j = 0; j < n; ++j) {
    const bool chosen = std::find(rows.begin(), rows.end(), j) != rows.end();
    if (chosen) {
      EXPECT_NEAR(y[j], exact[j] + 0.25, 1e-6 * (1 + std::fabs(exact[j]))) << what << " row " << j;
    } else {
      EXPECT_EQ(y[j], before[j]) << what << " row " << j;
      rest = std::max(rest, std::fabs(y[j] - 0.25 - exact[j]));
    }
  }
  EXPECT_GT(rest, 1e-6) << what << ": matmul's other outputs carry the activations' rounding";
}

TEST(RefineRows, MovesChosenOutputsToTheUnroundedValue) {
  const int64_t n = 40, k = 256;
  for (DType t : {DType::Q8_0, DType::Q4_1, DType::Q4_K}) {
    const Tensor blocks = test::random_blocks(t, n, k, 3);
    std::vector<float> dense(static_cast<size_t>(n * k));
    dequantize_gguf_blocks(t, blocks.data, dense.data(), n * k);
    check(Weight::of(blocks), dense, false, dtype_name(t));  // as stored (WeightKind::Blocks)
    check(Weight::of(blocks), dense, true, dtype_name(t));   // interleaved where the CPU runs it
  }
  std::vector<float> f(static_cast<size_t>(n * k));
  for (size_t i = 0; i < f.size(); ++i) f[i] = std::sin(0.37f * static_cast<float>(i)) * 0.05f;
  const AffineQuantized q = quantize_affine(Tensor::owned(DType::F32, {n, k}, std::vector<uint8_t>(
                                                reinterpret_cast<const uint8_t*>(f.data()),
                                                reinterpret_cast<const uint8_t*>(f.data() + f.size()))),
                                            4, 64, DType::BF16);
  std::vector<float> dense(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j) dequantize_affine_row(q, j, &dense[j * k]);
  if (interleave_enabled_affine()) check(Weight::of(q), dense, true, "mlx affine 4-bit");
}

TEST(RefineRows, LeavesKindsThatDoNotRoundAlone) {
  const int64_t n = 8, k = 64;
  std::vector<float> f(static_cast<size_t>(n * k), 0.5f);
  Weight w = Weight::of(Tensor::owned(DType::F32, {n, k}, std::vector<uint8_t>(
                                          reinterpret_cast<const uint8_t*>(f.data()),
                                          reinterpret_cast<const uint8_t*>(f.data() + f.size()))));
  const auto x = test::random_x(1, k, 9);
  std::vector<float> y(static_cast<size_t>(n), 7.0f);
  const std::vector<int64_t> rows = {1, 2};
  refine_rows(w, x.data(), rows, y.data());
  for (float v : y) EXPECT_EQ(v, 7.0f);
}

}  // namespace
}  // namespace graft::compute
