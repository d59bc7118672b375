#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "graft/core/dtype.h"
#include "graft/core/tensor.h"
#include "graft/compute/ops.h"

namespace graft::compute {
namespace {

std::vector<float> randv(int64_t n, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

// Distance in units in the last place (same-sign finite floats).
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(int64_t{ia} - ib);
}

TEST(Ops, ExpMatchesLibmWithinTwoUlp) {
  std::vector<float> xs;
  for (float x = -110.0f; x < 95.0f; x += 0.00731f) xs.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.72f, 88.7228f, -87.3f, -103.9f, -104.5f}) xs.push_back(x);
  std::vector<float> got(xs.size());
  exp_f32(xs.data(), got.data(), static_cast<int64_t>(xs.size()));
  for (size_t i = 0; i < xs.size(); ++i) {
    const float want = std::exp(xs[i]);
    if (std::isinf(want)) {
      ASSERT_TRUE(std::isinf(got[i])) << xs[i];
    } else if (want < std::numeric_limits<float>::min()) {  // subnormal: absolute error
      ASSERT_LE(std::fabs(got[i] - want), 2 * std::numeric_limits<float>::denorm_min()) << xs[i];
    } else {
      ASSERT_LE(ulps(got[i], want), 2) << "exp(" << xs[i] << ") = " << got[i] << ", want " << want;
    }
  }
  const float special[3] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  float out[3];
  exp_f32(special, out, 3);
  EXPECT_TRUE(std::isnan(out[0]));
  EXPECT_TRUE(std::isinf(out[1]) && out[1] > 0);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(Ops, RmsNormMatchesDoubleReference) {
  for (int64_t n : {1, 7, 8, 9, 64, 576, 577}) {
    const auto x = randv(n, 1), w = randv(n, 2, 0.5f, 1.5f);
    std::vector<float> out(static_cast<size_t>(n)), inplace = x;
    rms_norm(x.data(), w.data(), n, 1e-5f, out.data());
    rms_norm(inplace.data(), w.data(), n, 1e-5f, inplace.data());
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double r = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_NEAR(out[i], x[i] * r * w[i], 4e-6 * std::fabs(x[i] * r * w[i]) + 1e-7) << n << " " << i;
      EXPECT_EQ(out[i], inplace[i]);
    }
  }
}

TEST(Ops, SiluMul) {
  for (int64_t n : {0, 1, 5, 8, 13, 1536}) {
    auto g = randv(n, 3, -20.0f, 20.0f);
    if (n > 1) { g[0] = -200.0f; g[1] = 200.0f; }
    const auto u = randv(n, 4);
    std::vector<float> out(static_cast<size_t>(n));
    silu_mul(g.data(), u.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) {
      const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
      EXPECT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-30) << g[i];
    }
  }
}

TEST(Ops, Softmax) {
  for (int64_t n : {1, 3, 8, 11, 100}) {
    auto x = randv(n, 5, -10.0f, 10.0f);
    if (n > 2) x[1] = -std::numeric_limits<float>::infinity();  // masked position
    std::vector<float> s = x;
    softmax(s.data(), n);
    double mx = -1e300, sum = 0;
    for (float v : x) mx = std::max(mx, double(v));
    for (float v : x) sum += std::exp(double(v) - mx);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(s[i], std::exp(double(x[i]) - mx) / sum, 1e-6);
    if (n > 2) {
      EXPECT_EQ(s[1], 0.0f);
    }
  }
  std::vector<float> all(5, -std::numeric_limits<float>::infinity());
  softmax(all.data(), 5);
  for (float v : all) EXPECT_EQ(v, 0.0f);
}

TEST(Ops, AddAxpyScaleDot) {
  for (int64_t n = 0; n <= 70; ++n) {
    const auto a = randv(n, 6), b = randv(n, 7);
    std::vector<float> s = a, ax = b, sc = a;
    add(s.data(), b.data(), n);
    axpy(0.5f, a.data(), ax.data(), n);
    scale(sc.data(), -2.0f, n);
    double d = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(s[i], a[i] + b[i]);
      EXPECT_EQ(ax[i], std::fma(0.5f, a[i], b[i]));
      EXPECT_EQ(sc[i], a[i] * -2.0f);
      d += double(a[i]) * b[i];
      mag += std::fabs(double(a[i]) * b[i]);
    }
    EXPECT_NEAR(dot(a.data(), b.data(), n), d, 1e-6 * mag + 1e-30) << n;
  }
}

