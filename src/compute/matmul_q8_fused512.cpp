// Fused AVX512-VNNI kernels for the common GGUF block formats: each 64-column chunk of a weight row
// is unpacked in registers (no per-row buffer) and dotted with up to eight activation rows while it
// is there. The arithmetic is the 16-lane model's (q8_dot_scalar16 + q8_min_term) step for step, so
// the result equals the unpack path bit for bit:
//   - a lane's int32 is Σ of four q_w·q_x. vpdpbusd multiplies unsigned by signed bytes: the
//     activations come packed as q_x + 128 (Q8Activations::pack_rows8) and the weights signed, and
//     the 128·Σ q_w this adds is removed exactly in integers (each lane's sum starts at −128·Σ q_w,
//     computed once per chunk for all rows);
//   - the lane's F32 scale is a4·d4 with a4 computed as the unpacker computes it (d·sc in F32);
//   - the min term (Q4_1, Q5_1, Q4_K) goes through q8_min_term's eight lanes in its order.
// A row whose k is an odd multiple of 32 ends with a half chunk (the packed activations are zero
// there, the block scales past the row's end 0: those lanes add exact zeros, as the unpack path's
// masked step does). Eight rows' records sit at fixed offsets from one pointer, so the loop keeps
// its accumulators and pointers in registers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "graft/core/gguf_blocks.h"
#include "compute/matmul_q8.h"
#include "compute/q8_simd.h"
#include "compute/quant_formats.h"

namespace graft::compute::detail {

#define GRAFT_F512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"), always_inline)) inline
#define GRAFT_F512_FN __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace {

// One chunk of 64 columns as the kernel sees it: signed codes w, lane scales a (16 lanes of four
// columns), and the min term's four per-16 values b (formats with a min).
struct Chunk512 {
  __m512i w;
  __m512 a;
  __m128 b;
};

GRAFT_F512 __m512 halves(float lo, float hi) {  // lanes 0..7 = lo, 8..15 = hi
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(lo)), _mm256_castps_pd(_mm256_set1_ps(hi)), 1));
}
GRAFT_F512 __m128 pairs(float lo, float hi) { return _mm_setr_ps(lo, lo, hi, hi); }
// 16 bytes of nibbles from each of two blocks → [p0 low, p0 high, p1 low, p1 high] (64 codes).
GRAFT_F512 __m512i nibbles2x16(const uint8_t* p0, const uint8_t* p1) {
  const __m512i v = _mm512_inserti64x4(
      _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0)))),
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p1))), 1);
  const __m512i sh = _mm512_set_epi64(0x0004000400040004, 0x0004000400040004, 0, 0, 0x0004000400040004,
                                      0x0004000400040004, 0, 0);
  return _mm512_and_si512(_mm512_srlv_epi16(v, sh), _mm512_set1_epi8(0x0f));
}
// 32 bytes of nibbles → [low nibbles, high nibbles] (Q4_K's two sub-blocks of a 64-column chunk).
GRAFT_F512 __m512i nibbles32(const uint8_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(v), _mm256_srli_epi16(v, 4), 1);
  return _mm512_and_si512(w, _mm512_set1_epi8(0x0f));
}

// The 32-column block formats: a chunk is blocks 2c and 2c + 1 (only 2c when half).
// Decode streams each weight byte once, and the hardware prefetcher stops at 4 KiB page boundaries
// of the file mapping: each chunk asks for the bytes 2 KiB ahead (rows are contiguous; prefetches
// past the end never fault). Q8_0 decode: 42 → 53 tok/s on SmolLM2, one thread.
constexpr int kPrefetchAhead = 2048;

