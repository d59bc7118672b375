// The AVX512-VNNI integer dot product (vpdpbusd on 512-bit vectors), chosen at run time. Signed
// weight codes are biased by 128 and the bias taken back exactly (see matmul_q8_avxvnni.cpp). 16
// F32 lanes in the order of q8_dot_scalar16; a row whose k is an odd multiple of 32 ends with a
// masked half step (masked loads read nothing past the row and zero the rest).
// GCC 12's AVX-512 intrinsics fill "undefined" operands with self-initialized variables, which
// -Wuninitialized reports inside the header (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "compute/matmul_q8.h"
#include "compute/q8_simd.h"

namespace graft::compute::detail {

#define GRAFT_VNNI512_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

namespace {
GRAFT_VNNI512_ATTR inline __m512 step(__m512 acc, __m512i w, __m512i x, __m512 sc, bool signed_codes) {
  const __m512i zero = _mm512_setzero_si512(), bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512i s;
  if (signed_codes)
    s = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, _mm512_xor_si512(w, bias), x), _mm512_dpbusd_epi32(zero, bias, x));
  else
    s = _mm512_dpbusd_epi32(zero, w, x);
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc);
}
}  // namespace

GRAFT_VNNI512_ATTR float q8_dot_avx512vnni(const int8_t* wq, const float* wa4, const int8_t* xq, const float* xd4,
                                          int64_t k, bool signed_codes) {
  __m512 acc = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 64 <= k; c += 64) {
    const __m512i w = _mm512_loadu_si512(wq + c), x = _mm512_loadu_si512(xq + c);
    const __m512 sc = _mm512_mul_ps(_mm512_loadu_ps(wa4 + c / 4), _mm512_loadu_ps(xd4 + c / 4));
    acc = step(acc, w, x, sc, signed_codes);
  }
  if (c < k) {  // 32 columns left (k is a multiple of 32)
    const __mmask64 mb = 0xffffffffull;
    const __mmask16 mf = 0x00ff;
    const __m512i w = _mm512_maskz_loadu_epi8(mb, wq + c), x = _mm512_maskz_loadu_epi8(mb, xq + c);
    const __m512 sc = _mm512_mul_ps(_mm512_maskz_loadu_ps(mf, wa4 + c / 4), _mm512_maskz_loadu_ps(mf, xd4 + c / 4));
    acc = step(acc, w, x, sc, signed_codes);
  }
  return hsum16(acc);
}

}  // namespace graft::compute::detail
