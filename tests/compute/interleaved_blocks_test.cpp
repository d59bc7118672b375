// Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q5_K / Q6_K weights interleaved 16 rows at a time (compute/interleaved_blocks.h). Weights:
// random blocks on awkward shapes (one row, n not a multiple of 16, one block, k an odd number of blocks).
// Tolerances, and why:
//   - the layout: every row read back from the copy equals the GGUF row byte for byte (Q4_K's and
//     Q6_K's kinds too); Q4_K's and Q5_K's copies dequantize to the gguf dequantizer's F32 values bit
//     for bit (both are (d·sc)·q − dmin·m with d·sc, dmin·m exact in F32); the Q4_K kernels give
//     the numbers of an affine copy with those F32 parameters, bit for bit;
//   - the AVX2, AVX-VNNI and AVX512-VNNI kernels against the scalar block model (each where the CPU has it):
//     exact (integer block sums are exact, also at the extreme codes where a naive maddubs would
//     saturate; the F32 chain is the same operations in the same order);
//   - the block model against F32 math on the dequantized weights (double accumulation): the bound of
//     activation rounding, Σ_blocks (d_x / 2)·Σ|w|, plus 1e-5 relative of Σ|w·x|; the same bound the
//     other q8 kernels meet, with a check that the error uses a real part of it;
//   - rows of a prefill against the same rows alone, 1 against 3 threads, matmul_many against one
//     matmul per target: exact.
#include "compute/interleaved_blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <cstring>
#include <span>
#include <tuple>
#include <vector>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"
#include "graft/compute/weight.h"
#include "compute/interleaved_test_util.h"
#include "support/q8_test_util.h"

namespace graft::compute::detail {
namespace {

using namespace graft::test;

const DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0};
struct Shape3 { int64_t m, n, k; };
// m = 9, 20: the kernels' tiles of eight activation rows plus a remainder.
const Shape3 kShapes[] = {{1, 1, 32},   {1, 16, 96}, {3, 17, 64}, {5, 40, 576},
                          {9, 33, 160}, {2, 15, 32}, {20, 17, 96}};

TEST(InterleavedBlocks, EveryRowReadsBackAsTheGgufRow) {
  for (DType t : kTypes)
    for (const auto& s : kShapes) {
      const Tensor w = random_blocks(t, s.n, s.k, 3);
      const auto b = compute::interleave_blocks(w);
      EXPECT_EQ(b->groups(), (s.n + 15) / 16);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b->base) % 64, 0u);
      const int64_t row_bytes = dtype_bytes(t, s.k);
      std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
      for (int64_t j = 0; j < s.n; ++j) {
        compute::deinterleave_row(*b, j, row.data());
        ASSERT_EQ(std::memcmp(row.data(), static_cast<const uint8_t*>(w.data) + j * row_bytes, row_bytes), 0)
            << dtype_name(t) << " row " << j << " of " << s.n;
      }
    }
}

// The copy at load runs over the thread pool (groups of 16 rows split between threads): the same
// bytes as on one thread, every kind.
TEST(InterleavedBlocks, CopyOverThePoolHasTheBytesOfOneThread) {
  ThreadPool pool(3);
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const Tensor w = random_blocks(t, 70, 512, 131);  // five groups, the last one short
    const auto one = compute::interleave_blocks(w), pooled = compute::interleave_blocks(w, &pool);
    ASSERT_EQ(one->nbytes(), pooled->nbytes()) << dtype_name(t);
    EXPECT_EQ(std::memcmp(one->base, pooled->base, static_cast<size_t>(one->nbytes())), 0) << dtype_name(t);
  }
}

