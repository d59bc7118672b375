#include <gtest/gtest.h>

#include <atomic>

#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <vector>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"
#include "graft/compute/kernels.h"
#include "graft/compute/weight.h"
#include "compute/matmul_internal.h"

namespace graft::compute {
namespace {

struct Case {
  std::vector<float> x;
  Tensor w;
  std::vector<float> wf;  // the weights as F32 (exact: every F16/BF16 value is an F32)
};

Case make_case(DType dt, int64_t m, int64_t k, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Case c;
  c.x.resize(static_cast<size_t>(m * k));
  for (float& v : c.x) v = u(rng);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = u(rng);
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(dt, n * k)));
  convert_from_f32(w.data(), dt, bytes.data(), n * k);
  c.w = Tensor::owned(dt, {n, k}, std::move(bytes));
  c.wf.resize(w.size());
  convert_to_f32(dt, c.w.data, c.wf.data(), n * k);
  return c;
}

// Error bound for y[i][j] against the double-accumulated reference. The fast path sums in F32 in a
// different order (one vector lane per k residue class, then a horizontal tree), so each element
// can be off by about (k / lanes + log2(lanes) + 2) roundings of 2^-24 relative to Σ|x·w| (plus
// |y_old| when accumulating). With k <= 1537 and 8 lanes that is ~1.2e-5 * Σ|x·w|: the tolerance is
// "relative 1e-5-ish", measured against the magnitude the sum passes through (not |y|, which can
// cancel to near zero).
std::vector<double> bounds(ThreadPool& pool, const Case& c, const float* y_old, int64_t m, int64_t k,
                           int64_t n) {
  // Σ|x·w| per element, itself a matmul (of |x| and |w|, all terms positive: F32 is plenty).
  std::vector<float> ax(c.x.size()), aw(c.wf.size()), mag(static_cast<size_t>(m * n));
  for (size_t t = 0; t < ax.size(); ++t) ax[t] = std::fabs(c.x[t]);
  std::vector<uint8_t> bytes(aw.size() * 4);
  for (size_t t = 0; t < aw.size(); ++t) aw[t] = std::fabs(c.wf[t]);
  std::memcpy(bytes.data(), aw.data(), bytes.size());
  compute::matmul(pool, ax.data(), m, k, Tensor::owned(DType::F32, {n, k}, std::move(bytes)), mag.data());
  std::vector<double> bound(mag.size());
  for (size_t t = 0; t < mag.size(); ++t)
    bound[t] = (double(k) / 8 + 8) * std::ldexp(1.0, -24) * (mag[t] * 1.001 + (y_old ? std::fabs(y_old[t]) : 0)) + 1e-30;
  return bound;
}

void expect_close(const std::vector<double>& bound, const std::vector<float>& got,
                  const std::vector<float>& ref, int64_t n, const std::string& what) {
  for (size_t at = 0; at < got.size(); ++at)
    ASSERT_LE(std::fabs(double(got[at]) - ref[at]), bound[at])
        << what << " at y[" << at / n << "][" << at % n << "]: got " << got[at] << " want " << ref[at];
}

const DType kTypes[] = {DType::F32, DType::F16, DType::BF16};

TEST(Matmul, MatchesReferenceAndIsIdenticalAcrossThreadCounts) {
  ThreadPool pools[] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  uint32_t seed = 1;
  for (DType dt : kTypes)
    for (int64_t m : {1, 2, 3, 7, 16, 33})
      for (int64_t k : {1, 15, 64, 576, 1537})
        for (int64_t n : {1, 5, 64, 577}) {
          const Case c = make_case(dt, m, k, n, seed++);
          std::vector<float> y0(static_cast<size_t>(m * n));
          for (size_t t = 0; t < y0.size(); ++t) y0[t] = 0.25f * float(t % 7) - 0.5f;
          std::vector<float> ref(y0.size()), ref_acc(y0.size());
          compute::matmul_reference(c.x.data(), m, k, c.w, ref.data());
          for (size_t t = 0; t < y0.size(); ++t) ref_acc[t] = y0[t] + ref[t];
          for (bool acc : {false, true}) {
            const std::vector<double> bound = bounds(pools[0], c, acc ? y0.data() : nullptr, m, k, n);
            std::vector<float> first;
            for (ThreadPool& pool : pools) {
              std::vector<float> y = y0;
              compute::matmul(pool, c.x.data(), m, k, c.w, y.data(), acc);
              const std::string what = std::string(dtype_name(dt)) + " m=" + std::to_string(m) +
                                       " k=" + std::to_string(k) + " n=" + std::to_string(n) +
                                       " acc=" + std::to_string(acc) +
                                       " threads=" + std::to_string(pool.size());
              expect_close(bound, y, acc ? ref_acc : ref, n, what);
              if (first.empty())
                first = y;
              else
                ASSERT_EQ(std::memcmp(first.data(), y.data(), y.size() * 4), 0) << what << ": differs from 1 thread";
            }
          }
        }
}

