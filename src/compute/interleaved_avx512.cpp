// The AVX512-VNNI kernel of the interleaved copies (interleaved_blocks.h: Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0, Q4_K, Q6_K, affine
// 4 / 8-bit): lane r of every vector is weight row 16g + r. Per block of 32 columns the codes are eight
// vectors (4-bit: four loads split into low and high nibbles; 8-bit: eight loads), each multiplied by four
// activation bytes broadcast from memory (vpdpbusd's m32bcst operand: the activations signed, the
// codes unsigned), in two integer chains, columns 0..15 and 16..31 (the activations' scale groups),
// that start from the offset correction −c·Σ q_x of their columns (c = 8 for the Q4_0 nibbles, 128
// for the Q8_0 codes stored as q_w + 128, 16 for Q5_0, 32 for Q6_K, 0 for Q4_1 and the affine codes,
// which are stored unsigned as they are; exact in int32). Then the scalar model's steps: the sums
// shifted by their half's e and added (exact), acc = fma(float(sum), d_w·d_x, acc) (Q6_K, a weight
// scale per half: acc = fma(float(sum_h), d_w[h]·d_x[h], acc) per half), and the min / bias step
// (affine: F32 scale and bias of the block's mlx group). The
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

// acc + the products of four activation bytes (broadcast to every lane) with a word of codes, as
// one vpdpbusd with an embedded broadcast (m32bcst): GCC 12 does not fold _mm512_set1_epi32 of a
// load into it, and a separate vpbroadcastd is one more instruction per word and activation row.
using I32Alias = int32_t __attribute__((may_alias, aligned(1)));
GRAFT_I512 __m512i dpbusd_bcst(__m512i acc, __m512i w, const int8_t* x) {
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(w), "m"(*reinterpret_cast<const I32Alias*>(x)));
  return acc;
}
// v << e in every lane, e broadcast from memory (the same folding).
GRAFT_I512 __m512i sllv_bcst(__m512i v, const int32_t* e) {
  asm("vpsllvd %2%{1to16%}, %1, %0" : "=v"(v) : "v"(v), "m"(*e));
  return v;
}

// A chain's start, −c·Σ q_x of its 16 columns, from the packed −32·Σ q_x (Q6_K's c; exact shifts for
// the others' c = 8, 16, 128): a broadcast load, not a multiply and a move from a general register.
template <int32_t C>
GRAFT_I512 __m512i chain_start(const int32_t* xo) {
  static_assert(C == 0 || C == 8 || C == 16 || C == 32 || C == 128, "an offset the packed −32·Σ q_x gives exactly");
  if constexpr (C == 0) {
    return _mm512_setzero_si512();
  } else {
    const __m512i v = _mm512_set1_epi32(*xo);
    if constexpr (C == 32) return v;
    else if constexpr (C == 128) return _mm512_slli_epi32(v, 2);
    else return _mm512_srai_epi32(v, C == 16 ? 1 : 2);
  }
}

template <InterleavedKind K, int R>
GRAFT_I512_FN void group_rows(const InterleavedBlocks& b, const Q8Activations& act, int64_t g, int64_t i0,
                              float* out) {
  const int64_t nb = b.blocks;
  const uint8_t* codes = b.codes(g);
  const uint16_t* scales = b.scales(g);
  // The packed records of rows i0 .. i0 + R − 1: one pointer each for codes, scales and sums.
  const int8_t* xq = act.xb.data() + i0 * nb * 32;
  const float* xd = act.xd.data() + 2 * i0 * nb;
  const int32_t* xe = act.xe.data() + 2 * i0 * nb;
  const float* xdb = act.xdb.data() + i0 * nb;
  const int32_t* xo = act.xo.data() + 2 * i0 * nb;
  const float* xm = act.xm.data() + i0 * nb;
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
  for (int64_t blk = 0; blk < nb; ++blk, xq += R * 32, xd += 2 * R, xe += 2 * R, xo += 2 * R, xdb += R, xm += R) {
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
    // The block's weight scale: one for both halves (dw0), or Q6_K's d·sc of each half (dw0, dw1).
    __m512 dw0, dw1 = _mm512_setzero_ps(), mw;
    if constexpr (F::kSix) {
      const int8_t* sc = b.q6k_scales(g, blk);
      const __m512 d = _mm512_load_ps(b.q6k_d(g, blk));
      dw0 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)))));
      dw1 = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sc + 16)))));
    } else if constexpr (F::kAffine) {
      const float* pr = params + (blk >> shift) * 32;
      dw0 = _mm512_load_ps(pr);
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
      dw0 = _mm512_mul_ps(super_d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sm)))));
      mw = _mm512_mul_ps(super_nm,
                         _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(sm + 16)))));
    } else {
      const uint16_t* sc = scales + blk * (F::kScaleBytes / 2);
      dw0 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc)));
      if constexpr (F::kMin) mw = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(sc + 16)));
    }
    // Two integer chains, columns 0..15 (words 0..3) and 16..31 (words 4..7), each from its offset
    // −c·Σ q_x of those columns, each with its own F32 step (the activations' scale is per 16).
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const int8_t* x = xq + r * 32;
      __m512i s0 = chain_start<F::kOffset>(xo + 2 * r), s1 = chain_start<F::kOffset>(xo + 2 * r + 1);
      s0 = dpbusd_bcst(s0, w[0], x);
      s1 = dpbusd_bcst(s1, w[4], x + 16);
      s0 = dpbusd_bcst(s0, w[1], x + 4);
      s1 = dpbusd_bcst(s1, w[5], x + 20);
      s0 = dpbusd_bcst(s0, w[2], x + 8);
      s1 = dpbusd_bcst(s1, w[6], x + 24);
      s0 = dpbusd_bcst(s0, w[3], x + 12);
      s1 = dpbusd_bcst(s1, w[7], x + 28);
      if constexpr (F::kSix) {  // a weight scale per half: one step each, with the half's d_x
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_mul_ps(dw0, _mm512_set1_ps(xd[2 * r])), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_mul_ps(dw1, _mm512_set1_ps(xd[2 * r + 1])), acc[r]);
      } else {  // one: the halves' sums shifted onto the block scale's grid (exact), one F32 step
        const __m512i sum = _mm512_add_epi32(sllv_bcst(s0, &xe[2 * r]),
                                             sllv_bcst(s1, &xe[2 * r + 1]));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dw0, _mm512_set1_ps(xdb[r])), acc[r]);
      }
      if constexpr (F::kMin) acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xm[r]), acc[r]);  // (xm: the model's)
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