TEST(InterleavedBlocks, RefusesOtherFormats) {
  EXPECT_THROW(compute::interleave_blocks(random_blocks(DType::Q3_K, 2, 256, 1)), Error);
  EXPECT_THROW(compute::interleave_q5_k(random_blocks(DType::Q4_K, 2, 256, 1)), Error);
  EXPECT_THROW(compute::interleave_q4_k(random_blocks(DType::Q4_0, 2, 256, 1)), Error);
  EXPECT_THROW(compute::interleave_q6_k(random_blocks(DType::Q4_K, 2, 256, 1)), Error);
  EXPECT_TRUE(compute::interleavable(DType::Q4_K));
  EXPECT_TRUE(compute::interleavable(DType::Q6_K));
  EXPECT_TRUE(compute::interleavable(DType::Q5_K));
  EXPECT_FALSE(compute::interleavable(DType::Q3_K));
  EXPECT_TRUE(compute::interleavable(DType::Q5_0));
  EXPECT_TRUE(compute::interleavable(DType::Q8_0));
}

class InterleavedKernel : public ::testing::TestWithParam<Q8Kernel> {
 protected:
  void SetUp() override {
    if (kernel_missing(GetParam())) GTEST_SKIP() << "the CPU lacks " << kernel_name(GetParam());
  }
};

TEST_P(InterleavedKernel, EqualsTheBlockModel) {
  for (DType t : kTypes)
    for (const auto& s : kShapes) {
      const auto b = compute::interleave_blocks(random_blocks(t, s.n, s.k, 5));
      const auto x = random_x(s.m, s.k, 7);
      EXPECT_EQ(run_interleaved(*b, x.data(), s.m, GetParam()), run_interleaved(*b, x.data(), s.m, Q8Kernel::Scalar))
          << dtype_name(t) << " m=" << s.m << " n=" << s.n << " k=" << s.k;
    }
}

// Codes and activations at the ends of their ranges, where a naive maddubs on Q8_0's stored
// unsigned codes (q_w + 128) would saturate its i16 pairs: Q8_0 codes −128 or 127 (nibbles 0 or 15,
// Q5 codes 0 or 31: every qs and qh bit clear or set),
// activations ±127, in sign patterns that make the pairs add up, cancel, and mix.
TEST_P(InterleavedKernel, EqualsTheBlockModelAtExtremeCodes) {
  const int64_t m = 5, n = 24, k = 128;
  const auto x = extreme_x(m, k);  // all +1, all −1, then signs alternating every 1, 2 and 3 columns
  compute::detail::Q8Activations act;
  compute::detail::quantize_activations(x.data(), m, k, act);
  ASSERT_EQ(act.q[0], 127);
  ASSERT_EQ(act.q[k], -127);
  // Weight blocks: all codes lowest (Q8_0 −128, nibble 0), all highest (127, nibble 15), or both
  // alternating, by block.
  for (DType t : kTypes) {
    Tensor w = random_blocks(t, n, k, 59);
    const bool q5 = t == DType::Q5_0 || t == DType::Q5_1;
    const int64_t bb = dtype_block_bytes(t), at = t == DType::Q4_1 || t == DType::Q5_1 ? 4 : 2,
                  code_bytes = t == DType::Q8_0 ? 32 : q5 ? 20 : 16;  // Q5: qh then qs
    auto* bytes = static_cast<uint8_t*>(const_cast<void*>(w.data));
    for (int64_t blk = 0; blk < n * k / 32; ++blk)
      for (int64_t c = 0; c < code_bytes; ++c) {
        const bool lowest = blk % 3 == 0 || (blk % 3 == 2 && c % 2 == 0);
        bytes[blk * bb + at + c] = t == DType::Q8_0 ? (lowest ? 0x80 : 0x7f) : (lowest ? 0x00 : 0xff);
      }
    const auto b = compute::interleave_blocks(w);
    EXPECT_EQ(run_interleaved(*b, x.data(), m, GetParam()), run_interleaved(*b, x.data(), m, Q8Kernel::Scalar)) << dtype_name(t);
  }
}

INSTANTIATE_TEST_SUITE_P(InterleavedSimd, InterleavedKernel, ::testing::ValuesIn(kSimdKernels),
                         [](const auto& info) { return kernel_name(info.param); });

