// mlx-lm affine 4/8-bit matrices interleaved 16 rows at a time (compute/interleaved_blocks.h,
// interleaved_affine.cpp), run by the block-model kernels of the GGUF copies. Weights: mx.quantize's
// arithmetic (quantize_affine, checked bit for bit against mlx in quantized_test) on random rows, groups
// of 32, 64 and 128 columns, BF16 and F32 scales, on awkward shapes (one row, n not a multiple of 16,
// one block, k an odd number of blocks). Tolerances, and why:
//   - the layout: every row read back from the copy equals mlx's packed words and the F32-widened
//     scales and biases exactly;
//   - the AVX2, AVX-VNNI and AVX512-VNNI kernels against the scalar block model (each where the CPU
//     has it): exact (integer block sums are exact, also at codes 0/15/255 against activations ±127,
//     where AVX2's maddubs on the unsigned 8-bit codes would saturate; the F32 chain is the same
//     operations in the same order);
//   - the block model against F32 math on the dequantized weights (double accumulation): the bound of
//     activation rounding, Σ_blocks (d_x / 2)·Σ|w|, plus 1e-5 relative of Σ|w·x| (q8_test_util.h), with
//     a check that the error uses a real part of it;
//   - rows of a prefill against the same rows alone, 1 against 3 threads, matmul_many against one
//     matmul per target: exact.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graft/core/affine_quant.h"
#include "graft/core/error.h"
#include "graft/compute/weight.h"
#include "compute/interleaved_test_util.h"
#include "support/q8_test_util.h"
#include "compute/interleaved_blocks.h"

namespace graft::compute::detail {
namespace {

using namespace graft::test;

struct Case {
  int bits, group;
  DType scale_dtype;
  int64_t m, n, k;
};
std::string name(const Case& c) {
  return std::to_string(c.bits) + "-bit g" + std::to_string(c.group) + " " + std::string(dtype_name(c.scale_dtype)) +
         " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k);
}

// m = 9, 20: the kernels' tiles of eight (AVX-512) and four (256-bit) activation rows plus a remainder.
std::vector<Case> cases() {
  struct S { int64_t m, n, k; };
  const S shapes[] = {{1, 1, 32}, {2, 15, 64}, {3, 17, 128}, {9, 33, 384}, {20, 17, 576}, {5, 40, 160}, {1, 16, 256}};
  std::vector<Case> out;
  for (int bits : {4, 8})
    for (int group : {32, 64, 128})
      for (const S& s : shapes)
        if (s.k % group == 0)
          for (DType sd : {DType::BF16, DType::F32}) out.push_back({bits, group, sd, s.m, s.n, s.k});
  return out;
}

AffineQuantized random_affine(const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(c.n * c.k));
  for (auto& v : w) v = nd(rng);
  std::vector<uint8_t> bytes(w.size() * 4);
  std::memcpy(bytes.data(), w.data(), bytes.size());
  return quantize_affine(Tensor::owned(DType::F32, {c.n, c.k}, std::move(bytes)), c.bits, c.group, c.scale_dtype);
}

TEST(InterleavedAffine, EveryRowReadsBackAsMlxStoresIt) {
  for (const Case& c : cases()) {
    const AffineQuantized q = random_affine(c, 3);
    const auto b = compute::interleave_affine(q);
    ASSERT_TRUE(b->affine());
    EXPECT_EQ(b->kind, c.bits == 4 ? compute::InterleavedKind::Affine4 : compute::InterleavedKind::Affine8);
    EXPECT_EQ(b->groups(), (c.n + 15) / 16);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->base) % 64, 0u);
    EXPECT_EQ(b->group_bytes % 64, 0);
    const int64_t words = c.k * c.bits / 32, groups = c.k / c.group;
    std::vector<uint32_t> packed(static_cast<size_t>(words));
    std::vector<float> s(static_cast<size_t>(groups)), bi(s.size()), s_ref(s.size()), b_ref(s.size());
    for (int64_t j = 0; j < c.n; ++j) {
      compute::deinterleave_affine_row(*b, j, packed.data(), s.data(), bi.data());
      affine_row_params(q, j, s_ref.data(), b_ref.data());
      ASSERT_EQ(std::memcmp(packed.data(), q.packed.as<uint32_t>() + j * words, words * 4), 0) << name(c) << " row " << j;
      ASSERT_EQ(s, s_ref) << name(c) << " row " << j;
      ASSERT_EQ(bi, b_ref) << name(c) << " row " << j;
    }
  }
}

