// Internal to the compute layer (compute/weight.cpp dispatches through it): SIMD pieces shared by the GGUF unpackers, the q8 kernels and the
// dense kernels' final sums. The horizontal sums are the fixed trees every kernel's scalar model
// uses, so kernels that share them agree bit for bit. AVX2/FMA/F16C is the build's baseline ISA;
// hsum16 and the eight-at-once trees need AVX-512 and are only called from functions compiled for it.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace graft::compute::detail {

// ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), the tree of hsum8 in matmul_q8.cpp's scalar models.
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Halves first (lane i + lane i + 8), then the 8-lane tree.
__attribute__((target("avx512f,avx2,fma"))) inline float hsum16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  return hsum8(h);
}

#define GRAFT_SIMD512 __attribute__((target("avx512f,avx2,fma"), always_inline)) inline
// hsum8 of eight 8-lane vectors at once, as eight [P01, P23, P45, P67] pairs (P01 = [v0, v1]): the
// same additions in the same association as hsum8 (float addition is commutative, so operand order
// does not matter), transposed so that each step serves every row. Returns the eight sums in lanes
// 0..7.
GRAFT_SIMD512 __m256 hsum8x8(const __m512 (&p)[4]) {
  // (l_i + l_{i+4}) for i < 4: rows 0..3 in q0, rows 4..7 in q1, four lanes each.
  const __m512 q0 = _mm512_add_ps(_mm512_shuffle_f32x4(p[0], p[1], 0x88), _mm512_shuffle_f32x4(p[0], p[1], 0xdd));
  const __m512 q1 = _mm512_add_ps(_mm512_shuffle_f32x4(p[2], p[3], 0x88), _mm512_shuffle_f32x4(p[2], p[3], 0xdd));
  // (g0 + g2, g1 + g3): 128-bit chunk c holds row c in lanes 0, 1 and row c + 4 in lanes 2, 3.
  const __m512 w = _mm512_add_ps(_mm512_shuffle_ps(q0, q1, 0x44), _mm512_shuffle_ps(q0, q1, 0xee));
  const __m512 x = _mm512_add_ps(w, _mm512_permute_ps(w, 0xb1));
  return _mm512_castps512_ps256(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0), x));
}
// hsum16 of eight accumulators: lane i + lane i + 8 first, two rows per step.
GRAFT_SIMD512 __m256 hsum16x8(const __m512 (&a)[8]) {
  __m512 p[4];
  for (int t = 0; t < 4; ++t)
    p[t] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * t], a[2 * t + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * t], a[2 * t + 1], 0xee));
  return hsum8x8(p);
}
GRAFT_SIMD512 __m256 hsum8x8(const __m256 (&m)[8]) {
  __m512 p[4];
  for (int t = 0; t < 4; ++t)
    p[t] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(m[2 * t])),
                                               _mm256_castps_pd(m[2 * t + 1]), 1));
  return hsum8x8(p);
}

#undef GRAFT_SIMD512

// 16 bytes of nibbles: element i is the low nibble of byte i, element 16 + i the high one.
inline __m256i nibbles16(const uint8_t* qs) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0f);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// Byte i of the result is 0x10 where bit i of the 32-bit word at p is set, else 0 (Q5's fifth bit).
inline __m256i bits_to_0x10(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf);
  v = _mm256_or_si256(v, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_and_si256(_mm256_cmpeq_epi8(v, _mm256_set1_epi64x(-1)), _mm256_set1_epi8(0x10));
}

}  // namespace graft::compute::detail