TEST(InterleavedBlocks, WithinActivationRoundingOfF32MathOnDequantizedWeights) {
  for (DType t : kTypes)
    for (const auto& s : kShapes) {
      const Tensor w = random_blocks(t, s.n, s.k, 11);
      const auto b = compute::interleave_blocks(w);
      const auto x = random_x(s.m, s.k, 13);
      const auto got = run_interleaved(*b, x.data(), s.m, Q8Kernel::Scalar);
      const double worst = check_activation_rounding(got, x, s.m, s.k, w, std::string(dtype_name(t)));
      if (s.k >= 160) {
        EXPECT_GT(worst, 0.002) << dtype_name(t);  // the bound is not vacuous
      }
    }
}

TEST(InterleavedBlocks, ColumnRangesWriteOnlyTheirColumns) {
  const auto b = compute::interleave_blocks(random_blocks(DType::Q4_0, 40, 96, 17));
  const auto x = random_x(3, 96, 19);
  const auto all = run_interleaved(*b, x.data(), 3, compute::detail::best_q8_kernel());
  const auto part = run_interleaved(*b, x.data(), 3, compute::detail::best_q8_kernel(), 5, 21);  // cuts two groups
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 40; ++j)
      EXPECT_EQ(part[i * 40 + j], j >= 5 && j < 21 ? all[i * 40 + j] : -1.0f) << "row " << i << " column " << j;
}

// Through the public entry points, as a model runs them: matmul on a prepared Matrix, matmul_many.
Weight interleaved_matrix(DType t, int64_t n, int64_t k, uint32_t seed) {
  Weight m = Weight::of(random_blocks(t, n, k, seed));
  m.interleaved = compute::interleave_blocks(m.dense);
  return m;
}

TEST(InterleavedBlocks, PrefillRowsEqualDecodeRowsAndThreadCountsAgree) {
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const int64_t k = 768, n = 70, m = 60;  // m·k > 32k: quantized and packed over the pool
    const Weight w = interleaved_matrix(t, n, k, 23);
    const auto x = random_x(m, k, 29);
    const auto all = run_matrix(w, x.data(), m, 1);
    EXPECT_EQ(all, run_matrix(w, x.data(), m, 3)) << dtype_name(t);
    for (int64_t i = 0; i < m; ++i) {
      const auto one = run_matrix(w, x.data() + i * k, 1, 2);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(one[j], all[i * n + j]) << dtype_name(t) << " row " << i;
    }
  }
}

TEST(InterleavedBlocks, MatmulManyEqualsOneMatmulPerTarget) {
  const int64_t k = 256, m = 3;  // Q4_K / Q6_K: whole super-blocks
  const Weight q = interleaved_matrix(DType::Q8_0, 48, k, 31);
  const Weight kk = interleaved_matrix(DType::Q4_0, 20, k, 37);
  const Weight v = Weight::of(random_blocks(DType::Q6_K, 24, k, 41));  // read as stored
  const Weight o = interleaved_matrix(DType::Q4_K, 17, k, 42);
  const Weight v6 = interleaved_matrix(DType::Q6_K, 33, k, 44);
  const auto x = random_x(m, k, 43);
  expect_many_equals_each({&q, &kk, &v, &o, &v6}, x.data(), m);
}

