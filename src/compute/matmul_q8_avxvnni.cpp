// The AVX-VNNI integer dot product (vpdpbusd on 256-bit vectors, VEX-encoded: Alder Lake and later,
// Zen 5), chosen at run time. vpdpbusd multiplies unsigned by signed bytes; signed weight codes are
// biased by 128 and the bias taken back exactly in integers (Σ 128·x from a second vpdpbusd).
// Eight F32 lanes in the order of q8_dot_scalar8, so the result equals AVX2's bit for bit.
#include <immintrin.h>

#include "compute/matmul_q8.h"
#include "compute/q8_simd.h"

namespace graft::compute::detail {

#define GRAFT_VNNI_ATTR __attribute__((target("avxvnni,avx2,fma")))

GRAFT_VNNI_ATTR float q8_dot_avxvnni(const int8_t* wq, const float* wa4, const int8_t* xq, const float* xd4,
                                    int64_t k, bool signed_codes) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i zero = _mm256_setzero_si256(), bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t c = 0; c < k; c += 32) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + c));
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c));
    __m256i s;
    if (signed_codes)
      s = _mm256_sub_epi32(_mm256_dpbusd_avx_epi32(zero, _mm256_xor_si256(w, bias), x),
                           _mm256_dpbusd_avx_epi32(zero, bias, x));
    else
      s = _mm256_dpbusd_avx_epi32(zero, w, x);
    const __m256 sc = _mm256_mul_ps(_mm256_loadu_ps(wa4 + c / 4), _mm256_loadu_ps(xd4 + c / 4));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc);
  }
  return hsum8(acc);
}

}  // namespace graft::compute::detail
