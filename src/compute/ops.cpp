// Vector ops of the forward pass (AVX2/FMA, the x86-64-v3 baseline; attention's loops on AVX-512
// machines: attend_avx512.cpp, the same bits). Tails use masked loads and stores, so a tail element
// goes through exactly the same arithmetic as a full-vector element.
#include "graft/compute/ops.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "graft/core/dtype.h"
#include "compute/attend_internal.h"
#include "compute/matmul_internal.h"

namespace graft::compute {

namespace {

__m256i tail_mask(int64_t rem) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(rem)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7))
float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// e^x: Cephes expf's range reduction and polynomial (x = n ln2 + r, |r| <= ln2/2), with 2^n
// applied as two halves so results through the subnormal range are right.
__m256 exp8(__m256 x) {
  // max/min return their second operand when one is NaN: this order keeps a NaN x.
  x = _mm256_max_ps(_mm256_set1_ps(-104.0f), x);  // below: rounds to 0
  x = _mm256_min_ps(_mm256_set1_ps(88.8f), x);    // above 88.72: overflows to +inf below
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  const __m256 z = _mm256_mul_ps(r, r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_add_ps(_mm256_fmadd_ps(p, z, r), _mm256_set1_ps(1.0f));
  const __m256i n = _mm256_cvtps_epi32(fx);  // in [-150, 128]
  const __m256i n1 = _mm256_srai_epi32(n, 1);
  const __m256i n2 = _mm256_sub_epi32(n, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

__m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_div_ps(_mm256_mul_ps(g, u), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace

void exp_f32(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, m, exp8(_mm256_maskload_ps(x + i, m)));
  }
}

namespace {
// How attention's loops load keys and values of each storage type: 8 elements widened to F32
// (exact for F16 and BF16), a masked tail of rem < 8 (zeros past it), one element.
struct F32Rows {
  using T = float;
  static constexpr detail::KvType kType = detail::KvType::F32;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static __m256 tail(const float* p, int64_t rem) { return _mm256_maskload_ps(p, tail_mask(rem)); }
  static float at(const float* p) { return *p; }
};
// A 16-bit tail: rem < 8 elements copied into a zeroed block of eight, then widened as a full load.
template <class L>
__m256 tail16(const uint16_t* p, int64_t rem) {
  alignas(16) uint16_t b[8] = {};
  std::copy(p, p + rem, b);
  return L::load8(b);
}
struct F16Rows {
  using T = uint16_t;
  static constexpr detail::KvType kType = detail::KvType::F16;
  static __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static __m256 tail(const uint16_t* p, int64_t rem) { return tail16<F16Rows>(p, rem); }
  static float at(const uint16_t* p) { return _cvtsh_ss(*p); }
};
struct BF16Rows {
  using T = uint16_t;
  static constexpr detail::KvType kType = detail::KvType::BF16;
  static __m256 load8(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  static __m256 tail(const uint16_t* p, int64_t rem) { return tail16<BF16Rows>(p, rem); }
  static float at(const uint16_t* p) { return bf16_to_f32(*p); }
};

// dot's body, inlined into attend's loop over positions (a call per position was 9 % of prefill);
// b is read through L (F32 for dot itself).
template <class L>
inline float dot_body(const float* a, const typename L::T* b, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int u = 0; u < 4; ++u)
      acc[u] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * u), L::load8(b + i + 8 * u), acc[u]);
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), L::load8(b + i), acc[0]);
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    acc[1] = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), L::tail(b + i, n - i), acc[1]);
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

// axpy's body with x read through L.
template <class L>
inline void axpy_body(float a, const typename L::T* x, float* y, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, L::load8(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] = std::fma(a, L::at(x + i), y[i]);
}
}  // namespace