TEST(InterleavedBlocks, PrepareWeightsCopiesOnlyWhereTheKernelRuns) {
  ThreadPool pool(1);
  Weight q8 = Weight::of(random_blocks(DType::Q8_0, 16, 64, 47));
  Weight q3k = Weight::of(random_blocks(DType::Q3_K, 16, 256, 53));
  const int64_t bytes = compute::prepare_weight(q8, &pool);
  EXPECT_EQ(q8.interleaved != nullptr, compute::interleave_enabled(DType::Q8_0));
  EXPECT_EQ(bytes, q8.interleaved ? q8.interleaved->nbytes() : 0);
  EXPECT_EQ(compute::prepare_weight(q3k, &pool), 0);  // (read as stored)
  EXPECT_EQ(q3k.interleaved, nullptr);
  Weight q6k = Weight::of(random_blocks(DType::Q6_K, 16, 256, 53));
  const int64_t q6k_bytes = compute::prepare_weight(q6k, &pool);
  EXPECT_EQ(q6k_bytes, q6k.interleaved ? q6k.interleaved->nbytes() : 0);
  EXPECT_EQ(q6k.interleaved != nullptr, compute::interleave_enabled(DType::Q6_K));
  Weight q4k = Weight::of(random_blocks(DType::Q4_K, 16, 256, 54));
  const int64_t q4k_bytes = compute::prepare_weight(q4k, &pool);
  EXPECT_EQ(q4k_bytes, q4k.interleaved ? q4k.interleaved->nbytes() : 0);
  EXPECT_EQ(q4k.interleaved != nullptr, compute::interleave_enabled(DType::Q4_K));
  EXPECT_EQ(compute::interleave_enabled(DType::Q4_K), compute::interleave_enabled(DType::Q4_0));
  const Q8Kernel kernel = compute::detail::best_q8_kernel();
  EXPECT_EQ(compute::interleave_enabled(DType::Q4_0), (kernel == Q8Kernel::Avx2 || kernel == Q8Kernel::AvxVnni ||
                                              kernel == Q8Kernel::Avx512Vnni) &&
                                                  !(std::getenv("GRAFT_Q8_INTERLEAVE") &&
                                                    std::string(std::getenv("GRAFT_Q8_INTERLEAVE")) == "0"));
}

// The k-quants (Q4_K, Q5_K, Q6_K; interleaved_kquants.cpp): whole super-blocks, each format on its
// shapes, random weights and weights at the ends of their codes and scales.
// Q4_K's shapes: n one row, one group short or one row over, several groups.
const Shape3 kShapesQ4K[] = {{1, 1, 256},   {2, 15, 512},  {3, 17, 768}, {8, 33, 256},
                             {9, 17, 512},  {16, 15, 256}, {20, 33, 768}};
// Q5_K's and Q6_K's: activation rows 1, 3, 8 (one tile), 9, 17 (tiles and a remainder); n one row,
// one short of a group, one over, several groups.
const Shape3 kShapesQ6K[] = {{1, 1, 256},  {3, 17, 512}, {8, 15, 256}, {17, 33, 768},
                             {1, 16, 512}, {9, 40, 256}, {2, 31, 1024}};

// Row j of the copy dequantized from its layout ((d·sc)·q + (−dmin)·m per block of 32), as F32.
std::vector<float> dequantized_copy_row(const compute::InterleavedBlocks& b, int64_t j) {
  const int64_t g = j / 16, r = j % 16;
  std::vector<float> row(static_cast<size_t>(b.k));
  for (int64_t blk = 0; blk < b.blocks; ++blk) {
    const uint8_t* w = b.codes(g) + blk * b.code_bytes + r * 4;
    const uint8_t* sm = b.q4k_scales(g, blk);
    const uint16_t* d = b.q4k_d(g, blk);
    const float scale = f16_to_f32(d[r]) * static_cast<float>(sm[r]);
    const float bias = f16_to_f32(d[16 + r]) * static_cast<float>(sm[16 + r]);
    for (int c = 0; c < 32; ++c) {
      const int t = c / 4, e = c % 4;
      const int q = t < 4 ? (w[t * 64 + e] & 0x0f) : (w[(t - 4) * 64 + e] >> 4);
      row[blk * 32 + c] = scale * static_cast<float>(q) + bias;
    }
  }
  return row;
}

