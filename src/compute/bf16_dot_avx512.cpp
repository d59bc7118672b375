// The AVX512-BF16 kernels of compute/bf16_dot.h: activations rounded by vcvtne2ps2bf16, products
// by vdpbf16ps (32 BF16 pairs into 16 F32 lanes per instruction: twice the multiply-adds of an F32
// fma, and no widening of the weights). Chosen at run time; only these functions carry the target.
// Tiles as in matmul_kernels.inc (GotoBLAS order without packing, one accumulator vector per
// output over k, the fixed tree at the end), so every output is summed in one order whatever the
// tile, m or thread count: matmul_bf16_dot_reference's, bit for bit.
// GCC 12's AVX-512 intrinsics fill "undefined" operands with self-initialized variables, which
// -Wuninitialized reports inside the header (GCC PR 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "compute/bf16_dot_internal.h"
#include "compute/matmul_internal.h"
#include "compute/q8_simd.h"

namespace graft::compute::detail {
namespace {

#define GRAFT_BF16_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))

// Prefill tile: 24 accumulators, 4 weight vectors and one x vector of the 32 zmm registers.
constexpr int kMR = 6, kNR = 4;
constexpr int kNRDecode = 4;  // decode: 4 weight streams

GRAFT_BF16_ATTR inline __m512 dot(__m512 acc, __m512i x, __m512i w) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh&>(x), reinterpret_cast<__m512bh&>(w));
}

// R x rows (stride kp, zero-padded) against C weight rows (stride k) into y[i * ldy + j].
template <int R, int C>
GRAFT_BF16_ATTR void tile(const uint16_t* x, int64_t kp, const uint16_t* w, int64_t k, float* y, int64_t ldy,
                          bool acc) {
  __m512 c[R][C];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int j = 0; j < C; ++j) c[i][j] = _mm512_setzero_ps();
  const int64_t kfull = k & ~int64_t{31};
  for (int64_t kk = 0; kk < kfull; kk += 32) {
    if constexpr (R == 1) {
      // Decode streams each weight byte once: ask for each row's line 4 KiB ahead (as the F32
      // decode tiles do; the hardware prefetcher trains poorly on short row segments).
#pragma GCC unroll 8
      for (int j = 0; j < C; ++j)
        __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(w + j * k + kk) + 4096), 0, 3);
    }
    __m512i wv[C];
#pragma GCC unroll 8
    for (int j = 0; j < C; ++j) wv[j] = _mm512_loadu_si512(w + j * k + kk);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512i xv = _mm512_loadu_si512(x + i * kp + kk);
#pragma GCC unroll 8
      for (int j = 0; j < C; ++j) c[i][j] = dot(c[i][j], xv, wv[j]);
    }
  }
  if (kfull < k) {
    // The masked load reads nothing past the row; x's padding is zero already.
    const __mmask32 mk = _cvtu32_mask32((1u << (k - kfull)) - 1u);
    __m512i wv[C];
#pragma GCC unroll 8
    for (int j = 0; j < C; ++j) wv[j] = _mm512_maskz_loadu_epi16(mk, w + j * k + kfull);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512i xv = _mm512_loadu_si512(x + i * kp + kfull);
#pragma GCC unroll 8
      for (int j = 0; j < C; ++j) c[i][j] = dot(c[i][j], xv, wv[j]);
    }
  }
  if constexpr (R * C % 8 == 0) {
#pragma GCC unroll 4
    for (int g = 0; g < R * C; g += 8) {
      __m512 v[8];
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) v[t] = c[(g + t) / C][(g + t) % C];
      alignas(32) float s[8];
      _mm256_store_ps(s, hsum16x8(v));
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) {
        float& out = y[((g + t) / C) * ldy + (g + t) % C];
        out = acc ? out + s[t] : s[t];
      }
    }
  } else {
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int j = 0; j < C; ++j) {
        const float s = hsum16(c[i][j]);
        float& out = y[i * ldy + j];
        out = acc ? out + s : s;
      }
  }
}

// The largest tile with at most r rows and c weight rows.
template <int R, int C>
GRAFT_BF16_ATTR void tile_rc(int r, int c, const uint16_t* x, int64_t kp, const uint16_t* w, int64_t k, float* y,
                             int64_t ldy, bool acc) {
  if constexpr (R > 1) {
    if (r < R) return tile_rc<R - 1, C>(r, c, x, kp, w, k, y, ldy, acc);
  }
  if constexpr (C > 1) {
    if (c < C) return tile_rc<R, C - 1>(r, c, x, kp, w, k, y, ldy, acc);
  }
  tile<R, C>(x, kp, w, k, y, ldy, acc);
}

#undef GRAFT_BF16_ATTR
}  // namespace

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c"))) void round_rows_bf16_avx512(
    const float* x, int64_t k, int64_t kp, uint16_t* out, int64_t i0, int64_t i1) {
  (void)kp;
  for (int64_t i = i0; i < i1; ++i) {
    const float* xi = x + i * k;
    uint16_t* oi = out + i * kp;
    int64_t t = 0;
    for (; t + 32 <= k; t += 32) {
      const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xi + t + 16), _mm512_loadu_ps(xi + t));
      _mm512_storeu_si512(oi + t, reinterpret_cast<const __m512i&>(r));
    }
    for (; t < k; t += 16) {
      const int rem = k - t < 16 ? static_cast<int>(k - t) : 16;
      const __mmask16 mk = static_cast<__mmask16>((1u << rem) - 1u);
      const __m256bh r = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mk, xi + t));
      _mm256_mask_storeu_epi16(oi + t, mk, reinterpret_cast<const __m256i&>(r));
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c"))) void bf16_dot_cols_avx512(
    const uint16_t* x, int64_t m, int64_t k, int64_t kp, const uint16_t* w, int64_t n, float* y, bool accumulate,
    int64_t j0, int64_t j1) {
  if (m == 1) {
    int64_t j = j0;
    for (; j + kNRDecode <= j1; j += kNRDecode) tile<1, kNRDecode>(x, kp, w + j * k, k, y + j, 0, accumulate);
    if (j < j1) tile_rc<1, kNRDecode>(1, static_cast<int>(j1 - j), x, kp, w + j * k, k, y + j, 0, accumulate);
    return;
  }
  // Groups of weight rows sized for L2; each block of kMR x rows sweeps the group's tiles.
  const int64_t jc = prefill_col_block(k, 2, kNR);
  for (int64_t jb = j0; jb < j1; jb += jc) {
    const int64_t je = jb + jc < j1 ? jb + jc : j1;
    for (int64_t i = 0; i < m; i += kMR) {
      const int mr = static_cast<int>(m - i < kMR ? m - i : kMR);
      const uint16_t* xi = x + i * kp;
      float* yi = y + i * n;
      int64_t j = jb;
      if (mr == kMR)
        for (; j + kNR <= je; j += kNR) tile<kMR, kNR>(xi, kp, w + j * k, k, yi + j, n, accumulate);
      for (; j < je; j += kNR) {
        const int nr = static_cast<int>(je - j < kNR ? je - j : kNR);
        tile_rc<kMR, kNR>(mr, nr, xi, kp, w + j * k, k, yi + j, n, accumulate);
      }
    }
  }
}

}  // namespace graft::compute::detail