TEST(InterleavedAffine, RefusesTheOtherInverse) {
  const auto b = compute::interleave_affine(random_affine({4, 32, DType::F32, 1, 3, 64}, 1));
  std::vector<uint8_t> row(64);
  EXPECT_THROW(compute::deinterleave_row(*b, 0, row.data()), Error);
}

class InterleavedAffineKernel : public ::testing::TestWithParam<Q8Kernel> {
 protected:
  void SetUp() override {
    if (kernel_missing(GetParam())) GTEST_SKIP() << "the CPU lacks " << kernel_name(GetParam());
  }
};

TEST_P(InterleavedAffineKernel, EqualsTheBlockModel) {
  for (const Case& c : cases()) {
    const auto b = compute::interleave_affine(random_affine(c, 5));
    const auto x = random_x(c.m, c.k, 7);
    EXPECT_EQ(run_interleaved(*b, x.data(), c.m, GetParam()), run_interleaved(*b, x.data(), c.m, Q8Kernel::Scalar)) << name(c);
  }
}

// Codes at the ends of their range (0 and 15 / 255) against activations ±127 in sign patterns that
// make the products add up, cancel and mix: where AVX2's maddubs on the stored unsigned 8-bit codes
// would saturate its i16 pairs (2·255·127 > 32767) unless the codes are taken as q − 128.
TEST_P(InterleavedAffineKernel, EqualsTheBlockModelAtExtremeCodes) {
  const int64_t m = 6, n = 24, k = 256;
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < k; ++c)
      x[i * k + c] = i == 0 ? 1.0f : i == 1 ? -1.0f : i == 5 ? (c == 7 ? 3e4f : 1e-3f) : (c / (i - 1)) % 2 ? 1.0f : -1.0f;
  for (int64_t c = 0; c < k; ++c)
    if (c % 32 < 16) x[4 * k + c] *= 2048.0f;  // row 4: codes ±127 at the largest shift (11) in every block
  compute::detail::Q8Activations act;
  compute::detail::quantize_activations(x.data(), m, k, act);
  ASSERT_EQ(act.q[0], 127);
  ASSERT_EQ(act.q[k], -127);
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) {
      // Codes by block: all lowest, all highest, or both alternating; scales and biases of both signs.
      const int64_t words = k * bits / 32;
      const uint32_t top = (1u << bits) - 1;
      std::vector<uint8_t> packed(static_cast<size_t>(n * words * 4));
      auto* wp = reinterpret_cast<uint32_t*>(packed.data());
      for (int64_t j = 0; j < n; ++j)
        for (int64_t c = 0; c < k; ++c) {
          const int64_t blk = (j * k + c) / 32;
          const bool lowest = blk % 3 == 0 || (blk % 3 == 2 && c % 2 == 0);
          wp[j * words + c * bits / 32] |= (lowest ? 0u : top) << (bits * (c % (32 / bits)));
        }
      std::vector<float> sc(static_cast<size_t>(n * k / group)), bi(sc.size());
      for (size_t i = 0; i < sc.size(); ++i) sc[i] = (i % 2 ? -0.02f : 0.03f), bi[i] = (i % 3 ? 0.5f : -0.25f);
      auto as_tensor = [](const std::vector<float>& v, int64_t rows) {
        std::vector<uint8_t> b(v.size() * 4);
        std::memcpy(b.data(), v.data(), b.size());
        return Tensor::owned(DType::F32, {rows, static_cast<int64_t>(v.size()) / rows}, std::move(b));
      };
      const AffineQuantized q = make_affine_quantized(Tensor::owned(DType::U32, {n, words}, packed), as_tensor(sc, n),
                                                      as_tensor(bi, n), bits, group, n, k, "extreme");
      const auto b = compute::interleave_affine(q);
      EXPECT_EQ(run_interleaved(*b, x.data(), m, GetParam()), run_interleaved(*b, x.data(), m, Q8Kernel::Scalar)) << bits << "-bit g" << group;
    }
}

INSTANTIATE_TEST_SUITE_P(InterleavedSimd, InterleavedAffineKernel, ::testing::ValuesIn(kSimdKernels),
                         [](const auto& info) { return kernel_name(info.param); });

