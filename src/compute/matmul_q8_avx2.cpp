// The AVX2 integer dot product for GGUF block weights × 8-bit activations (the project's baseline
// ISA): vpmaddubsw pairs an unsigned byte with a signed one, so signed weight codes go through
// |w| and sign(x, w); the 16-bit pair sums cannot saturate (|w| ≤ 128, |x| ≤ 127). Eight F32 lanes
// in the order of q8_dot_scalar8.
#include <immintrin.h>

#include "compute/matmul_q8.h"
#include "compute/q8_simd.h"

namespace graft::compute::detail {

__attribute__((target("avx2,fma"))) float q8_dot_avx2(const int8_t* wq, const float* wa4, const int8_t* xq,
                                                      const float* xd4, int64_t k, bool signed_codes) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t c = 0; c < k; c += 32) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wq + c));
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c));
    const __m256i p = signed_codes ? _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
                                   : _mm256_maddubs_epi16(w, x);
    const __m256i s = _mm256_madd_epi16(p, ones);
    const __m256 sc = _mm256_mul_ps(_mm256_loadu_ps(wa4 + c / 4), _mm256_loadu_ps(xd4 + c / 4));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), sc, acc);
  }
  return hsum8(acc);
}

}  // namespace graft::compute::detail
