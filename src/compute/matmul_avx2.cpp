// AVX2 + FMA + F16C matmul kernels: the x86-64-v3 baseline every graft binary can run.
#include <immintrin.h>

#include <cstring>

#include <type_traits>
#include <vector>

#include "graft/core/tensor.h"
#include "compute/matmul_internal.h"

namespace graft::compute::detail {
namespace {

#define GRAFT_KATTR __attribute__((target("avx2,fma,f16c")))

struct Avx2 {
  using V = __m256;
  using M = int;  // tail length, 1..7
  static constexpr int W = 8;
  static constexpr int MR = 4, NR = 3;  // prefill: 12 accumulators, 3 weight vectors and x: the 16 ymm registers (4x3 beat 4x2 by 25-40 %, 3x4 and 6x2 in between: BM_MatmulPrefill with GRAFT_MATMUL_ISA=avx2)
  static constexpr int NR_DEC = 4;      // decode: 4 weight streams
  static constexpr int64_t KC = 512;    // prefill: an x panel of 4 x 512 floats (8 KiB) in L1

  GRAFT_KATTR static V zero() { return _mm256_setzero_ps(); }
  GRAFT_KATTR static M mask(int rem) { return rem; }
  GRAFT_KATTR static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }

  GRAFT_KATTR static V load(const float* p) { return _mm256_loadu_ps(p); }
  GRAFT_KATTR static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  GRAFT_KATTR static V load(const bf16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  GRAFT_KATTR static V load(const f16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }

  GRAFT_KATTR static V load(const float* p, M rem) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(rem), idx));
  }
  // 16-bit tails have no masked load in AVX2: copy the tail into a zeroed register image.
  GRAFT_KATTR static __m128i tail16(const void* p, M rem) {
    alignas(16) uint16_t buf[8] = {};
    std::memcpy(buf, p, static_cast<size_t>(rem) * 2);
    return _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
  }
  GRAFT_KATTR static V load(const bf16_t* p, M rem) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(tail16(p, rem)), 16));
  }
  GRAFT_KATTR static V load(const f16_t* p, M rem) { return _mm256_cvtph_ps(tail16(p, rem)); }

  // ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7))
  static constexpr bool kHsum8 = false;  // one tree per accumulator
  GRAFT_KATTR static float hsum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
  }
};

#include "compute/matmul_kernels.inc"

#undef GRAFT_KATTR
}  // namespace

void matmul_cols_avx2(const MatmulArgs& a, int64_t j0, int64_t j1) { mm_cols<Avx2>(a, j0, j1); }

}  // namespace graft::compute::detail
