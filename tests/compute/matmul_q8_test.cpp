// GGUF block weights × 8-bit activations (runtime/matmul_q8.h). Weights: random blocks of every
// format (random codes, finite random f16 scales and mins) on awkward shapes: one row, one column,
// k an odd multiple of the block (a masked tail in the 16-lane kernel), n not a multiple of any tile.
// Tolerances, and why:
//   - each SIMD kernel against its scalar model (through matmul_blocks, so the fused per-format
//     kernels of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q6_K and the unpack path of the rest), and the
//     unpack path with fusion off against the same model (8 lanes: AVX2, AVX-VNNI; 16 lanes: AVX512-VNNI):
//     exact (the integer products are exact and the F32 lanes are summed in the same order);
//     the 16-lane model also runs on CPUs without AVX-512, so its lane logic is tested everywhere;
//   - against F32 math on the dequantized weights (double accumulation): the bound of activation
//     rounding, Σ_blocks (d_x / 2)·Σ|w|, plus 1e-5 relative of Σ|w·x| for F32 rounding;
//   - unpacking against gguf_blocks' dequantization (itself bit-exact against gguf-py): exact;
//   - rows of a prefill against the same rows alone, and 1 against 3 threads: exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <random>
#include <vector>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"
#include "graft/compute/kernels.h"
#include "graft/core/thread_pool.h"
#include "compute/matmul_q8.h"
#include "support/q8_test_util.h"

