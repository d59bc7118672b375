// Fused AVX2 kernels for the common GGUF block formats (also taken on AVX-VNNI CPUs: same 8-lane
// model, same result): each 32-column chunk of a weight row is unpacked in registers and dotted with
// up to four activation rows. Step for step the 8-lane model of q8_dot_scalar8 + q8_min_term, so the
// result equals the unpack path bit for bit: vpmaddubsw on |w| and sign(x, w) for signed codes
// (pairs ≤ 2·128·127, no saturation), on the codes directly for the formats with a min (codes < 32).
#include <immintrin.h>

#include <cstring>

#include "graft/core/gguf_blocks.h"
#include "compute/matmul_q8.h"
#include "compute/q8_simd.h"
#include "compute/quant_formats.h"

namespace graft::compute::detail {

#define GRAFT_F256 __attribute__((target("avx2,fma,f16c"), always_inline)) inline
#define GRAFT_F256_FN __attribute__((target("avx2,fma,f16c")))

namespace {

// One 32-column chunk: codes w (the true q_w), lane scales a (8 lanes of four columns), and the min
// term's two per-16 values b (formats with a min).
struct Chunk256 {
  __m256i w;
  __m256 a;
  __m128 b;  // lanes 0, 1 (2, 3 zero)
};

// Bytes ahead each chunk prefetches (see matmul_q8_fused512.cpp).
constexpr int kPrefetchAhead = 2048;

struct Q4_0F {
  static constexpr int kChunkBytes = 18;
  static constexpr bool kHasMin = false;
  GRAFT_F256 static void chunk(const uint8_t* row, int64_t c, Chunk256& ch) {
    const uint8_t* p = row + c * 18;
    ch.w = _mm256_sub_epi8(nibbles16(p + 2), _mm256_set1_epi8(8));
    ch.a = _mm256_set1_ps(f16_at(p));
  }
};
struct Q4_1F {
  static constexpr int kChunkBytes = 20;
  static constexpr bool kHasMin = true;
  GRAFT_F256 static void chunk(const uint8_t* row, int64_t c, Chunk256& ch) {
    const uint8_t* p = row + c * 20;
    ch.w = nibbles16(p + 4);
    ch.a = _mm256_set1_ps(f16_at(p));
    ch.b = _mm_setr_ps(f16_at(p + 2), f16_at(p + 2), 0.0f, 0.0f);
  }
};
struct Q8_0F {
  static constexpr int kChunkBytes = 34;
  static constexpr bool kHasMin = false;
  GRAFT_F256 static void chunk(const uint8_t* row, int64_t c, Chunk256& ch) {
    const uint8_t* p = row + c * 34;
    ch.w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
    ch.a = _mm256_set1_ps(f16_at(p));
  }
};
struct Q5_0F {
  static constexpr int kChunkBytes = 22;
  static constexpr bool kHasMin = false;
  GRAFT_F256 static void chunk(const uint8_t* row, int64_t c, Chunk256& ch) {
    const uint8_t* p = row + c * 22;
    ch.w = _mm256_sub_epi8(_mm256_or_si256(nibbles16(p + 6), bits_to_0x10(p + 2)), _mm256_set1_epi8(16));
    ch.a = _mm256_set1_ps(f16_at(p));
  }
};
struct Q5_1F {
  static constexpr int kChunkBytes = 24;
  static constexpr bool kHasMin = true;
  GRAFT_F256 static void chunk(const uint8_t* row, int64_t c, Chunk256& ch) {
    const uint8_t* p = row + c * 24;
    ch.w = _mm256_or_si256(nibbles16(p + 8), bits_to_0x10(p + 4));
    ch.a = _mm256_set1_ps(f16_at(p));
    ch.b = _mm_setr_ps(f16_at(p + 2), f16_at(p + 2), 0.0f, 0.0f);
  }
};
// Q4_K: chunk c is sub-block j = c mod 8 of super-block c / 8.
struct Q4_KF {
  static constexpr int kChunkBytes = 18;
  static constexpr bool kHasMin = true;
  GRAFT_F256 static void chunk(const uint8_t* row, int64_t c, Chunk256& ch) {
    const uint8_t* sb = row + (c / 8) * 144;
    const int j = static_cast<int>(c % 8);
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 16 + 32 * (j / 2)));
    ch.w = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, _mm256_set1_epi8(0x0f));
    uint8_t sc, m;
    q4k_scale_min(sb + 4, j, &sc, &m);
    ch.a = _mm256_set1_ps(f16_at(sb) * static_cast<float>(sc));
    const float mb = -(f16_at(sb + 2) * static_cast<float>(m));
    ch.b = _mm_setr_ps(mb, mb, 0.0f, 0.0f);
  }
};
// Q6_K: chunk c is columns 32·(c mod 8) .. of super-block c / 8: within half h = j / 4 of 128
// columns, quarter t = j mod 4 takes ql[64h + 32·(t mod 2) ..] (low nibbles for t < 2) and qh bits 2t.
struct Q6_KF {
  static constexpr int kChunkBytes = 26;
  static constexpr bool kHasMin = false;
  GRAFT_F256 static void chunk(const uint8_t* row, int64_t c, Chunk256& ch) {
    const uint8_t* sb = row + (c / 8) * 210;
    const int j = static_cast<int>(c % 8), h = j / 4, t = j % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 64 * h + 32 * (t % 2)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + 128 + 32 * h));
    const __m256i low = _mm256_and_si256(t < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0f));
    const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * t)), _mm256_set1_epi8(0x03));
    ch.w = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
    const auto* scales = reinterpret_cast<const int8_t*>(sb + 192) + 2 * j;
    const float d = f16_at(sb + 208);
    const float a0 = d * static_cast<float>(scales[0]), a1 = d * static_cast<float>(scales[1]);
    ch.a = _mm256_setr_ps(a0, a0, a0, a0, a1, a1, a1, a1);
  }
};

