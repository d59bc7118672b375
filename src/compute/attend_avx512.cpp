// The AVX-512 loops of attention (ops.cpp's attend_heads, head sizes a multiple of 32): ops.cpp's
// AVX2 operations, in the same order, on vectors twice as wide, so the same bits on every path.
// - Scores: dot_body keeps four 8-lane accumulators over steps of 32 columns. Here the 16 lanes of
//   one vector are two of them (a step's columns 0..15: accumulators 0 and 1; 16..31: 2 and 3),
//   each lane the same fma chain; the tree ((a0 + a1) + (a2 + a3)) is each vector's halves added,
//   then the two sums, then ops' 8-lane horizontal order.
// - Values: each output element is one fma chain over the positions (ascending, from 0), whatever
//   the width; here all heads of a pass (up to four) share each widened value vector.
// Half the instructions of the AVX2 loops a position: a decode step's attention is bound by them
// once the cache streams (bench: BM_AttendDecode3B).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_cvtph_ps / _mm512_undefined
#endif
#include <immintrin.h>

#include "compute/attend_internal.h"

namespace graft::compute::detail {

#define GRAFT_A512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c"), always_inline)) inline
#define GRAFT_A512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace {

// 16 keys or values of each storage type widened to F32 (exact for F16 and BF16).
struct F32x16 {
  using T = float;
  GRAFT_A512 static __m512 load(const float* p) { return _mm512_loadu_ps(p); }
};
struct F16x16 {
  using T = uint16_t;
  GRAFT_A512 static __m512 load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};
struct BF16x16 {
  using T = uint16_t;
  GRAFT_A512 static __m512 load(const uint16_t* p) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  }
};

// ops.cpp's dot_body tree and hsum: ((a0 + a1) + (a2 + a3)), then ((l0+l4) + (l2+l6)) + ((l1+l5) + (l3+l7)).
// (maskz: GCC 12 warns at link time on the plain form's _mm256_undefined_pd)
GRAFT_A512 __m256 high_half(__m512 v) { return _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xff, _mm512_castps_pd(v), 1)); }
GRAFT_A512 float tree_sum(__m512 a01, __m512 a23) {
  const __m256 s01 = _mm256_add_ps(_mm512_castps512_ps256(a01), high_half(a01));
  const __m256 s23 = _mm256_add_ps(_mm512_castps512_ps256(a23), high_half(a23));
  const __m256 v = _mm256_add_ps(s01, s23);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Scores of H heads (q rows hd apart) against every key, each key widened once for all of them.
template <class L, int H>
GRAFT_A512_FN void scores_pass(const float* q, const typename L::T* k, int64_t stride, int64_t n, int64_t hd,
                               float scale, float* scores) {
  for (int64_t j = 0; j < n; ++j) {
    const typename L::T* kj = k + j * stride;
    prefetch_row(kj, hd);
    __m512 a01[H], a23[H];
    for (int h = 0; h < H; ++h) a01[h] = a23[h] = _mm512_setzero_ps();
    for (int64_t i = 0; i < hd; i += 32) {
      const __m512 b0 = L::load(kj + i), b1 = L::load(kj + i + 16);
      for (int h = 0; h < H; ++h) {
        a01[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * hd + i), b0, a01[h]);
        a23[h] = _mm512_fmadd_ps(_mm512_loadu_ps(q + h * hd + i + 16), b1, a23[h]);
      }
    }
    for (int h = 0; h < H; ++h) scores[h * n + j] = tree_sum(a01[h], a23[h]) * scale;
  }
}

// Weighted sums of H heads over C vectors of 16 columns from c: each value widened once for all heads.
template <class L, int H, int C>
GRAFT_A512_FN void values_pass(const float* scores, const typename L::T* v, int64_t stride, int64_t n, int64_t hd,
                               int64_t c, float* out) {
  __m512 o[H][C];
  for (int h = 0; h < H; ++h)
    for (int u = 0; u < C; ++u) o[h][u] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    if (c == 0) prefetch_row(v + j * stride, hd);  // (the later passes find the rows in L2)
    __m512 x[C];
    for (int u = 0; u < C; ++u) x[u] = L::load(v + j * stride + c + 16 * u);
    for (int h = 0; h < H; ++h) {
      const __m512 s = _mm512_set1_ps(scores[h * n + j]);
      for (int u = 0; u < C; ++u) o[h][u] = _mm512_fmadd_ps(s, x[u], o[h][u]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int u = 0; u < C; ++u) _mm512_storeu_ps(out + h * hd + c + 16 * u, o[h][u]);
}

// Calls f.template operator()<H>(h) over heads [0, heads) in passes of up to four.
template <class F>
void head_passes(int64_t heads, F&& f) {
  for (int64_t h = 0; h < heads;) {
    const int64_t left = heads - h;
    if (left >= 4) f.template operator()<4>(h), h += 4;
    else if (left == 3) f.template operator()<3>(h), h += 3;
    else if (left == 2) f.template operator()<2>(h), h += 2;
    else f.template operator()<1>(h), h += 1;
  }
}

template <class L>
void scores_all(const float* q, const void* k, int64_t stride, int64_t n, int64_t hd, float scale, int64_t heads,
                float* scores) {
  head_passes(heads, [&]<int H>(int64_t h) {
    scores_pass<L, H>(q + h * hd, static_cast<const typename L::T*>(k), stride, n, hd, scale, scores + h * n);
  });
}

template <class L>
void values_all(const float* scores, const void* v, int64_t stride, int64_t n, int64_t hd, int64_t heads,
                float* out) {
  const auto* vt = static_cast<const typename L::T*>(v);
  head_passes(heads, [&]<int H>(int64_t h) {
    int64_t c = 0;
    for (; c + 64 <= hd; c += 64) values_pass<L, H, 4>(scores + h * n, vt, stride, n, hd, c, out + h * hd);
    if (c < hd) values_pass<L, H, 2>(scores + h * n, vt, stride, n, hd, c, out + h * hd);  // hd % 64 == 32
  });
}

}  // namespace

void attend_scores_avx512(KvType t, const float* q, const void* k, int64_t stride, int64_t n, int64_t hd, float scale,
                          int64_t heads, float* scores) {
  if (t == KvType::F32) return scores_all<F32x16>(q, k, stride, n, hd, scale, heads, scores);
  if (t == KvType::F16) return scores_all<F16x16>(q, k, stride, n, hd, scale, heads, scores);
  return scores_all<BF16x16>(q, k, stride, n, hd, scale, heads, scores);
}

void attend_values_avx512(KvType t, const float* scores, const void* v, int64_t stride, int64_t n, int64_t hd,
                          int64_t heads, float* out) {
  if (t == KvType::F32) return values_all<F32x16>(scores, v, stride, n, hd, heads, out);
  if (t == KvType::F16) return values_all<F16x16>(scores, v, stride, n, hd, heads, out);
  return values_all<BF16x16>(scores, v, stride, n, hd, heads, out);
}

}  // namespace graft::compute::detail