// The 32-column block formats. A group is eight blocks (256 columns, four chunks): their f16
// scales (and mins, the next field) are converted in one instruction; blocks past the row's end
// read nothing and get 0, so a half chunk's missing block adds exact zeros.
struct Group512 {
  __m512 d;  // lanes 0..7: d of blocks 8g .. 8g + 7
  __m512 m;  // lanes 0..7: the min of the same blocks (formats with a min)
};
template <int kBytes, bool kMin>
struct Legacy512 {
  static constexpr int kChunkBytes = 2 * kBytes;
  static constexpr bool kHasMin = kMin;
  // The f16 fields at offset `at` of blocks b0.. b0 + 3 (those below `blocks`; 0 past them) as one
  // 64-bit word: integer loads and shifts (bytes stored to the stack and read back as one vector
  // stall on store forwarding: that was 13 % of the kernel's time).
  GRAFT_F512 static long long four(const uint8_t* p, int b0, int64_t blocks) {
    uint64_t v = 0;
    for (int b = 0; b < 4; ++b)
      if (b0 + b < blocks) {
        uint16_t h;
        std::memcpy(&h, p + (b0 + b) * kBytes, 2);
        v |= static_cast<uint64_t>(h) << (16 * b);
      }
    return static_cast<long long>(v);
  }
  GRAFT_F512 static __m512 eight(const uint8_t* p, int64_t blocks) {
    return _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_set_epi64x(four(p, 4, blocks), four(p, 0, blocks))));
  }
  GRAFT_F512 static void group(const uint8_t* row, int64_t g, int64_t k, Group512& st) {
    const int64_t b0 = g * 8, blocks = std::min<int64_t>(8, k / 32 - b0);
    // 16-bit loads (a gather is slower on CPUs with the gather-data-sampling mitigation).
    const uint8_t* p = row + b0 * kBytes;
    st.d = eight(p, blocks);
    if constexpr (kMin) st.m = eight(p + 2, blocks);
  }
  // Lanes 0..7 = block 2q, 8..15 = block 2q + 1 of the group; the min as (2q, 2q, 2q + 1, 2q + 1).
  GRAFT_F512 static void scales(const Group512& st, int q, Chunk512& ch) {
    const __m512i lo = _mm512_set1_epi32(2 * q), hi = _mm512_set1_epi32(2 * q + 1);
    ch.a = _mm512_permutexvar_ps(_mm512_mask_blend_epi32(0xff00, lo, hi), st.d);
    if constexpr (kMin)
      ch.b = _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_mask_blend_epi32(0x000c, lo, hi), st.m));
  }
};

struct Q4_0F : Legacy512<18, false> {
  GRAFT_F512 static void chunk(const uint8_t* row, int64_t c, bool half, const Group512& st, Chunk512& ch) {
    const uint8_t* p0 = row + c * 2 * 18;
    ch.w = _mm512_sub_epi8(nibbles2x16(p0 + 2, half ? p0 + 2 : p0 + 20), _mm512_set1_epi8(8));
    scales(st, static_cast<int>(c % 4), ch);
  }
};
struct Q4_1F : Legacy512<20, true> {
  GRAFT_F512 static void chunk(const uint8_t* row, int64_t c, bool half, const Group512& st, Chunk512& ch) {
    const uint8_t* p0 = row + c * 2 * 20;
    ch.w = nibbles2x16(p0 + 4, half ? p0 + 4 : p0 + 24);
    scales(st, static_cast<int>(c % 4), ch);
  }
};
struct Q8_0F : Legacy512<34, false> {
  GRAFT_F512 static void chunk(const uint8_t* row, int64_t c, bool half, const Group512& st, Chunk512& ch) {
    const uint8_t* p0 = row + c * 2 * 34;
    const uint8_t* p1 = half ? p0 : p0 + 34;
    ch.w = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p0 + 2))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p1 + 2)), 1);
    scales(st, static_cast<int>(c % 4), ch);
  }
};
// Q5_0 / Q5_1: the fifth bits of two blocks are bits 0..63 of one mask (bit i = column i).
template <int kBytes, int kOff, bool kMin>
struct Q5F : Legacy512<kBytes, kMin> {
  GRAFT_F512 static void chunk(const uint8_t* row, int64_t c, bool half, const Group512& st, Chunk512& ch) {
    constexpr int qh_at = kMin ? 4 : 2, qs_at = qh_at + 4;
    const uint8_t* p0 = row + c * 2 * kBytes;
    const uint8_t* p1 = half ? p0 : p0 + kBytes;
    uint32_t h0, h1;
    std::memcpy(&h0, p0 + qh_at, 4);
    std::memcpy(&h1, p1 + qh_at, 4);
    const __mmask64 bits = static_cast<__mmask64>(h0) | static_cast<__mmask64>(h1) << 32;
    ch.w = _mm512_or_si512(nibbles2x16(p0 + qs_at, p1 + qs_at), _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(0x10)));
    if constexpr (kOff != 0) ch.w = _mm512_sub_epi8(ch.w, _mm512_set1_epi8(kOff));
    Legacy512<kBytes, kMin>::scales(st, static_cast<int>(c % 4), ch);
  }
};
using Q5_0F = Q5F<22, 16, false>;
using Q5_1F = Q5F<24, 0, true>;