// One 32-column chunk against R activation rows, into the accumulators given. Rows are at fixed
// strides from one base per array (few live pointers: the accumulators stay in registers).
template <class F, int R>
GRAFT_F256 void chunk_step(const uint8_t* row, int64_t c, int64_t k, const int8_t* xq, const float* xd,
                           __m256 (&acc)[R], Chunk256& ch) {
  const __m256i ones = _mm256_set1_epi16(1);
  _mm_prefetch(reinterpret_cast<const char*>(row) + c * F::kChunkBytes + kPrefetchAhead, _MM_HINT_T0);
  F::chunk(row, c, ch);
  const __m256i wu = F::kHasMin ? ch.w : _mm256_sign_epi8(ch.w, ch.w);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + r * k + c * 32));
    const __m256i p = _mm256_maddubs_epi16(wu, F::kHasMin ? x : _mm256_sign_epi8(x, ch.w));
    const __m256i s = _mm256_madd_epi16(p, ones);
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(ch.a, _mm256_loadu_ps(xd + r * (k / 4) + c * 8)),
                             acc[r]);
  }
}

// The min term of chunk c (formats with a min): groups 2c, 2c + 1 are lanes (2c) mod 8 of
// q8_min_term's step; lanes not filled stay zero.
template <int R>
GRAFT_F256 void min_step(int64_t c, int64_t k, const float* s16, const Chunk256& ch, __m128& b_lo, __m128& b_hi,
                         __m128& pend, __m256 (&macc)[R]) {
  const int64_t chunks = k / 32;
  const int q = static_cast<int>(c % 4);
  if (q == 0) b_lo = ch.b, b_hi = _mm_setzero_ps();
  if (q == 1) b_lo = _mm_movelh_ps(pend, ch.b);
  if (q == 2) b_hi = ch.b;
  if (q == 3) b_hi = _mm_movelh_ps(pend, ch.b);
  pend = ch.b;
  if (q != 3 && c + 1 != chunks) return;
  const int64_t g0 = (c - q) * 2, groups = k / 16 - g0;
  const __m256 b = _mm256_set_m128(b_hi, b_lo);
  if (groups >= 8) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) macc[r] = _mm256_fmadd_ps(b, _mm256_loadu_ps(s16 + r * (k / 16) + g0), macc[r]);
  } else {
    const __m256i mask =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(groups)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) macc[r] = _mm256_fmadd_ps(b, _mm256_maskload_ps(s16 + r * (k / 16) + g0, mask), macc[r]);
  }
}