TEST(Matmul, ReferenceAccumulates) {
  const Tensor w = Tensor::owned(DType::BF16, {2, 3}, {0x80, 0x3f, 0x00, 0x40, 0x00, 0x00,    // 1 2 0
                                                      0x00, 0x00, 0x00, 0x00, 0x80, 0xbf});  // 0 0 -1
  const float x[3] = {1.0f, 2.0f, 3.0f};
  float y[2] = {10.0f, 20.0f};
  compute::matmul_reference(x, 1, 3, w, y, true);
  EXPECT_EQ(y[0], 15.0f);
  EXPECT_EQ(y[1], 17.0f);
  compute::matmul_reference(x, 1, 3, w, y, false);
  EXPECT_EQ(y[0], 5.0f);
  EXPECT_EQ(y[1], -3.0f);
}

// Every supported ISA's kernels, called directly on arbitrary column ranges: each output element
// has one summation order, so any split of the columns (and any m) gives the same bits.
TEST(Matmul, EveryIsaIsExactAcrossColumnSplitsAndBatchRows) {
  using compute::detail::Isa;
  for (compute::detail::Isa isa : {compute::detail::Isa::Avx2, compute::detail::Isa::Avx512}) {
    if (!compute::detail::isa_supported(isa)) {
      std::printf("[ note ] %s kernels not runnable on this CPU; skipped\n", isa == Isa::Avx512 ? "AVX-512" : "AVX2");
      continue;
    }
    // k = 1,100: prefill goes along k in steps (KC = 512) and decode in one pass, with a tail;
    // m = 18: F16 / BF16 rows widened to F32 first.
    for (DType dt : kTypes)
      for (int64_t k : {77, 1100})
        for (int64_t m : {9, 18}) {
        const int64_t n = 41;
        const Case c = make_case(dt, m, k, n, 99);
        std::vector<float> whole(static_cast<size_t>(m * n)), split(whole.size()), ref(whole.size());
        compute::matmul_reference(c.x.data(), m, k, c.w, ref.data());
        const compute::detail::MatmulArgs a{c.x.data(), m, k, n, c.w.data, dt, whole.data(), false};
        compute::detail::matmul_cols(isa, a, 0, n);
        ThreadPool one(1);
        expect_close(bounds(one, c, nullptr, m, k, n), whole, ref, n, "whole");
        compute::detail::MatmulArgs b = a;
        b.y = split.data();
        for (int64_t j0 = 0; j0 < n;) {  // ragged splits: 1, 2, 3, ... columns
          const int64_t j1 = std::min(n, j0 + 1 + j0 % 5);
          compute::detail::matmul_cols(isa, b, j0, j1);
          j0 = j1;
        }
        ASSERT_EQ(std::memcmp(whole.data(), split.data(), whole.size() * 4), 0) << dtype_name(dt);
        for (int64_t i = 0; i < m; ++i) {  // decode of row i == row i of the prefill
          std::vector<float> row(static_cast<size_t>(n));
          const compute::detail::MatmulArgs d{c.x.data() + i * k, 1, k, n, c.w.data, dt, row.data(), false};
          compute::detail::matmul_cols(isa, d, 0, n);
          ASSERT_EQ(std::memcmp(row.data(), whole.data() + i * n, n * 4), 0) << dtype_name(dt) << " row " << i;
        }
      }
  }
}

TEST(Matmul, SpecialValuesPropagate) {
  ThreadPool pool(2);
  const int64_t k = 20, n = 3;
  std::vector<float> x(k, 1.0f);
  std::vector<float> w(static_cast<size_t>(n * k), 0.5f);
  w[5] = std::numeric_limits<float>::infinity();
  w[k + 19] = std::numeric_limits<float>::quiet_NaN();  // in the tail step of both ISAs
  std::vector<uint8_t> bytes(w.size() * 4);
  std::memcpy(bytes.data(), w.data(), bytes.size());
  const Tensor wt = Tensor::owned(DType::F32, {n, k}, std::move(bytes));
  std::vector<float> y(n);
  compute::matmul(pool, x.data(), 1, k, wt, y.data());
  EXPECT_TRUE(std::isinf(y[0]));
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(y[2], 10.0f);
}