TEST(InterleavedAffine, WithinActivationRoundingOfF32MathOnDequantizedWeights) {
  for (const Case& c : cases()) {
    const AffineQuantized q = random_affine(c, 11);
    const auto b = compute::interleave_affine(q);
    const auto x = random_x(c.m, c.k, 13);
    const auto got = run_interleaved(*b, x.data(), c.m, Q8Kernel::Scalar);
    const double worst = check_activation_rounding(got, x, c.m, c.k, dequantize_affine(q), name(c));
    if (c.k >= 160 && c.m > 1) {
      EXPECT_GT(worst, 0.002) << name(c);  // the bound is not vacuous
    }
  }
}

// Through the public entry points, as a model runs them.
Weight affine_matrix(const Case& c, uint32_t seed, ThreadPool& pool) {
  Weight m = Weight::of(random_affine(c, seed));
  if (compute::prepare_weight(m, &pool) == 0) m.interleaved = compute::interleave_affine(m.quant);  // (GRAFT_Q8_INTERLEAVE=0)
  return m;
}

TEST(InterleavedAffine, PrefillRowsEqualDecodeRowsAndThreadCountsAgree) {
  ThreadPool prep(2);
  for (int bits : {4, 8}) {
    const int64_t k = 576, n = 70, m = 60;  // m·k > 32k: quantized and packed over the pool
    const Weight w = affine_matrix({bits, 64, DType::BF16, m, n, k}, 23, prep);
    const auto x = random_x(m, k, 29);
    const auto all = run_matrix(w, x.data(), m, 1);
    EXPECT_EQ(all, run_matrix(w, x.data(), m, 3)) << bits;
    // The matrix's own kernel (not matmul_affine's F32 one): the scalar block model's values.
    EXPECT_EQ(all, run_interleaved(*w.interleaved, x.data(), m, Q8Kernel::Scalar)) << bits;
    for (int64_t i = 0; i < m; ++i) {
      const auto one = run_matrix(w, x.data() + i * k, 1, 2);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(one[j], all[i * n + j]) << bits << "-bit row " << i;
    }
  }
}

TEST(InterleavedAffine, MatmulManyEqualsOneMatmulPerTarget) {
  const int64_t k = 128, m = 3;
  ThreadPool prep(1);
  const Weight a4 = affine_matrix({4, 64, DType::BF16, m, 48, k}, 31, prep);
  const Weight a8 = affine_matrix({8, 32, DType::F32, m, 20, k}, 37, prep);
  Weight q4 = Weight::of(random_blocks(DType::Q4_1, 16, k, 41));
  q4.interleaved = compute::interleave_blocks(q4.dense);
  const Weight plain = Weight::of(random_affine({4, 128, DType::BF16, m, 24, k}, 43));  // F32 kernel
  const auto x = random_x(m, k, 47);
  expect_many_equals_each({&a4, &a8, &q4, &plain}, x.data(), m);
}

TEST(InterleavedAffine, PrepareWeightCopiesWhereTheKernelRunsAndSaysSo) {
  ThreadPool pool(1);
  Weight w = Weight::of(random_affine({8, 64, DType::BF16, 1, 32, 128}, 53));
  const int64_t bytes = compute::prepare_weight(w, &pool);
  EXPECT_EQ(w.interleaved != nullptr, compute::interleave_enabled_affine());
  EXPECT_EQ(compute::interleave_enabled_affine(), compute::interleave_enabled(DType::Q8_0));
  EXPECT_EQ(bytes, w.interleaved ? w.interleaved->nbytes() : 0);
  // 8-bit g64, 32 rows of 128 columns: two groups of 4 blocks × 512 code bytes + 2 records of 128.
  if (w.interleaved) {
    EXPECT_EQ(w.interleaved->group_bytes, 4 * 512 + 2 * 128);
  }
  EXPECT_EQ(w.kind(), w.interleaved ? WeightKind::InterleavedAffine : WeightKind::Affine);
  const WeightKind kinds[] = {w.kind()};
  const std::string line = compute::describe_kernels(kinds);
  EXPECT_EQ(line.find("affine 4/8-bit rows interleaved x16") != std::string::npos, compute::interleave_enabled_affine()) << line;
  EXPECT_EQ(line.find("mlx-affine f32-activations avx2") != std::string::npos, !compute::interleave_enabled_affine()) << line;
}

}  // namespace
}  // namespace graft::compute::detail
