// The AVX512-VNNI kernel of the interleaved copies (interleaved_blocks.h: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0, Q4_K, Q6_K, affine
// 4 / 8-bit): lane r of every vector is weight row 16g + r. Per block of 32 columns the codes are eight
// vectors (4-bit: four loads split into low and high nibbles; 8-bit: eight loads), each multiplied by four
// activation bytes broadcast from memory (vpdpbusd's m32bcst operand: the activations signed, the
// codes unsigned), in two integer chains that start from the offset correction −c·Σ q_x (c = 8 for
// the Q4_0 nibbles, 128 for the Q8_0 codes stored as q_w + 128, 0 for Q4_1 and the affine codes, which
// are stored unsigned as they are; exact in int32). Then the scalar model's F32 steps:
// acc = fma(float(sum), d_w·d_x, acc) (and the min / bias step; affine: F32 scale and bias of the
// block's mlx group). The
// weight vectors are loaded once per block for up to kMaxRows activation rows.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_cvtph_ps / _mm512_undefined
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "compute/interleaved_blocks.h"

namespace graft::compute::detail {

#define GRAFT_I512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"), always_inline)) inline
#define GRAFT_I512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace {

constexpr int kMaxRows = 8;

GRAFT_I512 __m512i bcst4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

template <InterleavedKind K, int R>
GRAFT_I512_FN void group_rows(const InterleavedBlocks& b, const Q8Activations& act, int64_t g, int64_t i0,
                              float* out) {
  const int64_t nb = b.blocks;
  const uint8_t* codes = b.codes(g);
  const uint16_t* scales = b.scales(g);
  // The packed records of rows i0 .. i0 + R − 1: one pointer each for codes, scales and sums.
  const int8_t* xq = act.xb.data() + i0 * nb * 32;
  const float* xd = act.xd.data() + i0 * nb;
  const int32_t* xs = act.xs.data() + i0 * nb;
  const float* xm = act.xm.data() + i0 * nb;
  const int32_t* xo16 = act.xo16.data() + 2 * i0 * nb;
  using F = InterleavedFmt<K>;
  const int64_t ahead_bytes = interleaved_prefetch_ahead();
  const float* params = b.params(g);  // (affine)
  const int shift = b.param_shift;
  // The prefetch cursor's bytes per block (affine: the group's record spread over its blocks).
  const int64_t stride = F::kCodeBytes + (F::kAffine ? b.scale_bytes : F::kScaleBytes);
  __m512 acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  __m512 super_d = _mm512_setzero_ps(), super_nm = super_d;  // (Q4_K: the super-block's d, −dmin)
  for (int64_t blk = 0; blk < nb; ++blk, xq += R * 32, xd += R, xs += R, xm += R, xo16 += 2 * R) {
    const uint8_t* p = codes + blk * F::kCodeBytes;
    const char* ahead = reinterpret_cast<const char*>(codes) + blk * stride + ahead_bytes;
#pragma GCC unroll 10
    for (int l = 0; l < (stride + 63) / 64; ++l) _mm_prefetch(ahead + 64 * l, _MM_HINT_T0);
    __m512i w[8];
    if constexpr (F::kNibbles) {
      const __m512i low = _mm512_set1_epi8(0x0f);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const __m512i v = _mm512_load_si512(p + 64 * t);
        w[t] = _mm512_and_si512(v, low);
        w[t + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
      }
    } else if constexpr (F::kFive) {
      // The nibbles as Q4's, each byte's fifth bit t moved to bit 4 (lane shifts keep it in its byte).
      const __m512i low = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
      const __m512i h = _mm512_load_si512(p + 256);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const __m512i v = _mm512_load_si512(p + 64 * t);
        const __m512i h_lo = _mm512_slli_epi32(h, 4 - t);  // column 4t + e: fifth bit t to bit 4
        const __m512i h_hi = _mm512_srli_epi32(h, t);  // column 16 + 4t + e: bit t + 4
        w[t] = _mm512_or_si512(_mm512_and_si512(v, low), _mm512_and_si512(h_lo, bit4));
        w[t + 4] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), low), _mm512_and_si512(h_hi, bit4));
      }
    } else if constexpr (F::kSix) {
      // The nibbles as Q4's, each byte's high bit pair of word t (bits 2t, 2t + 1) moved to bits 4, 5.
      const __m512i low = _mm512_set1_epi8(0x0f), bits45 = _mm512_set1_epi8(0x30);
      const __m512i h0 = _mm512_load_si512(p + 256), h1 = _mm512_load_si512(p + 320);
#pragma GCC unroll 4
      for (int t = 0; t < 4; ++t) {
        const __m512i v = _mm512_load_si512(p + 64 * t);
        const __m512i m0 = t < 3 ? _mm512_slli_epi32(h0, 4 - 2 * t) : _mm512_srli_epi32(h0, 2);
        const __m512i m1 = t < 3 ? _mm512_slli_epi32(h1, 4 - 2 * t) : _mm512_srli_epi32(h1, 2);
        w[t] = _mm512_or_si512(_mm512_and_si512(v, low), _mm512_and_si512(m0, bits45));
        w[t + 4] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), low), _mm512_and_si512(m1, bits45));
      }
    } else {
#pragma GCC unroll 8
      for (int t = 0; t < 8; ++t) w[t] = _mm512_load_si512(p + 64 * t);
    }
    if constexpr (F::kSplit) {
      // Q6_K: a scale d·sc per 16 columns; the sums of words 0..3 and 4..7 apart, each from its own
      // offset −32·Σ q_x of those 16 columns.
      const int8_t* sc = b.q6k_scales(g, blk);
      const __m512 d = _mm512_load_ps(b.q6k_d(g, blk));
      const __m512 d0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)))));
      const __m512 d1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sc + 16)))));
      static_assert(F::kOffset == 32, "xo16 holds the offset −32·Σ q_x");
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const int8_t* x = xq + r * 32;
        __m512i s0 = _mm512_dpbusd_epi32(_mm512_set1_epi32(xo16[2 * r]), w[0], bcst4(x));
        __m512i s1 = _mm512_dpbusd_epi32(_mm512_set1_epi32(xo16[2 * r + 1]), w[4], bcst4(x + 16));
        s0 = _mm512_dpbusd_epi32(s0, w[1], bcst4(x + 4));
        s1 = _mm512_dpbusd_epi32(s1, w[5], bcst4(x + 20));
        s0 = _mm512_dpbusd_epi32(s0, w[2], bcst4(x + 8));
        s1 = _mm512_dpbusd_epi32(s1, w[6], bcst4(x + 24));
        s0 = _mm512_dpbusd_epi32(s0, w[3], bcst4(x + 12));
        s1 = _mm512_dpbusd_epi32(s1, w[7], bcst4(x + 28));
        const __m512 dx = _mm512_set1_ps(xd[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(d0, dx), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(d1, dx), acc[r]);
      }
      continue;
    }
    __m512 dw, mw;
    if constexpr (F::kAffine) {
      const float* pr = params + (blk >> shift) * 32;
      dw = _mm512_load_ps(pr);
      mw = _mm512_load_ps(pr + 16);
    } else if constexpr (F::kQ4K) {
      // d·sc and (−dmin)·m, exact in F32: the values of an affine copy's parameters, 40 bytes a block
      // (d and −dmin widened once per super-block of 8 blocks).
      if (blk % 8 == 0) {
        const uint16_t* dd = b.q4k_d(g, blk);
        super_d = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dd)));
        super_nm = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(dd + 16)));
      }
      const uint8_t* sm = b.q4k_scales(g, blk);
      dw = _mm512_mul_ps(super_d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sm)))));
      mw = _mm512_mul_ps(super_nm,
                         _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sm + 16)))));
    } else {
      const uint16_t* sc = scales + blk * (F::kScaleBytes / 2);
      dw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc)));
      if constexpr (F::kMin) mw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc + 16)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int8_t* x = xq + r * 32;
      const __m512i start = F::kOffset ? _mm512_set1_epi32(-F::kOffset * xs[r]) : _mm512_setzero_si512();
      __m512i s0 = _mm512_dpbusd_epi32(start, w[0], bcst4(x));
      __m512i s1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], bcst4(x + 4));
      s0 = _mm512_dpbusd_epi32(s0, w[2], bcst4(x + 8));
      s1 = _mm512_dpbusd_epi32(s1, w[3], bcst4(x + 12));
      s0 = _mm512_dpbusd_epi32(s0, w[4], bcst4(x + 16));
      s1 = _mm512_dpbusd_epi32(s1, w[5], bcst4(x + 20));
      s0 = _mm512_dpbusd_epi32(s0, w[6], bcst4(x + 24));
      s1 = _mm512_dpbusd_epi32(s1, w[7], bcst4(x + 28));
      const float dx = xd[r];
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(dx));
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), scale, acc[r]);
      if constexpr (F::kMin)
        acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xm[r]), acc[r]);  // (xm = dx·float(xs), as the model)
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + (i0 + r) * 16, acc[r]);
}

template <InterleavedKind K>
void group_all(const InterleavedBlocks& b, const Q8Activations& act, int64_t g, float* out) {
  // Tiles of eight rows then one of the rest: the groups of act.pack_blocks8.
  for_row_tiles<kMaxRows>(0, act.m, [&]<int R>(int64_t i) { group_rows<K, R>(b, act, g, i, out); });
}

}  // namespace

void interleaved_group_avx512(const InterleavedBlocks& b, const Q8Activations& act, int64_t g, float* out) {
  with_kind(b.kind, [&]<InterleavedKind K>() { group_all<K>(b, act, g, out); });
}

}  // namespace graft::compute::detail