TEST(Matmul, RejectsBadArguments) {
  ThreadPool pool(1);
  std::vector<float> x(8), y(8);
  const Tensor q = Tensor::owned(DType::I32, {1, 8}, std::vector<uint8_t>(32));
  EXPECT_THROW(compute::matmul(pool, x.data(), 1, 8, q, y.data()), Error);  // not a float or GGUF block dtype
  const Tensor w = Tensor::zeros_f32({2, 4});
  EXPECT_THROW(compute::matmul(pool, x.data(), 1, 3, w, y.data()), Error);  // k mismatch
  const Tensor w3 = Tensor::zeros_f32({2, 2, 2});
  EXPECT_THROW(compute::matmul(pool, x.data(), 1, 2, w3, y.data()), Error);
  compute::matmul(pool, x.data(), 0, 4, w, y.data());  // m = 0: nothing to do
}

TEST(Matmul, ReportsIsa) {
  const std::string isa = compute::matmul_isa();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2") << isa;
  std::printf("[ note ] matmul kernels: %s\n", isa.c_str());
}

// The adapter up-projection follows its documented order exactly: per column, fma over k
// ascending from 0, then y += s·sum; for F32 and BF16 Bᵀ, column ranges that start and end off the
// 8- and 32-column blocks.
TEST(LoraUpAdd, EqualsTheDocumentedSumBitForBit) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t r = 8, cols = 101;
  std::vector<float> btf(static_cast<size_t>(r * cols)), low(static_cast<size_t>(r));
  for (float& v : btf) v = nd(rng);
  for (float& v : low) v = nd(rng);
  std::vector<uint8_t> f32(btf.size() * 4), b16(btf.size() * 2);
  std::memcpy(f32.data(), btf.data(), f32.size());
  for (size_t i = 0; i < btf.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &btf[i], 4);
    const auto h = static_cast<uint16_t>(u >> 16);  // truncation: the test needs exact BF16 values only
    std::memcpy(&b16[2 * i], &h, 2);
    u = static_cast<uint32_t>(h) << 16;
    std::memcpy(&btf[i], &u, 4);  // the widened BF16 value, for both references below
  }
  for (DType t : {DType::F32, DType::BF16}) {
    const Tensor bt = t == DType::F32 ? Tensor::owned(t, {r, cols}, f32) : Tensor::owned(t, {r, cols}, b16);
    for (auto [c0, c1] : {std::pair<int64_t, int64_t>{0, 101}, {3, 70}, {33, 41}, {64, 96}}) {
      std::vector<float> y(static_cast<size_t>(c1 - c0), 0.25f), ref = y;
      compute::lora_up_add(bt, low.data(), 0.75f, c0, c1, y.data());
      for (int64_t c = c0; c < c1; ++c) {
        float acc = 0.0f;
        for (int64_t k = 0; k < r; ++k) {
          uint32_t u;
          std::memcpy(&u, &f32[(k * cols + c) * 4], 4);
          if (t == DType::BF16) u &= 0xffff0000u;
          float b;
          std::memcpy(&b, &u, 4);
          acc = std::fma(low[k], b, acc);
        }
        ref[c - c0] += 0.75f * acc;
      }
      for (size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i], ref[i]) << dtype_name(t) << " column " << c0 + i;
    }
  }
}

// Random weights for the matmul_many tests: dense F32/F16/BF16 N(0, 0.1), or GGUF blocks with random
// codes and small finite f16 scales.
struct RandomWeights {
  std::mt19937 rng;
  std::normal_distribution<float> nd{0.0f, 1.0f};
  explicit RandomWeights(unsigned seed) : rng(seed) {}
  Tensor dense(DType t, int64_t n, int64_t k) {
    std::vector<float> f(static_cast<size_t>(n * k));
    for (float& v : f) v = nd(rng) * 0.1f;
    std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(t, n * k)));
    convert_from_f32(f.data(), t, bytes.data(), n * k);
    return Tensor::owned(t, {n, k}, std::move(bytes));
  }
  Tensor blocks(DType t, int64_t n, int64_t k) {
    std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(t, n * k)));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng() & 0xff);
    const int64_t bb = dtype_block_bytes(t);
    for (int64_t b = 0; b < static_cast<int64_t>(bytes.size()) / bb; ++b)
      for (int off : gguf_block_f16_fields(t)) {
        const uint16_t h = f32_to_f16(nd(rng) * 0.01f);
        std::memcpy(&bytes[b * bb + off], &h, 2);
      }
    return Tensor::owned(t, {n, k}, std::move(bytes));
  }
  std::vector<float> input(int64_t m, int64_t k) {
    std::vector<float> x(static_cast<size_t>(m * k));
    for (float& v : x) v = nd(rng);
    return x;
  }
};