float dot(const float* a, const float* b, int64_t n) { return dot_body<F32Rows>(a, b, n); }

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  if (n <= 0) return;
  const float ss = dot(x, x, n);
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const __m256 rv = _mm256_set1_ps(r);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), rv),
                                            _mm256_loadu_ps(weight + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, m, _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, m), rv),
                                                  _mm256_maskload_ps(weight + i, m)));
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    _mm256_maskstore_ps(out + i, m, silu_mul8(_mm256_maskload_ps(gate + i, m), _mm256_maskload_ps(up + i, m)));
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  __m256 mx = _mm256_set1_ps(kNegInf);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    mx = _mm256_max_ps(mx, _mm256_blendv_ps(mx, _mm256_maskload_ps(x + i, m), _mm256_castsi256_ps(m)));
  }
  const float maxv = hmax(mx);
  if (maxv == kNegInf) {  // nothing to attend to
    for (int64_t t = 0; t < n; ++t) x[t] = 0.0f;
    return;
  }
  const __m256 mv = _mm256_set1_ps(maxv);
  __m256 sum = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < n) {
    const __m256i m = tail_mask(n - i);
    const __m256 e = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, m), mv)),
                                   _mm256_castsi256_ps(m));
    _mm256_maskstore_ps(x + i, m, e);
    sum = _mm256_add_ps(sum, e);
  }
  scale(x, 1.0f / hsum(sum), n);
}

void add(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) x[i] += y[i];
}

void axpy(float a, const float* x, float* y, int64_t n) { axpy_body<F32Rows>(a, x, y, n); }

void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  // torch's gelu(approximate='tanh'): 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))).
  constexpr float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5), kKappa = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float inner = kBeta * (x + kKappa * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(inner)) * up[i];
  }
}

void soft_cap(float* x, int64_t n, float cap) {
  // transformers: x / cap, tanh, * cap (three F32 roundings, in that order).
  for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / cap) * cap;
}

namespace {
template <class L>
void attend_rows(const float* q, const typename L::T* k, const typename L::T* v, int64_t stride, int64_t n, int64_t hd,
                 float scale, float softcap, float* scores, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    detail::prefetch_row(k + j * stride, hd);
    scores[j] = dot_body<L>(q, k + j * stride, hd) * scale;
  }
  if (softcap > 0) soft_cap(scores, n, softcap);
  softmax(scores, n);
  int64_t c = 0;
  for (; c + 64 <= hd; c += 64) {  // eight accumulators: each element's fma chain is axpy's
    __m256 o[8];
    for (int u = 0; u < 8; ++u) o[u] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      if (c == 0) detail::prefetch_row(v + j * stride, hd);
      const __m256 s = _mm256_set1_ps(scores[j]);
      const typename L::T* vj = v + j * stride + c;
      for (int u = 0; u < 8; ++u) o[u] = _mm256_fmadd_ps(s, L::load8(vj + 8 * u), o[u]);
    }
    for (int u = 0; u < 8; ++u) _mm256_storeu_ps(out + c + 8 * u, o[u]);
  }
  if (c < hd) {
    std::fill(out + c, out + hd, 0.0f);
    for (int64_t j = 0; j < n; ++j) axpy_body<L>(scores[j], v + j * stride + c, out + c, hd - c);
  }
}

// Scores of H heads (q rows hd apart) against every key, each key loaded and widened once for all
// of them: per head the operations of dot_body for hd a multiple of 32 (four accumulators over steps
// of 32, then the same tree), so the same bits. 4·H accumulators + 4 keys: H ≤ 3 fits 16 registers.
template <class L, int H>
void group_scores(const float* q, const typename L::T* k, int64_t stride, int64_t n, int64_t hd, float scale,
                  float* scores) {
  for (int64_t j = 0; j < n; ++j) {
    const typename L::T* kj = k + j * stride;
    detail::prefetch_row(kj, hd);
    __m256 acc[H][4];
    for (int h = 0; h < H; ++h)
      for (int u = 0; u < 4; ++u) acc[h][u] = _mm256_setzero_ps();
    for (int64_t i = 0; i < hd; i += 32) {
      __m256 b[4];
      for (int u = 0; u < 4; ++u) b[u] = L::load8(kj + i + 8 * u);
      for (int h = 0; h < H; ++h)
        for (int u = 0; u < 4; ++u) acc[h][u] = _mm256_fmadd_ps(_mm256_loadu_ps(q + h * hd + i + 8 * u), b[u], acc[h][u]);
    }
    for (int h = 0; h < H; ++h)
      scores[h * n + j] =
          hsum(_mm256_add_ps(_mm256_add_ps(acc[h][0], acc[h][1]), _mm256_add_ps(acc[h][2], acc[h][3]))) * scale;
  }
}