// attend is dot, softmax and axpy fused (out kept in registers): the same bits, for head sizes with
// and without a tail past the 64-column register blocks, and keys/values strided as in a KV cache.
// On an AVX-512 machine the multiples of 32 run attend_avx512.cpp's loops against the AVX2 dot and
// axpy (GRAFT_MATMUL_ISA=avx2: the AVX2 loops).
TEST(Ops, AttendEqualsDotSoftmaxAxpy) {
  for (int64_t hd : {8, 32, 40, 64, 72, 96, 128}) {
    const int64_t n = 37, stride = 3 * hd + 5;
    const auto q = randv(hd, 11), k = randv(n * stride, 12), v = randv(n * stride, 13);
    const float scl = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> ref_s(n), ref(hd, 0.0f), got_s(n), got(hd, -1.0f);
    for (int64_t j = 0; j < n; ++j) ref_s[j] = dot(q.data(), &k[j * stride], hd) * scl;
    softmax(ref_s.data(), n);
    for (int64_t j = 0; j < n; ++j) axpy(ref_s[j], &v[j * stride], ref.data(), hd);
    attend(q.data(), k.data(), v.data(), stride, n, hd, scl, got_s.data(), got.data());
    for (int64_t i = 0; i < hd; ++i) ASSERT_EQ(got[i], ref[i]) << "hd " << hd << " element " << i;
  }
}

// attend_f16/attend_bf16 read 16-bit keys and values and widen them as they load: bit for bit attend
// on the widened (F32) keys and values, for head sizes with a 64-column tail and with an odd tail
// shorter than one vector (the 16-bit loads' copy path), strided as in a KV cache.
TEST(Ops, Attend16BitEqualsAttendOnWidenedKeysAndValues) {
  for (DType t : {DType::F16, DType::BF16})
    for (int64_t hd : {8, 13, 40, 64, 77, 128}) {
      const int64_t n = 37, stride = 3 * hd + 5;
      const auto q = randv(hd, 21), k = randv(n * stride, 22), v = randv(n * stride, 23);
      std::vector<uint16_t> k16(k.size()), v16(v.size());
      convert_from_f32(k.data(), t, k16.data(), static_cast<int64_t>(k.size()));
      convert_from_f32(v.data(), t, v16.data(), static_cast<int64_t>(v.size()));
      std::vector<float> kw(k.size()), vw(v.size());
      convert_to_f32(t, k16.data(), kw.data(), static_cast<int64_t>(k.size()));
      convert_to_f32(t, v16.data(), vw.data(), static_cast<int64_t>(v.size()));
      const float scl = 1.0f / std::sqrt(static_cast<float>(hd));
      std::vector<float> ref_s(n), ref(hd), got_s(n), got(hd, -1.0f);
      attend(q.data(), kw.data(), vw.data(), stride, n, hd, scl, ref_s.data(), ref.data());
      (t == DType::F16 ? attend_f16 : attend_bf16)(q.data(), k16.data(), v16.data(), stride, n, hd, scl, got_s.data(),
                                                   got.data(), 1, 0.0f);
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(got_s[j], ref_s[j]) << dtype_name(t) << " hd " << hd << " score " << j;
      for (int64_t i = 0; i < hd; ++i) ASSERT_EQ(got[i], ref[i]) << dtype_name(t) << " hd " << hd << " element " << i;
    }
}

// Grouped-query attention: `heads` query heads against one key/value head in one call (each key and
// value loaded once per pass of up to three / two heads) give each head's one-head result bit for
// bit, for every storage type, head sizes on the grouped path (multiples of 32) and off it (40), and
// head counts that leave a remainder of one or two.
TEST(Ops, AttendHeadsEqualsOneHeadAtATime) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t hd : {32, 40, 64, 96, 128})
      for (int64_t heads : {1, 2, 3, 4, 5, 7}) {
        const int64_t n = 29, stride = 3 * hd + 5;
        const auto q = randv(heads * hd, 31), k = randv(n * stride, 32), v = randv(n * stride, 33);
        std::vector<uint16_t> k16(k.size()), v16(v.size());
        if (t != DType::F32) {
          convert_from_f32(k.data(), t, k16.data(), static_cast<int64_t>(k.size()));
          convert_from_f32(v.data(), t, v16.data(), static_cast<int64_t>(v.size()));
        }
        auto run = [&](const float* qh, int64_t h, float* s, float* o) {
          const float scl = 0.125f;
          if (t == DType::F32) attend(qh, k.data(), v.data(), stride, n, hd, scl, s, o, h);
          if (t == DType::F16) attend_f16(qh, k16.data(), v16.data(), stride, n, hd, scl, s, o, h);
          if (t == DType::BF16) attend_bf16(qh, k16.data(), v16.data(), stride, n, hd, scl, s, o, h);
        };
        std::vector<float> got_s(heads * n), got(heads * hd, -1.0f);
        run(q.data(), heads, got_s.data(), got.data());
        for (int64_t h = 0; h < heads; ++h) {
          std::vector<float> ref_s(n), ref(hd);
          run(&q[h * hd], 1, ref_s.data(), ref.data());
          for (int64_t i = 0; i < hd; ++i)
            ASSERT_EQ(got[h * hd + i], ref[i]) << dtype_name(t) << " hd " << hd << " heads " << heads << " head " << h;
          for (int64_t j = 0; j < n; ++j) ASSERT_EQ(got_s[h * n + j], ref_s[j]) << dtype_name(t) << " score " << j;
        }
      }
}

}  // namespace
}  // namespace graft::compute
