// The BF16-activation kernel (compute/bf16_dot.h) against its scalar model:
//   * the model of the two instructions: round_to_bf16 on pinned cases (ties to even, carries,
//     denormals, infinities, NaNs) and bf16_dot_lane's order (odd pair first) and flushing;
//   * on CPUs with AVX512-BF16: the vector rounding (round_rows_bf16) equals round_to_bf16 on
//     every class of F32 (random bit patterns: denormals, NaNs and infinities included), and
//     matmul_bf16_dot equals matmul_bf16_dot_reference bit for bit on awkward shapes (m 1..33, k not
//     a multiple of 32, n not a multiple of the tile), at 1 and 2 threads, accumulating or not, on
//     ordinary values and on values whose products underflow (DAZ/FTZ); a prefill row equals its
//     decode;
//   * the error bound against F32 math on the unrounded x (any CPU: on the reference where the
//     kernel cannot run): |y - Σ x·w| <= 2^-8·Σ|x·w|. Rounding x to BF16 moves each element by at
//     most 2^-9 relative; the F32 sums over k <= 4096 add well under 2^-9 more.
//   * model::Matrix dispatch: prepare_weight under q8 turns the path on exactly where the CPU has
//     it, under f32 keeps the exact F32 kernel; matmul and matmul_many give the kernel's bits.
// On CPUs without AVX512-BF16 the kernel tests skip (the F32 path is then the only one, tested by
// matmul_test.cpp).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "graft/compute/bf16_dot.h"
#include "graft/core/error.h"
#include "graft/model/weights.h"
#include "graft/runtime/kernels.h"

namespace graft::runtime {
namespace {

float f_of(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t u_of(float f) { return std::bit_cast<uint32_t>(f); }

// BF16 weights [n, k]: random values, or (wide) random exponents in [e0, e1] with random signs.
Tensor bf16_weights(int64_t n, int64_t k, std::mt19937& rng, int e0 = 0, int e1 = 0) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n * k * 2));
  auto* p = reinterpret_cast<uint16_t*>(bytes.data());
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> e(e0, e1);
  for (int64_t i = 0; i < n * k; ++i)
    p[i] = e0 == e1 ? f32_to_bf16(u(rng)) : compute::round_to_bf16(std::ldexp(u(rng), e(rng)));
  return Tensor::owned(DType::BF16, {n, k}, std::move(bytes));
}
std::vector<float> activations(int64_t m, int64_t k, std::mt19937& rng, int e0 = 0, int e1 = 0) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<int> e(e0, e1);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (float& v : x) v = e0 == e1 ? u(rng) : std::ldexp(u(rng), e(rng));
  return x;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(Bf16Dot, RoundingModelPinnedCases) {
  EXPECT_EQ(compute::round_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(compute::round_to_bf16(f_of(0x3f808000)), 0x3f80);  // tie, even below
  EXPECT_EQ(compute::round_to_bf16(f_of(0x3f818000)), 0x3f82);  // tie, even above
  EXPECT_EQ(compute::round_to_bf16(f_of(0x3f808001)), 0x3f81);  // above the tie
  EXPECT_EQ(compute::round_to_bf16(f_of(0x3fffffff)), 0x4000);  // carry into the exponent
  EXPECT_EQ(compute::round_to_bf16(f_of(0x7f7fffff)), 0x7f80);  // the largest float rounds to infinity
  EXPECT_EQ(compute::round_to_bf16(f_of(0x00400000)), 0x0000);  // denormal -> +0
  EXPECT_EQ(compute::round_to_bf16(f_of(0x80400000)), 0x8000);  // denormal -> -0
  EXPECT_EQ(compute::round_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(compute::round_to_bf16(f_of(0x7f800001)), 0x7fc0);  // signalling NaN, quieted
  EXPECT_EQ(compute::round_to_bf16(f_of(0xffc12345)), 0xffc1);
}

TEST(Bf16Dot, LaneModelOrderAndFlushing) {
  const uint16_t one = 0x3f80, big = compute::round_to_bf16(std::ldexp(1.0f, 24)), m_big = compute::round_to_bf16(-std::ldexp(1.0f, 24));
  // The odd pair first: 1 + 2^24 rounds to 2^24 (ties to even), minus 2^24 leaves 0; the even
  // pair first would keep the 1 ((1 - 2^24) is exact, + 2^24 = 1).
  EXPECT_EQ(compute::bf16_dot_lane(1.0f, one, m_big, one, big), 0.0f);
  EXPECT_EQ(compute::bf16_dot_lane(1.0f, one, big, one, m_big), 1.0f);
  // Products in the denormal range flush to zero; denormal inputs read as zero.
  const uint16_t tiny = compute::round_to_bf16(std::ldexp(1.0f, -70));
  EXPECT_EQ(u_of(compute::bf16_dot_lane(0.0f, tiny, tiny, 0, 0)), 0u);
  EXPECT_EQ(u_of(compute::bf16_dot_lane(-0.0f, tiny, static_cast<uint16_t>(tiny | 0x8000), 0, 0)), 0x80000000u);
  EXPECT_EQ(compute::bf16_dot_lane(0.0f, 0x0040, compute::round_to_bf16(std::ldexp(1.0f, 100)), 0, 0), 0.0f);
  EXPECT_EQ(compute::bf16_dot_lane(2.0f, one, one, one, one), 4.0f);
}

TEST(Bf16Dot, RefusesNonBf16Weights) {
  ThreadPool pool(1);
  const Tensor w = Tensor::owned(DType::F32, {2, 4}, std::vector<uint8_t>(32));
  std::vector<float> x(4), y(2);
  try {
    compute::matmul_bf16_dot_reference(x.data(), 1, 4, w, y.data());
    FAIL() << "an F32 weight was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul_bf16_dot_reference: weight dtype F32 is not BF16"), std::string::npos)
        << e.what();
  }
}