namespace graft::compute::detail {
namespace {

using test::random_blocks;
using test::random_x;
using test::check_activation_rounding;

const DType kFormats[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL,
                          DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS};

struct Shape3 { int64_t m, n, k; };
std::vector<Shape3> shapes_for(DType t) {
  // m = 5, 9, 13, 70: the fused kernels' groups of four or eight activation rows plus a remainder,
  // and (70 rows of k = 608) more than one activation tile.
  if (dtype_block_elems(t) == 256) return {{1, 1, 256}, {1, 7, 768}, {3, 5, 512}, {2, 9, 1280}, {5, 3, 256}, {13, 2, 512}};
  return {{1, 1, 32}, {1, 7, 96}, {3, 5, 64}, {2, 17, 544}, {1, 3, 576}, {5, 3, 96}, {9, 2, 160}, {70, 3, 608}};
}

std::vector<float> run(Q8Kernel kern, const float* x, int64_t m, int64_t k, const Tensor& w, int threads = 1,
                       bool fused = true) {
  ThreadPool pool(threads);
  std::vector<float> y(static_cast<size_t>(m * w.shape[0]), -1.0f);
  matmul_blocks(pool, kern, x, m, k, w, y.data(), false, nullptr, fused);
  return y;
}

TEST(MatmulQ8, UnpackEqualsDequantization) {
  for (DType t : kFormats) {
    const int64_t k = dtype_block_elems(t) * 3;
    const Tensor w = random_blocks(t, 1, k, 7);
    const QuantFormat* f = quant_format(t);
    ASSERT_NE(f, nullptr) << dtype_name(t);
    std::vector<int8_t> q(k);
    std::vector<float> a4(k / 4), b16(k / 16, 0.0f), ref(k);
    f->unpack(static_cast<const uint8_t*>(w.data), k, q.data(), a4.data(), b16.data());
    dequantize_gguf_blocks(t, w.data, ref.data(), k);
    for (int64_t c = 0; c < k; ++c) {
      const float prod = a4[c / 4] * static_cast<float>(q[c]);
      const float v = f->has_min ? prod + b16[c / 16] : prod;
      ASSERT_EQ(v, ref[c]) << dtype_name(t) << " column " << c;
      if (f->has_min) {
        ASSERT_TRUE(q[c] >= 0 && q[c] < 32) << dtype_name(t);  // maddubs needs codes < 128
      }
    }
  }
}

// The scale rule (matmul_q8.h), written plainly: per block of 32, the larger half's d = max|x| / 127,
// the other's d / 2^e with e the largest (<= 11) that keeps its max|x| / d within 127.
struct PlainScales {
  float d[2], am[2];  // each half's scale and the max|x| its codes are rounded against (d·127)
  int e[2];           // each half's scale = the smaller one · 2^e
};
PlainScales plain_scales(const float* xb) {
  float amax[2] = {0.0f, 0.0f};
  for (int t = 0; t < 32; ++t) amax[t / 16] = std::max(amax[t / 16], std::fabs(xb[t]));
  const int big = amax[0] >= amax[1] ? 0 : 1;
  int e = 0;
  if (amax[1 - big] > 0.0f)
    while (e < 11 && amax[1 - big] * std::exp2(static_cast<float>(e + 1)) <= amax[big] &&
           amax[big] / 127.0f / std::exp2(static_cast<float>(e + 1)) >= std::numeric_limits<float>::min())
      ++e;
  PlainScales s{};
  s.d[big] = amax[big] / 127.0f;
  s.d[1 - big] = s.d[big] / std::exp2(static_cast<float>(e));
  s.am[big] = amax[big];
  s.am[1 - big] = amax[big] / std::exp2(static_cast<float>(e));
  s.e[big] = e;
  s.e[1 - big] = 0;
  return s;
}

// llama.cpp's quantize_row_q8_0 with those scales: the vectorized quantizer must give these bytes
// and scales exactly (ties of x·id round to even, as nearbyint does).
TEST(MatmulQ8, ActivationQuantizationFollowsTheScalarRule) {
  const int64_t m = 5, k = 96;
  auto x = random_x(m, k, 29);
  for (int t = 0; t < 32; ++t) x[64 + t] = static_cast<float>(t - 16) * 0.5f;  // ties: ±127·(j/32)...
  x[64] = -8.0f;                                                               // a group's max|x| on a negative
  for (int t = 0; t < 32; ++t) x[96 + t] = t % 2 ? 1e-30f : -3e-38f;           // tiny values
  for (int t = 0; t < 16; ++t) x[128 + t] = 0.0f;                              // a group of zeros
  x[96 + 84] = 50.0f;                   // one large value (row 1): its own 16 columns take its scale
  x[2 * k + 5] = 1e4f;                  // row 2: a ratio past 2^11, the shift stops at 11
  for (int t = 16; t < 32; ++t) x[3 * k + t] = 0.25f * static_cast<float>(t);  // row 3: the max in half 1
  Q8Activations a;
  ThreadPool pool(3);
  quantize_activations(x.data(), m, k, a, &pool);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c0 = 0; c0 < k; c0 += 32) {
      const float* xb = &x[i * k + c0];
      const PlainScales sc = plain_scales(xb);
      for (int h = 0; h < 2; ++h) {
        const float d = sc.d[h], idx = sc.am[h] > 0.0f ? 127.0f / sc.am[h] : 0.0f;
        int32_t sum = 0;
        for (int t = 16 * h; t < 16 * h + 16; ++t) {
          const auto q = static_cast<int8_t>(std::clamp(std::nearbyint(xb[t] * idx), -127.0f, 127.0f));
          ASSERT_EQ(a.q[i * k + c0 + t], q) << "row " << i << " column " << c0 + t;
          sum += q;
        }
        const int64_t g = (i * k + c0) / 16 + h;
        for (int l = 0; l < 4; ++l) ASSERT_EQ(a.d4[4 * g + l], d) << "row " << i << " column " << c0 + 16 * h;
        ASSERT_EQ(a.s16[g], d * static_cast<float>(sum));
        ASSERT_EQ(a.sum16[g], sum);
        ASSERT_EQ(a.e16[g], sc.e[h]) << "row " << i << " column " << c0 + 16 * h;
      }
      // the block scale (the smaller d_x) times 2^e is each half's d_x, exactly
      const float block = std::min(a.d4[(i * k + c0) / 4], a.d4[(i * k + c0) / 4 + 4]);
      for (int h = 0; h < 2; ++h) ASSERT_EQ(std::ldexp(block, a.e16[(i * k + c0) / 16 + h]), a.d4[(i * k + c0) / 4 + 4 * h]);
    }
  // The large value's group has its scale; the block's other half a power of two below, near its own.
  ASSERT_EQ(a.d4[(k + 80) / 4], 50.0f / 127.0f);
  ASSERT_LT(a.d4[(k + 64) / 4], 50.0f / 127.0f / 4);
  ASSERT_EQ(a.e16[(2 * k) / 16], 11);
}

TEST(MatmulQ8, KernelsEqualTheirScalarModelBitForBit) {
  int ran = 0;
  for (DType t : kFormats)
    for (const auto& s : shapes_for(t)) {
      const Tensor w = random_blocks(t, s.n, s.k, 11);
      const auto x = random_x(s.m, s.k, 13);
      const auto ref8 = run(Q8Kernel::Scalar, x.data(), s.m, s.k, w);
      const auto ref16 = run(Q8Kernel::Scalar16, x.data(), s.m, s.k, w);
      for (Q8Kernel kern : {Q8Kernel::Avx2, Q8Kernel::AvxVnni, Q8Kernel::Avx512Vnni}) {
        if (!q8_kernel_supported(kern)) continue;
        ++ran;
        const auto& ref = kern == Q8Kernel::Avx512Vnni ? ref16 : ref8;
        for (bool fused : {true, false}) {
          const auto got = run(kern, x.data(), s.m, s.k, w, 1, fused);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_EQ(got[i], ref[i]) << q8_kernel_name(kern) << (fused ? " fused " : " unpack ") << dtype_name(t)
                                      << " m=" << s.m << " n=" << s.n << " k=" << s.k << " element " << i;
        }
      }
    }
  EXPECT_GT(ran, 0) << "no SIMD kernel is supported on this CPU (AVX2 is the build's baseline)";
}

// The AVX2 code of the 16-lane model (what AVX-512 CPUs run for one or two rows) equals the 16-lane
// scalar model on every CPU with AVX2, for every row count it accepts.
TEST(MatmulQ8, Avx2CodeOfThe16LaneModelEqualsIt) {
  if (!q8_kernel_supported(Q8Kernel::Avx2)) GTEST_SKIP() << "no AVX2";
  int ran = 0;
  for (DType t : kFormats) {
    const Q8FusedRows f = q8_fused_avx2_16lane(t);
    if (!f) continue;
    for (const auto& s : shapes_for(t)) {
      const Tensor w = random_blocks(t, s.n, s.k, 21);
      const auto x = random_x(s.m, s.k, 23);
      const auto ref16 = run(Q8Kernel::Scalar16, x.data(), s.m, s.k, w);
      Q8Activations act;
      quantize_activations(x.data(), s.m, s.k, act);
      const int64_t row_bytes = dtype_bytes(t, s.k);
      for (int64_t j = 0; j < s.n; ++j)
        for (int64_t i = 0; i < s.m; i += 4) {
          const int rows = static_cast<int>(std::min<int64_t>(4, s.m - i));
          float v[4];
          f(static_cast<const uint8_t*>(w.data) + j * row_bytes, s.k, act, i, rows, v);
          for (int r = 0; r < rows; ++r)
            ASSERT_EQ(v[r], ref16[(i + r) * s.n + j]) << dtype_name(t) << " m=" << s.m << " k=" << s.k;
          ++ran;
        }
    }
  }
  EXPECT_GT(ran, 0);
}

TEST(MatmulQ8, FusedKernelsExistForTheCommonFormats) {
  for (Q8Kernel kern : {Q8Kernel::Avx2, Q8Kernel::AvxVnni, Q8Kernel::Avx512Vnni})
    for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q6_K})
      EXPECT_NE(q8_fused(kern, t), nullptr) << q8_kernel_name(kern) << " " << dtype_name(t);
  EXPECT_EQ(q8_fused(Q8Kernel::Scalar, DType::Q4_0), nullptr);  // the scalar models stay the unpack path
}

