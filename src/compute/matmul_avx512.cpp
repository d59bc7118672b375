// AVX-512 (F + BW + VL) matmul kernels, chosen at run time on CPUs that have them. Only the
// functions below carry the AVX-512 target; the file is otherwise built for x86-64-v3.
// GCC 12's _mm512_cvtph_ps / _mm512_extractf64x4_pd fill an "undefined" operand with a
// self-initialized variable, which -Wuninitialized reports inside the header (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <type_traits>
#include <vector>

#include "graft/core/tensor.h"
#include "compute/matmul_internal.h"
#include "compute/q8_simd.h"

namespace graft::compute::detail {
namespace {

#define GRAFT_KATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

struct Avx512 {
  using V = __m512;
  using M = __mmask16;
  static constexpr int W = 16;
  static constexpr int MR = 6, NR = 4;  // prefill: 24 accumulators of 32 zmm registers (6x4 beat 4x4 by 3-12 % and 8x2, 8x3 lost: BM_MatmulPrefill)
  static constexpr int NR_DEC = 4;      // decode: 4 weight streams
  static constexpr int64_t KC = 512;    // prefill: an x panel of 6 x 512 floats (12 KiB) in L1

  GRAFT_KATTR static V zero() { return _mm512_setzero_ps(); }
  GRAFT_KATTR static M mask(int rem) { return static_cast<M>((1u << rem) - 1u); }
  GRAFT_KATTR static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }

  GRAFT_KATTR static V load(const float* p) { return _mm512_loadu_ps(p); }
  GRAFT_KATTR static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  GRAFT_KATTR static V widen_bf16(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  GRAFT_KATTR static V load(const bf16_t* p) {
    return widen_bf16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  GRAFT_KATTR static V load(const f16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }

  // Masked loads read nothing past the tail (no fault, no sanitizer report) and zero the rest.
  GRAFT_KATTR static V load(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  GRAFT_KATTR static V load(const bf16_t* p, M m) { return widen_bf16(_mm256_maskz_loadu_epi16(m, p)); }
  GRAFT_KATTR static V load(const f16_t* p, M m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  }

  // hsum of eight accumulators at once (q8_simd.h's hsum16x8: the same tree as hsum below).
  static constexpr bool kHsum8 = true;
  GRAFT_KATTR static void hsum8(const V (&v)[8], float* out) { _mm256_storeu_ps(out, hsum16x8(v)); }

  // (((l0+l8) + (l4+l12)) + ((l2+l10) + (l6+l14))) + (... odd lanes ...): halves, then quarters.
  GRAFT_KATTR static float hsum(V v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};

#include "compute/matmul_kernels.inc"

#undef GRAFT_KATTR
}  // namespace

void matmul_cols_avx512(const MatmulArgs& a, int64_t j0, int64_t j1) { mm_cols<Avx512>(a, j0, j1); }

}  // namespace graft::compute::detail