#define REQUIRE_BF16_DOT() \
  if (!compute::bf16_dot_supported()) GTEST_SKIP() << "the CPU lacks AVX512-BF16 (or GRAFT_BF16_DOT=0 / GRAFT_MATMUL_ISA=avx2)"

TEST(Bf16Dot, VectorRoundingEqualsTheModel) {
  REQUIRE_BF16_DOT();
  std::mt19937 rng(11);
  std::vector<float> x;
  for (uint32_t u : {0u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fffffffu,
                     0xffc00000u, 0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0x00800000u, 0x007fffffu})
    x.push_back(f_of(u));
  for (int i = 0; i < 20000; ++i) x.push_back(f_of(static_cast<uint32_t>(rng())));
  for (int64_t k : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{33}, static_cast<int64_t>(x.size())}) {
    const int64_t m = static_cast<int64_t>(x.size()) / k;
    compute::Bf16Rows r;
    compute::round_rows_bf16(x.data(), m, k, r);
    ASSERT_EQ(r.kp % 32, 0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t t = 0; t < r.kp; ++t) {
        const uint16_t want = t < k ? compute::round_to_bf16(x[i * k + t]) : 0;
        ASSERT_EQ(r.bits[i * r.kp + t], want) << "k " << k << " row " << i << " col " << t << " x bits 0x" << std::hex
                                              << (t < k ? u_of(x[i * k + t]) : 0u);
      }
  }
}

// The odd pair of a lane goes first on the hardware too (the case LaneModelOrderAndFlushing pins).
TEST(Bf16Dot, KernelPairOrderIsTheModels) {
  REQUIRE_BF16_DOT();
  ThreadPool pool(1);
  std::vector<float> x(64, 0.0f);
  x[0] = 1, x[32] = 1, x[33] = 1;
  std::vector<uint8_t> bytes(64 * 2, 0);
  auto* w = reinterpret_cast<uint16_t*>(bytes.data());
  w[0] = 0x3f80, w[32] = compute::round_to_bf16(-std::ldexp(1.0f, 24)), w[33] = compute::round_to_bf16(std::ldexp(1.0f, 24));
  const Tensor wt = Tensor::owned(DType::BF16, {1, 64}, std::move(bytes));
  float y = -1, want = -1;
  compute::matmul_bf16_dot(pool, x.data(), 1, 64, wt, &y);
  compute::matmul_bf16_dot_reference(x.data(), 1, 64, wt, &want);
  EXPECT_EQ(want, 0.0f);
  EXPECT_EQ(y, want);
}

struct Range {
  int xe0, xe1, we0, we1;
};

void expect_kernel_equals_reference(const Range& r, uint32_t seed) {
  std::mt19937 rng(seed);
  ThreadPool one(1), two(2);
  for (int64_t k : {1, 2, 31, 33, 64, 95, 200}) {
    for (int64_t n : {1, 3, 5, 27}) {
      const Tensor w = bf16_weights(n, k, rng, r.we0, r.we1);
      for (int64_t m = 1; m <= 33; m += (k > 64 ? 4 : 1)) {
        const std::vector<float> x = activations(m, k, rng, r.xe0, r.xe1);
        for (bool acc : {false, true}) {
          std::vector<float> init(static_cast<size_t>(m * n));
          for (float& v : init) v = acc ? std::uniform_real_distribution<float>(-1, 1)(rng) : 0.0f;
          std::vector<float> want = init, y1 = init, y2 = init;
          compute::matmul_bf16_dot_reference(x.data(), m, k, w, want.data(), acc);
          compute::matmul_bf16_dot(one, x.data(), m, k, w, y1.data(), acc);
          compute::matmul_bf16_dot(two, x.data(), m, k, w, y2.data(), acc);
          ASSERT_TRUE(same_bits(y1, want)) << "1 thread, m " << m << " k " << k << " n " << n << " acc " << acc;
          ASSERT_TRUE(same_bits(y2, want)) << "2 threads, m " << m << " k " << k << " n " << n << " acc " << acc;
        }
      }
    }
  }
}