// q/k/v and gate/up run as one matmul_many: every target's output equals its own matmul() bit
// for bit, for each weight storage (dense F32/BF16, GGUF blocks of several types sharing one
// activation quantization, mlx affine), and each epilogue sees each of its columns exactly once.
TEST(MatmulMany, EqualsSeparateMatmulsAndRunsEachEpilogueOncePerColumn) {
  RandomWeights r(9);
  const int64_t k = 256;
  auto dense = [&](DType t, int64_t n) { return r.dense(t, n, k); };
  auto blocks = [&](DType t, int64_t n) { return r.blocks(t, n, k); };
  const std::vector<std::vector<Weight>> sets = {
      {Weight::of(dense(DType::F32, 24)), Weight::of(dense(DType::BF16, 9))},
      {Weight::of(blocks(DType::Q4_K, 40)), Weight::of(blocks(DType::Q6_K, 8)),
       Weight::of(blocks(DType::Q8_0, 13))},
      {Weight::of(blocks(DType::Q4_0, 16)), Weight::of(blocks(DType::Q4_1, 5))},
      {Weight::of(quantize_affine(dense(DType::F32, 17), 4, 64, DType::BF16)),
       Weight::of(dense(DType::BF16, 6))},
  };
  for (int threads : {1, 3})
    for (int64_t m : {1, 3, 9}) {
      ThreadPool pool(threads);
      const std::vector<float> x = r.input(m, k);
      for (const auto& set : sets) {
        std::vector<std::vector<float>> ys, refs;
        std::vector<std::vector<int>> seen;
        for (const auto& w : set) {
          ys.emplace_back(static_cast<size_t>(m * w.rows), -7.0f);
          refs.emplace_back(static_cast<size_t>(m * w.rows), -7.0f);
          seen.emplace_back(static_cast<size_t>(w.rows), 0);
          matmul(pool, x.data(), m, w, refs.back().data());
        }
        std::mutex mu;
        std::vector<compute::ColumnEpilogue> eps;
        for (size_t i = 0; i < set.size(); ++i)
          eps.push_back([&, i](int64_t j0, int64_t j1) {
            std::lock_guard<std::mutex> lk(mu);
            for (int64_t j = j0; j < j1; ++j) ++seen[i][static_cast<size_t>(j)];
          });
        std::vector<compute::MatmulTarget> targets;
        for (size_t i = 0; i < set.size(); ++i) targets.push_back({&set[i], ys[i].data(), &eps[i]});
        compute::matmul_many(pool, x.data(), m, targets);
        for (size_t i = 0; i < set.size(); ++i) {
          for (size_t e = 0; e < ys[i].size(); ++e)
            ASSERT_EQ(ys[i][e], refs[i][e]) << "target " << i << " m " << m << " threads " << threads << " at " << e;
          for (int c : seen[i]) ASSERT_EQ(c, 1) << "target " << i;
        }
        // The same weights as `first` targets (without epilogues) before a main target: each first
        // output is complete and exact when after_first runs (once), before any main epilogue,
        // whatever the row counts (9, 13, 5: not multiples of 16).
        const Weight& last = set.back();
        std::vector<float> y_main(static_cast<size_t>(m * last.rows), -7.0f);
        std::vector<std::vector<float>> y_first;
        std::vector<compute::MatmulTarget> first;
        for (size_t i = 0; i + 1 < set.size(); ++i) y_first.emplace_back(ys[i].size(), -7.0f);
        for (size_t i = 0; i + 1 < set.size(); ++i) first.push_back({&set[i], y_first[i].data(), nullptr});
        std::atomic<int> after_calls{0}, main_before_after{0};
        const compute::ColumnEpilogue main_ep = [&](int64_t, int64_t) {
          if (after_calls.load() == 0) ++main_before_after;
        };
        const compute::MatmulTarget main[] = {{&last, y_main.data(), &main_ep}};
        compute::matmul_many(pool, x.data(), m, main, first, [&] {
          for (size_t i = 0; i < y_first.size(); ++i) EXPECT_EQ(y_first[i], refs[i]) << "first target " << i;
          ++after_calls;
        });
        EXPECT_EQ(after_calls.load(), 1);
        EXPECT_EQ(main_before_after.load(), 0);
        EXPECT_EQ(y_main, refs.back());
      }
    }
}