// The same weights as an mlx-style affine 4-bit matrix (group 32, F32 scale d·sc and bias
// −(dmin·m) per group, both exact): what the Q4_K copy was before it had a kind of its own.
AffineQuantized affine_of_q4_k(const Tensor& w) {
  const int64_t n = w.shape[0], k = w.shape[1], supers = k / 256;
  std::vector<uint8_t> packed(static_cast<size_t>(n * k / 2)), scales(static_cast<size_t>(n * k / 32 * 4)),
      biases(scales.size());
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t sb = 0; sb < supers; ++sb) {
      const uint8_t* p = src + (j * supers + sb) * 144;
      for (int s = 0; s < 8; ++s) {
        uint8_t sc, m;
        q4k_scale_min(p + 4, s, &sc, &m);
        const float scale = gguf_f16_at(p) * static_cast<float>(sc), bias = -(gguf_f16_at(p + 2) * static_cast<float>(m));
        const int64_t grp = j * (k / 32) + sb * 8 + s;
        std::memcpy(&scales[static_cast<size_t>(grp * 4)], &scale, 4);
        std::memcpy(&biases[static_cast<size_t>(grp * 4)], &bias, 4);
        for (int c = 0; c < 32; ++c) {  // mlx: LSB-first nibbles, eight a word
          const uint8_t q = (p[16 + 32 * (s / 2) + c] >> (4 * (s % 2))) & 0x0f;
          const int64_t col = j * k + sb * 256 + s * 32 + c;
          packed[static_cast<size_t>(col / 2)] |= static_cast<uint8_t>(q << (4 * (col % 2)));
        }
      }
    }
  AffineQuantized a;
  a.packed = Tensor::owned(DType::U32, {n, k / 8}, std::move(packed));
  a.scales = Tensor::owned(DType::F32, {n, k / 32}, std::move(scales));
  a.biases = Tensor::owned(DType::F32, {n, k / 32}, std::move(biases));
  a.bits = 4;
  a.group_size = 32;
  a.rows = n;
  a.cols = k;
  return a;
}

// Weights at the ends of their ranges: codes lowest (every code bit clear: nibble 0, q = 0),
// highest (all set: 15, 31, 63) or mixed, by super-block; and in every other super-block the scales at
// their extremes (Q4_K, Q5_K: 6-bit scales and mins at 63, every packed bit set; Q6_K: int8 scales at
// −128 and 127).
Tensor extreme_kquant(DType t, int64_t n, int64_t k, uint32_t seed) {
  Tensor w = random_blocks(t, n, k, seed);
  auto* bytes = static_cast<uint8_t*>(const_cast<void*>(w.data));
  const int64_t super_bytes = dtype_block_bytes(t);
  // The code bytes of a super-block: Q4_K qs, Q5_K qh and qs (after d, dmin, scales), Q6_K ql and qh.
  const int codes_at = t == DType::Q6_K ? 0 : 16, codes_end = t == DType::Q6_K ? 192 : static_cast<int>(super_bytes);
  for (int64_t sb = 0; sb < n * k / 256; ++sb) {
    uint8_t* p = bytes + sb * super_bytes;
    for (int c = codes_at; c < codes_end; ++c) p[c] = sb % 3 == 0 ? 0x00 : sb % 3 == 1 ? 0xff : (c % 2 ? 0x0f : 0xf0);
    if (sb % 2 != 0) continue;
    if (t == DType::Q6_K)
      for (int s = 0; s < 16; ++s) p[192 + s] = s % 2 ? 0x80 : 0x7f;
    else
      std::memset(p + 4, 0xff, 12);
  }
  return w;
}

// Q5_K is copied as affine 5-bit (kind Affine5: Q5_1's code words, an F32 scale and bias per 32
// columns).
// Row j of the copy dequantized from its layout (nibble and fifth bit, scale·q + bias per block).
std::vector<float> dequantized_q5k_copy_row(const compute::InterleavedBlocks& b, int64_t j) {
  const int64_t g = j / 16, r = j % 16;
  std::vector<float> row(static_cast<size_t>(b.k));
  for (int64_t blk = 0; blk < b.blocks; ++blk) {
    const uint8_t* w = b.codes(g) + blk * b.code_bytes + r * 4;
    const float* p = b.params(g) + blk * 32;
    for (int c = 0; c < 32; ++c) {
      const int t = c / 4, e = c % 4;
      const int nibble = t < 4 ? (w[t * 64 + e] & 0x0f) : (w[(t - 4) * 64 + e] >> 4);
      const int q = nibble | ((w[256 + e] >> t) & 1) << 4;
      row[blk * 32 + c] = p[r] * static_cast<float>(q) + p[16 + r];
    }
  }
  return row;
}