// Q4_K: super-blocks of 256 = four chunks; chunk q holds sub-blocks 2q (low nibbles) and 2q + 1.
struct Q4_KF {
  static constexpr int kChunkBytes = 36;
  static constexpr bool kHasMin = true;
  GRAFT_F512 static void group(const uint8_t*, int64_t, int64_t, Group512&) {}
  GRAFT_F512 static void chunk(const uint8_t* row, int64_t c, bool, const Group512&, Chunk512& ch) {
    const uint8_t* sb = row + (c / 4) * 144;
    const int q = static_cast<int>(c % 4);
    const float d = f16_at(sb), dmin = f16_at(sb + 2);
    uint8_t sc0, m0, sc1, m1;
    q4k_scale_min(sb + 4, 2 * q, &sc0, &m0);
    q4k_scale_min(sb + 4, 2 * q + 1, &sc1, &m1);
    ch.w = nibbles32(sb + 16 + 32 * q);
    ch.a = halves(d * static_cast<float>(sc0), d * static_cast<float>(sc1));
    ch.b = pairs(-(dmin * static_cast<float>(m0)), -(dmin * static_cast<float>(m1)));
  }
};

// Q6_K: chunk q of a super-block: half h = q / 2 of 128 columns; q even takes the low nibbles of
// ql[64h .. 64h + 63] with qh bits 0,1 / 2,3, q odd the high nibbles with bits 4,5 / 6,7.
struct Q6_KF {
  static constexpr int kChunkBytes = 52;
  static constexpr bool kHasMin = false;
  GRAFT_F512 static void group(const uint8_t*, int64_t, int64_t, Group512&) {}
  GRAFT_F512 static void chunk(const uint8_t* row, int64_t c, bool, const Group512&, Chunk512& ch) {
    const uint8_t* sb = row + (c / 4) * 210;
    const int q = static_cast<int>(c % 4), h = q / 2;
    const __m512i ql = _mm512_loadu_si512(sb + 64 * h);
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 128 + 32 * h));
    const __m512i low = _mm512_and_si512(q % 2 ? _mm512_srli_epi16(ql, 4) : ql, _mm512_set1_epi8(0x0f));
    const int s0 = q % 2 ? 4 : 0;
    const __m512i hb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(qh, s0)),
                                          _mm256_srli_epi16(qh, s0 + 2), 1);
    const __m512i high = _mm512_slli_epi16(_mm512_and_si512(hb, _mm512_set1_epi8(0x03)), 4);
    ch.w = _mm512_sub_epi8(_mm512_or_si512(low, high), _mm512_set1_epi8(32));
    const auto* scales = reinterpret_cast<const int8_t*>(sb + 192) + 4 * q;
    const __m128 sc4 = _mm_cvtepi32_ps(_mm_setr_epi32(scales[0], scales[1], scales[2], scales[3]));
    const __m512 sc = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3),
                                            _mm512_castps128_ps512(sc4));
    ch.a = _mm512_mul_ps(_mm512_set1_ps(f16_at(sb + 208)), sc);
  }
};