TEST(Bf16Dot, KernelEqualsReferenceOnAwkwardShapes) {
  REQUIRE_BF16_DOT();
  expect_kernel_equals_reference({0, 0, 0, 0}, 1);
}

// Products between 2^-150 and 2^-100 with both signs: denormal products and sums flushed (the
// DAZ / FTZ of the instruction), and the odd-first order where sums cancel.
TEST(Bf16Dot, KernelEqualsReferenceWhereProductsUnderflow) {
  REQUIRE_BF16_DOT();
  expect_kernel_equals_reference({-75, -50, -75, -50}, 2);
  expect_kernel_equals_reference({-140, 20, -126, 0}, 3);  // denormal x and weights too
}

TEST(Bf16Dot, LargeShapesAndPrefillRowsEqualDecode) {
  REQUIRE_BF16_DOT();
  std::mt19937 rng(5);
  ThreadPool two(2);
  const int64_t m = 37, k = 3 * 1024 + 40, n = 301;  // several L2 column groups, tail tiles
  const Tensor w = bf16_weights(n, k, rng);
  const std::vector<float> x = activations(m, k, rng);
  std::vector<float> y(static_cast<size_t>(m * n)), want(y.size()), row(static_cast<size_t>(n));
  compute::matmul_bf16_dot(two, x.data(), m, k, w, y.data());
  compute::matmul_bf16_dot_reference(x.data(), m, k, w, want.data());
  ASSERT_TRUE(same_bits(y, want));
  for (int64_t i = 0; i < m; ++i) {
    compute::matmul_bf16_dot(two, x.data() + i * k, 1, k, w, row.data());
    ASSERT_EQ(std::memcmp(row.data(), y.data() + i * n, static_cast<size_t>(n) * 4), 0) << "row " << i;
  }
}

// Error against F32 math on the unrounded activations (double sums), on whichever path runs here.
TEST(Bf16Dot, ErrorBoundAgainstF32Math) {
  std::mt19937 rng(9);
  ThreadPool two(2);
  for (int64_t k : {33, 576, 4096}) {
    const int64_t m = 9, n = 40;
    const Tensor w = bf16_weights(n, k, rng);
    const std::vector<float> x = activations(m, k, rng);
    std::vector<float> y(static_cast<size_t>(m * n));
    if (compute::bf16_dot_supported())
      compute::matmul_bf16_dot(two, x.data(), m, k, w, y.data());
    else
      compute::matmul_bf16_dot_reference(x.data(), m, k, w, y.data());
    const auto* wb = static_cast<const uint16_t*>(w.data);
    double worst = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double exact = 0, mag = 0;
        for (int64_t t = 0; t < k; ++t) {
          const double p = static_cast<double>(x[i * k + t]) * bf16_to_f32(wb[j * k + t]);
          exact += p, mag += std::fabs(p);
        }
        const double err = std::fabs(y[i * n + j] - exact) / mag;
        ASSERT_LE(err, std::ldexp(1.0, -8)) << "k " << k << " row " << i << " col " << j;
        worst = std::max(worst, err);
      }
    EXPECT_GT(worst, 0.0) << "no rounding at all: the activations were not rounded";
  }
}

TEST(Bf16Dot, MatrixDispatchFollowsTheActivations) {
  std::mt19937 rng(4);
  ThreadPool two(2);
  const int64_t m = 13, k = 100, n = 50;
  const std::vector<float> x = activations(m, k, rng);
  model::Matrix q8 = model::Matrix::of(bf16_weights(n, k, rng)), f32 = q8, second = model::Matrix::of(bf16_weights(n, k, rng));
  compute::prepare_weight(q8, &two, compute::Activations::Q8);
  compute::prepare_weight(second, &two, compute::Activations::Q8);
  compute::prepare_weight(f32, &two, compute::Activations::F32);
  EXPECT_EQ(q8.bf16_activations, compute::bf16_dot_supported());
  EXPECT_FALSE(f32.bf16_activations);
  std::vector<float> y(static_cast<size_t>(m * n)), want(y.size()), y2(y.size()), want2(y.size());
  // f32: the exact kernel's bits.
  matmul(two, x.data(), m, f32, y.data());
  compute::matmul(two, x.data(), m, k, f32.dense, want.data());
  EXPECT_TRUE(same_bits(y, want));
  if (!compute::bf16_dot_supported()) return;
  // q8: the BF16 kernel's, alone and in matmul_many.
  matmul(two, x.data(), m, q8, y.data());
  compute::matmul_bf16_dot_reference(x.data(), m, k, q8.dense, want.data());
  EXPECT_TRUE(same_bits(y, want));
  std::fill(y.begin(), y.end(), 0.0f);
  const compute::MatmulTarget targets[] = {{&q8, y.data()}, {&second, y2.data()}};
  compute::matmul_many(two, x.data(), m, targets);
  compute::matmul_bf16_dot_reference(x.data(), m, k, second.dense, want2.data());
  EXPECT_TRUE(same_bits(y, want));
  EXPECT_TRUE(same_bits(y2, want2));
}

}  // namespace
}  // namespace graft::runtime