// What each k-quant's copy is and how it is checked.
struct KQuant {
  DType type;
  compute::InterleavedKind kind;
  std::span<const Shape3> shapes;
  // Row j of the copy dequantized from its layout (null: the format is checked by its bytes alone).
  std::vector<float> (*dequantized_copy_row)(const compute::InterleavedBlocks& b, int64_t j);
  bool reads_back;          // deinterleave_row gives the GGUF bytes (not Q5_K's affine copy)
  int64_t block_bytes;      // the copy's bytes per block of 16 rows x 32 columns (0: not checked)
};
const KQuant kKQuants[] = {
    {DType::Q4_K, compute::InterleavedKind::Q4_K, kShapesQ4K, dequantized_copy_row, true,
     256 + 40},  // 4.625 bits a weight
    {DType::Q5_K, compute::InterleavedKind::Affine5, kShapesQ6K, dequantized_q5k_copy_row, false, 0},
    {DType::Q6_K, compute::InterleavedKind::Q6_K, kShapesQ6K, nullptr, true, 384 + 40},  // 6.625 bits
};
// Both weights of a case: random blocks, and the extreme ones.
std::vector<Tensor> kquant_weights(const KQuant& q, const Shape3& s, uint32_t seed) {
  std::vector<Tensor> out;
  out.push_back(random_blocks(q.type, s.n, s.k, seed));
  out.push_back(extreme_kquant(q.type, s.n, s.k, seed + 1));
  return out;
}

class KQuantFormat : public ::testing::TestWithParam<int> {
 protected:
  const KQuant& q() const { return kKQuants[GetParam()]; }
};
INSTANTIATE_TEST_SUITE_P(Formats, KQuantFormat, ::testing::Range(0, 3),
                         [](const auto& info) { return std::string(dtype_name(kKQuants[info.param].type)); });

// The layout: every row of the copy reads back as the GGUF row byte for byte (Q4_K, Q6_K), and
// dequantizes to the GGUF dequantizer's F32 values bit for bit (Q4_K, Q5_K).
TEST_P(KQuantFormat, EveryRowReadsBackAsTheGgufRowOrItsValues) {
  for (const auto& s : q().shapes)
    for (const Tensor& w : kquant_weights(q(), s, 61)) {
      const auto b = compute::interleave_blocks(w);
      EXPECT_EQ(b->kind, q().kind);
      EXPECT_EQ(b->groups(), (s.n + 15) / 16);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(b->base) % 64, 0u);
      if (q().block_bytes) {
        EXPECT_EQ(b->group_bytes, b->blocks * q().block_bytes);
      }
      std::vector<float> ref(static_cast<size_t>(s.k));
      const int64_t row_bytes = dtype_bytes(q().type, s.k);
      std::vector<uint8_t> row(static_cast<size_t>(row_bytes));
      for (int64_t j = 0; j < s.n; ++j) {
        const uint8_t* gguf = static_cast<const uint8_t*>(w.data) + j * row_bytes;
        if (q().reads_back) {
          compute::deinterleave_row(*b, j, row.data());
          ASSERT_EQ(std::memcmp(row.data(), gguf, row_bytes), 0) << "row " << j << " of " << s.n << " k=" << s.k;
        }
        if (q().dequantized_copy_row) {
          dequantize_gguf_blocks(q().type, gguf, ref.data(), s.k);
          const auto got = q().dequantized_copy_row(*b, j);
          ASSERT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0) << "row " << j << " of " << s.n << " k=" << s.k;
        }
      }
    }
}