// Weighted sums of H heads over 32 columns from c: each value loaded and widened once for both
// heads; per element the fma chain over positions of attend_rows (from 0, positions ascending).
template <class L, int H>
void group_values(const float* scores, const typename L::T* v, int64_t stride, int64_t n, int64_t hd, int64_t c,
                  float* out) {
  __m256 o[H][4];
  for (int h = 0; h < H; ++h)
    for (int u = 0; u < 4; ++u) o[h][u] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    if (c == 0) detail::prefetch_row(v + j * stride, hd);  // (the later passes find the rows in L2)
    __m256 x[4];
    for (int u = 0; u < 4; ++u) x[u] = L::load8(v + j * stride + c + 8 * u);
    for (int h = 0; h < H; ++h) {
      const __m256 sv = _mm256_set1_ps(scores[h * n + j]);
      for (int u = 0; u < 4; ++u) o[h][u] = _mm256_fmadd_ps(sv, x[u], o[h][u]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int u = 0; u < 4; ++u) _mm256_storeu_ps(out + h * hd + c + 8 * u, o[h][u]);
}

// attend for `heads` query heads sharing one key/value head (grouped-query attention), q and out
// rows hd apart, scores heads·n: each head's result is attend_rows's bit for bit.
template <class L>
void attend_heads(const float* q, const typename L::T* k, const typename L::T* v, int64_t stride, int64_t n,
                  int64_t hd, float scale, float softcap, float* scores, float* out, int64_t heads) {
  if (hd % 32 == 0 && detail::best_isa() == detail::Isa::Avx512) {  // the same bits, half the instructions
    detail::attend_scores_avx512(L::kType, q, k, stride, n, hd, scale, heads, scores);
    if (softcap > 0) soft_cap(scores, heads * n, softcap);
    for (int64_t h = 0; h < heads; ++h) softmax(scores + h * n, n);
    detail::attend_values_avx512(L::kType, scores, v, stride, n, hd, heads, out);
    return;
  }
  if (heads == 1 || hd % 32 != 0) {
    for (int64_t h = 0; h < heads; ++h)
      attend_rows<L>(q + h * hd, k, v, stride, n, hd, scale, softcap, scores + h * n, out + h * hd);
    return;
  }
  for (int64_t h = 0; h < heads;) {
    const int64_t left = heads - h;
    if (left >= 3) {
      group_scores<L, 3>(q + h * hd, k, stride, n, hd, scale, scores + h * n);
      h += 3;
    } else if (left == 2) {
      group_scores<L, 2>(q + h * hd, k, stride, n, hd, scale, scores + h * n);
      h += 2;
    } else {
      group_scores<L, 1>(q + h * hd, k, stride, n, hd, scale, scores + h * n);
      h += 1;
    }
  }
  if (softcap > 0) soft_cap(scores, heads * n, softcap);
  for (int64_t h = 0; h < heads; ++h) softmax(scores + h * n, n);
  for (int64_t c = 0; c < hd; c += 32)
    for (int64_t h = 0; h < heads; h += 2) {
      if (heads - h >= 2)
        group_values<L, 2>(scores + h * n, v, stride, n, hd, c, out + h * hd);
      else
        group_values<L, 1>(scores + h * n, v, stride, n, hd, c, out + h * hd);
    }
}
}  // namespace

void attend(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t hd, float scale,
            float* scores, float* out, int64_t heads, float softcap) {
  attend_heads<F32Rows>(q, k, v, stride, n, hd, scale, softcap, scores, out, heads);
}

void attend_f16(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n, int64_t hd,
                float scale, float* scores, float* out, int64_t heads, float softcap) {
  attend_heads<F16Rows>(q, k, v, stride, n, hd, scale, softcap, scores, out, heads);
}

void attend_bf16(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n, int64_t hd,
                 float scale, float* scores, float* out, int64_t heads, float softcap) {
  attend_heads<BF16Rows>(q, k, v, stride, n, hd, scale, softcap, scores, out, heads);
}

void scale(float* x, float a, int64_t n) {
  const __m256 av = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), av));
  for (; i < n; ++i) x[i] *= a;
}

}  // namespace graft::compute