TEST(MatmulQ8, WithinActivationRoundingOfF32MathOnDequantizedWeights) {
  ThreadPool pool(1);
  for (DType t : kFormats)
    for (const auto& s : shapes_for(t))
      for (Q8Kernel kern : {Q8Kernel::Scalar, Q8Kernel::Scalar16}) {
        const Tensor w = random_blocks(t, s.n, s.k, 17);
        const auto x = random_x(s.m, s.k, 19);
        const auto got = run(kern, x.data(), s.m, s.k, w);
        const double worst =
            check_activation_rounding(got, x, s.m, s.k, w, std::string(dtype_name(t)) + " " + q8_kernel_name(kern));
        // The bound is not vacuous: the error uses a real part of it somewhere.
        if (s.k >= 512) {
          EXPECT_GT(worst, 0.002) << dtype_name(t);
        }
      }
}

TEST(MatmulQ8, PrefillRowsEqualDecodeRowsAndThreadCountsAgree) {
  const Q8Kernel kern = best_q8_kernel();
  for (DType t : {DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::Q8_0}) {
    const int64_t k = 512, n = 37, m = 4;
    const Tensor w = random_blocks(t, n, k, 23);
    const auto x = random_x(m, k, 29);
    const auto all = run(kern, x.data(), m, k, w, 1);
    EXPECT_EQ(all, run(kern, x.data(), m, k, w, 3));
    for (int64_t i = 0; i < m; ++i) {
      const auto one = run(kern, x.data() + i * k, 1, k, w);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(one[j], all[i * n + j]) << dtype_name(t);
    }
  }
}

TEST(MatmulQ8, PublicMatmulAccumulatesAndRunsTheEpilogueOnEveryColumn) {
  ThreadPool pool(2);
  const int64_t m = 2, n = 45, k = 256;
  const Tensor w = random_blocks(DType::Q4_K, n, k, 31);
  const auto x = random_x(m, k, 37);
  std::vector<float> y(m * n, 1.0f), base(m * n);
  std::vector<int> seen(n, 0);
  const ColumnEpilogue ep = [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) ++seen[j];
  };
  matmul(pool, x.data(), m, k, w, y.data(), true, &ep);
  matmul(pool, x.data(), m, k, w, base.data());
  for (int64_t i = 0; i < m * n; ++i) EXPECT_EQ(y[i], 1.0f + base[i]);
  for (int64_t j = 0; j < n; ++j) EXPECT_EQ(seen[j], 1);
  EXPECT_NE(std::string(matmul_q8_kernel()), "");
}

}  // namespace
}  // namespace graft::compute::detail
