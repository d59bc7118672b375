// The kernel templates instantiated with a portable 16-lane "vector" whose operations mirror the
// AVX-512 traits lane for lane (single-rounding fma, masked tail loads, the same horizontal tree).
// This runs the 16-lane tile, tail and blocking logic on any CPU, including ones without AVX-512,
// where the real AVX-512 kernels cannot run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "graft/core/tensor.h"
#include "graft/compute/kernels.h"
#include "compute/matmul_internal.h"

namespace graft::compute::detail {
namespace {

#define GRAFT_KATTR

struct Emu16 {
  struct V { float l[16]; };
  using M = int;
  static constexpr int W = 16;
  static constexpr int MR = 4, NR = 4;
  static constexpr int NR_DEC = 4;
  static constexpr int64_t KC = 32;  // small, so the test's k of 33..100 take several steps

  static V zero() { return V{}; }
  static M mask(int rem) { return rem; }
  static V fma(V a, V b, V c) {
    for (int i = 0; i < 16; ++i) c.l[i] = std::fma(a.l[i], b.l[i], c.l[i]);
    return c;
  }
  static float cvt(float v) { return v; }
  static float cvt(bf16_t v) { return bf16_to_f32(v.bits); }
  static float cvt(f16_t v) { return f16_to_f32(v.bits); }
  template <class T>
  static V load(const T* p, M rem = 16) {
    V v{};
    for (int i = 0; i < rem; ++i) v.l[i] = cvt(p[i]);
    return v;
  }
  static void store(float* p, V v) { std::memcpy(p, v.l, sizeof v.l); }
  static constexpr bool kHsum8 = false;  // Avx512 sums eight at once with the same tree
  static float hsum(V v) {  // as Avx512::hsum: halves, quarters, pairs, last pair
    float h[8], q[4];
    for (int i = 0; i < 8; ++i) h[i] = v.l[i] + v.l[i + 8];
    for (int i = 0; i < 4; ++i) q[i] = h[i] + h[i + 4];
    const float p0 = q[0] + q[2], p1 = q[1] + q[3];
    return p0 + p1;
  }
};

#include "compute/matmul_kernels.inc"

#undef GRAFT_KATTR

TEST(MatmulEmu16, MatchesReferenceExactAcrossSplits) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (int64_t m : {1, 3, 6, 9, 18})  // 18: the widened prefill
      for (int64_t k : {1, 15, 16, 17, 31, 32, 33, 64, 100})
        for (int64_t n : {1, 3, 4, 9}) {
          std::vector<float> x(static_cast<size_t>(m * k)), wf(static_cast<size_t>(n * k));
          for (float& v : x) v = u(rng);
          for (float& v : wf) v = u(rng);
          std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(dt, n * k)));
          convert_from_f32(wf.data(), dt, bytes.data(), n * k);
          const Tensor w = Tensor::owned(dt, {n, k}, std::move(bytes));
          convert_to_f32(dt, w.data, wf.data(), n * k);
          std::vector<float> ref(static_cast<size_t>(m * n)), y(ref.size()), ys(ref.size());
          matmul_reference(x.data(), m, k, w, ref.data());
          const MatmulArgs a{x.data(), m, k, n, w.data, dt, y.data(), false};
          mm_cols<Emu16>(a, 0, n);
          MatmulArgs b = a;
          b.y = ys.data();
          for (int64_t j = 0; j < n; ++j) mm_cols<Emu16>(b, j, j + 1);
          ASSERT_EQ(std::memcmp(y.data(), ys.data(), y.size() * 4), 0);
          if (isa_supported(Isa::Avx512)) {  // the real kernels (eight trees at once) are this model
            std::vector<float> yr(ref.size());
            MatmulArgs r = a;
            r.y = yr.data();
            matmul_cols_avx512(r, 0, n);
            ASSERT_EQ(std::memcmp(y.data(), yr.data(), y.size() * 4), 0)
                << "avx512 vs its emulation: " << dtype_name(dt) << " m=" << m << " k=" << k << " n=" << n;
          }
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double mag = 0;
              for (int64_t t = 0; t < k; ++t) mag += std::fabs(double(x[i * k + t]) * wf[j * k + t]);
              ASSERT_LE(std::fabs(double(y[i * n + j]) - ref[i * n + j]), (double(k) / 16 + 6) * 6e-8 * mag)
                  << dtype_name(dt) << " m=" << m << " k=" << k << " n=" << n << " at " << i << "," << j;
            }
        }
}

}  // namespace
}  // namespace graft::compute::detail