// Targets with their own inputs (a decode step's chosen experts' downs, each on its expert's
// activation) in one matmul_many: each equals matmul() on its own input bit for bit, whatever the
// storage (dense, GGUF blocks as stored and interleaved for this CPU's integer kernel, BF16, mlx
// affine), with inputs of different widths, shared by several targets, or the call's x.
TEST(MatmulMany, TargetsWithTheirOwnInputsEqualSeparateMatmuls) {
  RandomWeights r(11);
  auto weight = [&](DType t, int64_t n, int64_t k, bool prepare) {
    Weight w = Weight::of(dtype_is_quantized(t) ? r.blocks(t, n, k) : r.dense(t, n, k));
    if (prepare) prepare_weight(w, nullptr);
    return w;
  };
  const int64_t k1 = 256, k2 = 768;
  const std::vector<Weight> ws = {
      weight(DType::Q4_K, 48, k1, true), weight(DType::Q6_K, 32, k1, true), weight(DType::Q4_K, 40, k2, true),
      weight(DType::Q6_K, 16, k2, false), weight(DType::Q8_0, 24, k2, true), weight(DType::BF16, 9, k1, true),
      weight(DType::F32, 7, k2, false),
  };
  const Weight affine = Weight::of(quantize_affine(r.dense(DType::F32, 17, k1), 4, 64, DType::BF16));
  for (int threads : {1, 3})
    for (int64_t m : {1, 4}) {
      ThreadPool pool(threads);
      auto input = [&](int64_t k) { return r.input(m, k); };
      // inputs: the call's x (k1), then one each for the k1 and k2 weights, one k2 input shared by two
      const std::vector<float> shared = input(k1), own1 = input(k1), own2 = input(k2), own3 = input(k2);
      struct Case { const Weight* w; const float* x; };
      const std::vector<Case> cases = {
          {&ws[0], nullptr},     {&ws[1], own1.data()}, {&ws[2], own2.data()}, {&ws[3], own3.data()},
          {&ws[4], own3.data()}, {&ws[5], own1.data()}, {&ws[6], own2.data()}, {&affine, own1.data()},
      };
      std::vector<std::vector<float>> ys, refs;
      std::vector<compute::MatmulTarget> targets;
      for (const Case& c : cases) {
        ys.emplace_back(static_cast<size_t>(m * c.w->rows), -7.0f);
        refs.emplace_back(static_cast<size_t>(m * c.w->rows), -7.0f);
        matmul(pool, c.x ? c.x : shared.data(), m, *c.w, refs.back().data());
      }
      for (size_t i = 0; i < cases.size(); ++i) targets.push_back({cases[i].w, ys[i].data(), nullptr, cases[i].x});
      compute::matmul_many(pool, shared.data(), m, targets);
      for (size_t i = 0; i < cases.size(); ++i)
        EXPECT_EQ(ys[i], refs[i]) << "target " << i << " m " << m << " threads " << threads;
      // Every target on its own input, the call's x null (as experts_mlp passes them).
      std::vector<compute::MatmulTarget> own(targets.begin() + 1, targets.end());
      for (auto& y : ys) std::fill(y.begin(), y.end(), -7.0f);
      compute::matmul_many(pool, nullptr, m, own);
      for (size_t i = 1; i < cases.size(); ++i) EXPECT_EQ(ys[i], refs[i]) << "own input, target " << i;
      // Two targets of different widths on one input: refused before anything runs.
      const compute::MatmulTarget bad[] = {{&ws[0], ys[0].data(), nullptr, own2.data()},
                                           {&ws[2], ys[2].data(), nullptr, own2.data()}};
      EXPECT_THROW(compute::matmul_many(pool, nullptr, m, bad), Error);
    }
}

}  // namespace
}  // namespace graft::compute