TEST_P(KQuantFormat, WithinActivationRoundingOfF32MathOnDequantizedWeights) {
  double worst = 0;
  for (const auto& s : q().shapes)
    for (const Tensor& w : kquant_weights(q(), s, 83)) {
      const auto x = random_x(s.m, s.k, 89);
      const auto got = run_interleaved(*compute::interleave_blocks(w), x.data(), s.m, Q8Kernel::Scalar);
      worst = std::max(worst, check_activation_rounding(got, x, s.m, s.k, w, std::string(dtype_name(q().type))));
    }
  EXPECT_GT(worst, 0.002);  // the bound is not vacuous
}

class KQuantKernel : public ::testing::TestWithParam<std::tuple<int, Q8Kernel>> {
 protected:
  void SetUp() override {
    if (kernel_missing(kernel())) GTEST_SKIP() << "the CPU lacks " << kernel_name(kernel());
  }
  const KQuant& q() const { return kKQuants[std::get<0>(GetParam())]; }
  Q8Kernel kernel() const { return std::get<1>(GetParam()); }
};
INSTANTIATE_TEST_SUITE_P(InterleavedSimd, KQuantKernel, ::testing::Combine(::testing::Range(0, 3), ::testing::ValuesIn(kSimdKernels)),
                         [](const auto& info) {
                           return std::string(dtype_name(kKQuants[std::get<0>(info.param)].type)) + "_" +
                                  kernel_name(std::get<1>(info.param));
                         });

// Each SIMD kernel against the scalar block model: on every shape, and with activations at ±127
// against the extreme codes (AVX2's shifted Q6_K codes reach −128: maddubs pairs at 2·128·127, one
// short of saturating).
TEST_P(KQuantKernel, EqualsTheBlockModel) {
  for (const auto& s : q().shapes) {
    const auto x = random_x(s.m, s.k, 67);
    for (const Tensor& w : kquant_weights(q(), s, 71)) {
      const auto b = compute::interleave_blocks(w);
      EXPECT_EQ(run_interleaved(*b, x.data(), s.m, kernel()), run_interleaved(*b, x.data(), s.m, Q8Kernel::Scalar))
          << "m=" << s.m << " n=" << s.n << " k=" << s.k;
    }
  }
  const int64_t m = 4, n = 17, k = 768;  // (row 3: the largest shift)
  const auto x = extreme_x(m, k);
  const auto b = compute::interleave_blocks(extreme_kquant(q().type, n, k, 79));
  EXPECT_EQ(run_interleaved(*b, x.data(), m, kernel()), run_interleaved(*b, x.data(), m, Q8Kernel::Scalar));
}

// The Q4_K kind computes what the affine copy with F32 parameters per block (its layout before,
// 128 bytes of parameters a block instead of 40) computed: the same numbers, bit for bit, on every kernel.
TEST(InterleavedQ4K, EqualsTheAffineCopyWithF32Parameters) {
  for (const auto& s : kShapesQ4K)
    for (const Tensor& w : {random_blocks(DType::Q4_K, s.n, s.k, 63), extreme_kquant(DType::Q4_K, s.n, s.k, 65)}) {
      const auto x = random_x(s.m, s.k, 66);
      const auto q4k = compute::interleave_q4_k(w);
      const auto affine = compute::interleave_affine(affine_of_q4_k(w));
      ASSERT_EQ(affine->kind, compute::InterleavedKind::Affine4);
      for (Q8Kernel kernel : {Q8Kernel::Scalar, Q8Kernel::Avx2, Q8Kernel::AvxVnni, Q8Kernel::Avx512Vnni}) {
        if (!compute::detail::q8_kernel_supported(kernel)) continue;
        EXPECT_EQ(run_interleaved(*q4k, x.data(), s.m, kernel), run_interleaved(*affine, x.data(), s.m, kernel))
            << compute::detail::q8_kernel_name(kernel) << " m=" << s.m << " n=" << s.n << " k=" << s.k;
      }
    }
}

}  // namespace
}  // namespace graft::compute::detail