// kLanes16: the 16-lane model of AVX512-VNNI (lanes 0..7 hold the even 32-column chunks, 8..15 the
// odd ones: two 8-lane accumulators, added before the 8-lane tree exactly as hsum16 does), so a CPU
// with AVX-512 can run a row on 256-bit vectors (faster for one or two activation rows) and get the
// same bits as its 512-bit kernel. Chunks go in pairs so that each accumulator is chosen at compile
// time.
template <class F, int R, bool kLanes16>
GRAFT_F256_FN void fused_rows(const uint8_t* row, int64_t k, const Q8Activations& act, int64_t i0, float* out) {
  const int8_t* xq = act.q.data() + i0 * k;
  const float* xd = act.d4.data() + i0 * k / 4;
  const float* s16 = act.s16.data() + i0 * k / 16;
  __m256 acc[R], acc_odd[R], macc[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) acc[r] = acc_odd[r] = macc[r] = _mm256_setzero_ps();
  __m128 b_lo = _mm_setzero_ps(), b_hi = _mm_setzero_ps(), pend = _mm_setzero_ps();
  const int64_t chunks = k / 32;
  Chunk256 ch;
  int64_t c = 0;
  for (; c + 2 <= chunks; c += 2) {
    chunk_step<F, R>(row, c, k, xq, xd, acc, ch);
    if constexpr (F::kHasMin) min_step<R>(c, k, s16, ch, b_lo, b_hi, pend, macc);
    chunk_step<F, R>(row, c + 1, k, xq, xd, kLanes16 ? acc_odd : acc, ch);
    if constexpr (F::kHasMin) min_step<R>(c + 1, k, s16, ch, b_lo, b_hi, pend, macc);
  }
  if (c < chunks) {  // an even last chunk
    chunk_step<F, R>(row, c, k, xq, xd, acc, ch);
    if constexpr (F::kHasMin) min_step<R>(c, k, s16, ch, b_lo, b_hi, pend, macc);
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float v = hsum8(kLanes16 ? _mm256_add_ps(acc[r], acc_odd[r]) : acc[r]);
    if constexpr (F::kHasMin) v += hsum8(macc[r]);
    out[r] = v;
  }
}

template <class F, bool kLanes16>
void fused_dispatch(const uint8_t* row, int64_t k, const Q8Activations& act, int64_t i0, int rows, float* out) {
  switch (rows) {
    case 1: fused_rows<F, 1, kLanes16>(row, k, act, i0, out); break;
    case 2: fused_rows<F, 2, kLanes16>(row, k, act, i0, out); break;
    case 3: fused_rows<F, 3, kLanes16>(row, k, act, i0, out); break;
    default: fused_rows<F, 4, kLanes16>(row, k, act, i0, out); break;
  }
}

template <bool kLanes16>
Q8FusedRows fused_for(DType t) {
  switch (t) {
    case DType::Q4_0: return fused_dispatch<Q4_0F, kLanes16>;
    case DType::Q4_1: return fused_dispatch<Q4_1F, kLanes16>;
    case DType::Q8_0: return fused_dispatch<Q8_0F, kLanes16>;
    case DType::Q5_0: return fused_dispatch<Q5_0F, kLanes16>;
    case DType::Q5_1: return fused_dispatch<Q5_1F, kLanes16>;
    case DType::Q4_K: return fused_dispatch<Q4_KF, kLanes16>;
    case DType::Q6_K: return fused_dispatch<Q6_KF, kLanes16>;
    default: return nullptr;
  }
}

}  // namespace

Q8FusedRows q8_fused_avx2(DType t) { return fused_for<false>(t); }
Q8FusedRows q8_fused_avx2_16lane(DType t) { return fused_for<true>(t); }

}  // namespace graft::compute::detail