// One chunk of 64 columns (a half chunk when Half) against R activation rows: px is the chunk's
// first record (rows 128 bytes apart), ps the group's s16 records (formats with a min).
template <class F, int R, bool Half>
GRAFT_F512 void chunk_step(const uint8_t* row, int64_t c, int64_t k, const uint8_t* px, const float* ps,
                           Group512& st, __m128& b_even, __m512 (&acc)[R], __m256 (&macc)[R]) {
  Chunk512 ch;
  _mm_prefetch(reinterpret_cast<const char*>(row) + c * F::kChunkBytes + kPrefetchAhead, _MM_HINT_T0);
  if (c % 4 == 0) F::group(row, c / 4, k, st);
  F::chunk(row, c, Half, st, ch);
  // −128·Σ q_w per lane: the activations' +128, removed where each row's sum starts.
  const __m512i zero = _mm512_setzero_si512();
  const __m512i corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(static_cast<char>(0x80)), ch.w));
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const __m512i x = _mm512_load_si512(px + r * 128);
    const __m512 d4 = _mm512_load_ps(px + r * 128 + 64);
    const __m512i sum = _mm512_dpbusd_epi32(corr, x, ch.w);
    acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ch.a, d4), acc[r]);
  }
  if constexpr (F::kHasMin) {
    // Groups 4c .. 4c + 3 are lanes (4c) mod 8 of q8_min_term's step: even chunks lanes 0..3.
    const int64_t chunks = (k + 63) / 64;
    if (c % 2 == 0) b_even = ch.b;
    if (c % 2 == 1 || c + 1 == chunks) {
      const int64_t g0 = (c - c % 2) * 4, groups = k / 16 - g0;  // groups of this 8-lane step
      const __mmask8 mask = groups >= 8 ? 0xff : static_cast<__mmask8>((1u << groups) - 1);
      const __m256 b = _mm256_maskz_mov_ps(mask, _mm256_set_m128(c % 2 ? ch.b : _mm_setzero_ps(), b_even));
      const float* s = ps + (c / 2) * R * 8;  // zero past k / 16
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) macc[r] = _mm256_fmadd_ps(b, _mm256_loadu_ps(s + r * 8), macc[r]);
    }
  }
}

template <class F, int R>
GRAFT_F512_FN void fused_rows(const uint8_t* row, int64_t k, const Q8Activations& act, int64_t i0, float* out) {
  const int64_t chunks = (k + 63) / 64, pairs = (chunks + 1) / 2;
  const uint8_t* px = act.x8_records() + i0 * chunks * 128;
  const float* ps = F::kHasMin ? act.s8.data() + i0 * pairs * 8 : nullptr;
  __m512 acc[R];
  __m256 macc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm512_setzero_ps();
    macc[r] = _mm256_setzero_ps();
  }
  __m128 b_even = _mm_setzero_ps();  // the min term's values of the even chunk of the current 8 groups
  Group512 st;
  const int64_t full = k / 64;
  for (int64_t c = 0; c < full; ++c)
    chunk_step<F, R, false>(row, c, k, px + c * R * 128, ps, st, b_even, acc, macc);
  if (k % 64) chunk_step<F, R, true>(row, full, k, px + full * R * 128, ps, st, b_even, acc, macc);
  if constexpr (R == 8) {  // the per-row trees cost a quarter of a 576-column row's time
    __m256 v = hsum16x8(acc);
    if constexpr (F::kHasMin) v = _mm256_add_ps(v, hsum8x8(macc));
    _mm256_storeu_ps(out, v);
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    float v = hsum16(acc[r]);
    if constexpr (F::kHasMin) v += hsum8(macc[r]);
    out[r] = v;
  }
}

// Decode (one activation row): four weight rows per call, their chunk steps interleaved (four
// independent chains; the per-call overhead of a 576-column row was a third of its time). Each
// weight row goes through exactly fused_rows<F, 1>'s steps, so the bits are the same.
template <class F, int W>
GRAFT_F512_FN void fused_weight_rows(const uint8_t* row0, int64_t row_bytes, int64_t k, const Q8Activations& act,
                                     int64_t i0, float* out) {
  const int64_t chunks = (k + 63) / 64, pairs = (chunks + 1) / 2;
  const uint8_t* px = act.x8_records() + i0 * chunks * 128;
  const float* ps = F::kHasMin ? act.s8.data() + i0 * pairs * 8 : nullptr;
  __m512 acc[W][1];
  __m256 macc[W][1];
  __m128 b_even[W];
  Group512 st[W];
#pragma GCC unroll 4
  for (int w = 0; w < W; ++w) {
    acc[w][0] = _mm512_setzero_ps();
    macc[w][0] = _mm256_setzero_ps();
    b_even[w] = _mm_setzero_ps();
  }
  const int64_t full = k / 64;
  for (int64_t c = 0; c < full; ++c) {
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w)
      chunk_step<F, 1, false>(row0 + w * row_bytes, c, k, px + c * 128, ps, st[w], b_even[w], acc[w], macc[w]);
  }
  if (k % 64) {
#pragma GCC unroll 4
    for (int w = 0; w < W; ++w)
      chunk_step<F, 1, true>(row0 + w * row_bytes, full, k, px + full * 128, ps, st[w], b_even[w], acc[w], macc[w]);
  }
#pragma GCC unroll 4
  for (int w = 0; w < W; ++w) {
    float v = hsum16(acc[w][0]);
    if constexpr (F::kHasMin) v += hsum8(macc[w][0]);
    out[w] = v;
  }
}

template <class F>
void fused_dispatch(const uint8_t* row, int64_t k, const Q8Activations& act, int64_t i0, int rows, float* out) {
  switch (rows) {
    case 1: fused_rows<F, 1>(row, k, act, i0, out); break;
    case 2: fused_rows<F, 2>(row, k, act, i0, out); break;
    case 3: fused_rows<F, 3>(row, k, act, i0, out); break;
    case 4: fused_rows<F, 4>(row, k, act, i0, out); break;
    case 5: fused_rows<F, 5>(row, k, act, i0, out); break;
    case 6: fused_rows<F, 6>(row, k, act, i0, out); break;
    case 7: fused_rows<F, 7>(row, k, act, i0, out); break;
    default: fused_rows<F, 8>(row, k, act, i0, out); break;
  }
}

}  // namespace

Q8FusedRows q8_fused_avx512vnni(DType t) {
  switch (t) {
    case DType::Q4_0: return fused_dispatch<Q4_0F>;
    case DType::Q4_1: return fused_dispatch<Q4_1F>;
    case DType::Q8_0: return fused_dispatch<Q8_0F>;
    case DType::Q5_0: return fused_dispatch<Q5_0F>;
    case DType::Q5_1: return fused_dispatch<Q5_1F>;
    case DType::Q4_K: return fused_dispatch<Q4_KF>;
    case DType::Q6_K: return fused_dispatch<Q6_KF>;
    default: return nullptr;
  }
}

Q8FusedWeightRows q8_fused4_avx512vnni(DType t) {
  switch (t) {
    case DType::Q4_0: return fused_weight_rows<Q4_0F, 4>;
    case DType::Q4_1: return fused_weight_rows<Q4_1F, 4>;
    case DType::Q8_0: return fused_weight_rows<Q8_0F, 4>;
    case DType::Q5_0: return fused_weight_rows<Q5_0F, 4>;
    case DType::Q5_1: return fused_weight_rows<Q5_1F, 4>;
    case DType::Q4_K: return fused_weight_rows<Q4_KF, 4>;
    case DType::Q6_K: return fused_weight_rows<Q6_KF, 4>;
    default: return nullptr;
  }
}

}  // namespace graft::compute::detail
