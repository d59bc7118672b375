// GGUF k-quant matrices (Q4_K, Q5_K, Q6_K) copied into the interleaved layout of
// interleaved_blocks.h, and (Q4_K, Q6_K) read back. One driver (interleave_super_block_groups) walks
// every 256-column super-block of every group of 16 rows; each format says only how one super-block
// of the group's rows lands in the copy.
//
// Q4_K (kind Q4_K: nibble words as Q4_1's, the 6-bit scales and mins as bytes, f16 d and −dmin per
// super-block). Why this is exact: a Q4_K super-block dequantizes sub-block s (columns 32s ..
// 32s + 31) as w = (d·sc[s])·q − dmin·m[s], q the unsigned nibble (low nibbles of qs[32(s/2) ..] for
// even s, high nibbles for odd s). d and dmin are f16 (11-bit significands), sc and m 6-bit, so
// d·sc and dmin·m are exact in F32: the kernels' block scale d·sc and min (−dmin)·m dequantize to
// the same F32 values, bit for bit (scale·q + (−b) is the same rounding as scale·q − b).
//
// Q5_K: an Affine5 copy with one F32 parameter record per block of 32 columns (param_shift 0), which
// runs on the affine 5-bit kernels (Q5_1's code words; no kernel of its own): the same as Q4_K with a
// fifth bit per code (qh[c] bit s for column c of sub-block s), laid out as Q5_1's copy lays out its
// qh: the code words of Q4, then a word of fifth bits.
//
// Q6_K (kind Q6_K): a super-block (210 bytes: ql[128], qh[64], int8 scales[16], f16 d) dequantizes
// column e as d·sc[e/16]·(q − 32), q = low | high << 4 with (h = e/128, s = (e % 128)/32, l = e % 32)
// low = nibble s/2 of ql[64h + 32(s % 2) + l] (low nibble for s < 2) and high = bits 2s, 2s + 1 of
// qh[32h + l]. The copy keeps q (6 bits), sc (int8) and d (widened to F32, exact) as they are, so a
// block of 32 columns is the block model's two 16-column steps with scales d·sc (exact in F32: 11
// significant bits times 8), and the copy reads back to the GGUF bytes (deinterleave_q6_k_row).
#include <immintrin.h>

#include <algorithm>

#include <cstring>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"
#include "compute/interleaved_blocks.h"

namespace graft::compute {

namespace {
constexpr int64_t kRows = kInterleavedRows;
constexpr int64_t kSuper = 256;            // columns of a k-quant super-block
constexpr int64_t kQ4KBytes = 144;         // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes qs
constexpr int64_t kQ5KBytes = 176;         // Q5_K: the same, with qh[32] before qs
constexpr int64_t kQ6KBytes = 210;         // ql[128], qh[64], scales[16], f16 d

// Words t = 0..3 of a block's codes, word t at dst + 64t: byte e of word t holds column 4t + e in
// its low nibble and 16 + 4t + e in its high one, taken from the 4-bit field at `shift` (0 or 4) of
// q[0..31], all four in one SSE2 vector: the Q5_K copy's, one row at a time (the Q4_K and Q6_K
// copies go four rows at a time, store_code_words4).
void store_nibble_words(const uint8_t* q, int shift, uint8_t* dst) {
  const __m128i low = _mm_set1_epi8(0x0f);
  __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16));
  if (shift) {  // (a 16-bit shift: the mask drops what crosses a byte)
    a = _mm_srli_epi16(a, 4);
    c = _mm_srli_epi16(c, 4);
  }
  const __m128i w = _mm_or_si128(_mm_and_si128(a, low), _mm_slli_epi16(_mm_and_si128(c, low), 4));
  alignas(16) uint32_t words[4];
  _mm_store_si128(reinterpret_cast<__m128i*>(words), w);
  for (int t = 0; t < 4; ++t) std::memcpy(dst + t * 64, &words[t], 4);
}

// The one driver of the copies: checks w is a [n, k] `dtype` matrix with k a multiple of 256, makes
// an empty copy of `kind` and calls super(b, g, sb, p, rows) for super-block sb of each group g,
// p[r] its bytes in row 16g + r (rows = the group's rows below n; p of the rows past them: a zero
// super-block, whose codes are the zeros the copy starts with), the groups split over the pool.
template <int64_t SuperBytes, class Super>
std::shared_ptr<const InterleavedBlocks> interleave_super_block_groups(const Tensor& w, ThreadPool* pool, DType dtype,
                                                                       InterleavedKind kind, Super&& super) {
  if (w.dtype != dtype || w.shape.size() != 2 || w.shape[1] % kSuper != 0)
    fail_as(ErrorKind::kInternal, "interleave: a [n, k] ", dtype_name(dtype), " weight with k a multiple of 256, got ",
            dtype_name(w.dtype), " ", shape_str(w.shape));
  auto out = detail::allocate_interleaved(kind, w.shape[0], w.shape[1], 0);
  InterleavedBlocks& b = *out;
  const int64_t supers = b.k / kSuper, row_bytes = supers * SuperBytes;
  const auto* src = static_cast<const uint8_t*>(w.data);
  static const uint8_t kZero[SuperBytes] = {};
  detail::fill_groups(b, pool, [&](int64_t g) {
    const int64_t rows = std::min(kRows, b.n - g * kRows);
    for (int64_t sb = 0; sb < supers; ++sb) {
      const uint8_t* p[kRows];
      for (int64_t r = 0; r < kRows; ++r) p[r] = r < rows ? src + (g * kRows + r) * row_bytes + sb * SuperBytes : kZero;
      super(b, g, sb, p, rows);
    }
  });
  return out;
}

// The driver read back: checks the copy is of `kind` (the copy of a `dtype` matrix), zeroes row j's
// GGUF bytes and calls super(g, r, sb, p) for each super-block sb (bytes p) of it.
template <class Super>
void deinterleave_super_blocks(const InterleavedBlocks& b, DType dtype, InterleavedKind kind, int64_t j,
                               uint8_t* row, int64_t super_bytes, Super&& super) {
  if (b.kind != kind) fail_as(ErrorKind::kInternal, "deinterleave: not a ", dtype_name(dtype), " copy");
  const int64_t g = j / kRows, r = j % kRows, supers = b.k / kSuper;
  std::memset(row, 0, static_cast<size_t>(supers * super_bytes));
  for (int64_t sb = 0; sb < supers; ++sb) super(g, r, sb, row + sb * super_bytes);
}

// Sets column e's 6-bit code q in a Q6_K super-block's ql / qh (the copy read back).
void set_q6k_code(uint8_t* p, int e, int q) {
  const int h = e / 128, s = (e % 128) / 32, l = e % 32;
  p[h * 64 + (s % 2) * 32 + l] |= static_cast<uint8_t>((q & 0x0f) << (s < 2 ? 0 : 4));
  p[128 + h * 32 + l] |= static_cast<uint8_t>(((q >> 4) & 3) << (2 * s));
}
// The copy's place of column c (0..31) of a block for one row: nibble byte (word c/4 % 4, byte c % 4,
// high nibble for c >= 16) and its high-bit pair (word 4 + c/16, byte c % 4, bits 2·(c/4 % 4)).
struct Place {
  int nibble_word, high_word, byte, nibble_shift, high_shift;
};
Place place(int c) { return {(c / 4) % 4, 4 + c / 16, c % 4, c >= 16 ? 4 : 0, 2 * ((c / 4) % 4)}; }
}  // namespace

namespace {
// Sub-blocks 2u and 2u + 1 of a super-block for four rows (q[i]: row i's qs[32u .. 32u + 31]): each
// row's code words as store_nibble_words makes them (low nibbles for 2u, high for 2u + 1), then the
// four rows' word t side by side, one 16-byte store into line t of each block (at even + 64t and
// odd + 64t) where the former row-by-row copy made four 4-byte stores: its Q4_K copy ran at
// 1.4 GB/s a thread, bound by its instructions, not by memory.
void store_code_words4(const uint8_t* const q[4], uint8_t* even, uint8_t* odd) {
  const __m256i low = _mm256_set1_epi8(0x0f);
  __m256i w[4];
  for (int i = 0; i < 4; ++i) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[i]));
    const __m256i lo = _mm256_and_si256(v, low), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    // [columns 0..15 | 16..31] of each nibble half as [2u's | 2u + 1's] halves, then the words.
    const __m256i first = _mm256_permute2x128_si256(lo, hi, 0x20), second = _mm256_permute2x128_si256(lo, hi, 0x31);
    w[i] = _mm256_or_si256(first, _mm256_slli_epi16(second, 4));  // (values < 16: no bit crosses a byte)
  }
  // A 4x4 transpose of 32-bit words in each half: rows' words t side by side.
  const __m256i a = _mm256_unpacklo_epi32(w[0], w[1]), b = _mm256_unpackhi_epi32(w[0], w[1]);
  const __m256i c = _mm256_unpacklo_epi32(w[2], w[3]), d = _mm256_unpackhi_epi32(w[2], w[3]);
  const __m256i t[4] = {_mm256_unpacklo_epi64(a, c), _mm256_unpackhi_epi64(a, c), _mm256_unpacklo_epi64(b, d),
                        _mm256_unpackhi_epi64(b, d)};
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(even + 64 * i), _mm256_castsi256_si128(t[i]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(odd + 64 * i), _mm256_extracti128_si256(t[i], 1));
  }
}

// Quarter u of a Q6_K half for four rows (qh[i]: row i's qh[32h .. 32h + 31]): each row's two high
// words (word 4 + part, byte e, bits 2t, 2t + 1 = bits 2u, 2u + 1 of qh[16·part + 4t + e]), the four
// rows' side by side, one 16-byte store each at dst + 256 and dst + 320.
void store_high_words4(const uint8_t* const qh[4], int u, uint8_t* dst) {
  const __m256i pair = _mm256_set1_epi8(0x03), steps = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const __m128i count = _mm_cvtsi32_si128(2 * u);
  __m256i x[4];
  for (int i = 0; i < 4; ++i) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh[i]));
    // (the 16-bit shift's carries from the next byte land above bit 1: the mask drops them;
    // then each byte's pair moves up 2t within its own byte)
    __m256i m = _mm256_sllv_epi32(_mm256_and_si256(_mm256_srl_epi16(v, count), pair), steps);
    m = _mm256_or_si256(m, _mm256_shuffle_epi32(m, 0x4e));
    x[i] = _mm256_or_si256(m, _mm256_shuffle_epi32(m, 0xb1));  // every word of a half: its OR
  }
  // Row i's words from x[i]'s dword i of each half.
  __m256i w = _mm256_blend_epi32(x[0], x[1], 0x22);
  w = _mm256_blend_epi32(w, x[2], 0x44);
  w = _mm256_blend_epi32(w, x[3], 0x88);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 256), _mm256_castsi256_si128(w));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 320), _mm256_extracti128_si256(w, 1));
}
}  // namespace

// A group at a time: each super-block's d, −dmin, scales and mins row by row, its codes four rows at
// a time (store_code_words4).
std::shared_ptr<const InterleavedBlocks> interleave_q4_k(const Tensor& w, ThreadPool* pool) {
  return interleave_super_block_groups<kQ4KBytes>(w, pool, DType::Q4_K, InterleavedKind::Q4_K,
                                                  [](InterleavedBlocks& b, int64_t g, int64_t sb,
                                                     const uint8_t* const* p, int64_t rows) {
    auto* d = const_cast<uint16_t*>(b.q4k_d(g, sb * 8));
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(&d[r], p[r], 2);
      uint16_t dmin;
      std::memcpy(&dmin, p[r] + 2, 2);
      d[kRows + r] = static_cast<uint16_t>(dmin ^ 0x8000u);  // −dmin: the f16 sign bit flipped
      for (int s = 0; s < 8; ++s) {
        auto* sm = const_cast<uint8_t*>(b.q4k_scales(g, sb * 8 + s));
        q4k_scale_min(p[r] + 4, s, &sm[r], &sm[kRows + r]);
      }
    }
    // Sub-block s's nibble of column c: qs[32(s/2) + c], low for even s.
    for (int u = 0; u < 4; ++u) {
      uint8_t* even = const_cast<uint8_t*>(b.codes(g)) + (sb * 8 + 2 * u) * b.code_bytes;
      for (int r0 = 0; r0 < kRows; r0 += 4) {
        const uint8_t* q[4] = {p[r0] + 16 + 32 * u, p[r0 + 1] + 16 + 32 * u, p[r0 + 2] + 16 + 32 * u,
                               p[r0 + 3] + 16 + 32 * u};
        store_code_words4(q, even + r0 * 4, even + b.code_bytes + r0 * 4);
      }
    }
  });
}

void deinterleave_q4_k_row(const InterleavedBlocks& b, int64_t j, uint8_t* row) {
  deinterleave_super_blocks(b, DType::Q4_K, InterleavedKind::Q4_K, j, row, kQ4KBytes,
                            [&](int64_t g, int64_t r, int64_t sb, uint8_t* p) {
    const uint16_t* d = b.q4k_d(g, sb * 8);
    const uint16_t dmin = static_cast<uint16_t>(d[kRows + r] ^ 0x8000u);
    std::memcpy(p, &d[r], 2);
    std::memcpy(p + 2, &dmin, 2);
    for (int s = 0; s < 8; ++s) {
      const int64_t blk = sb * 8 + s;
      const uint8_t sc = b.q4k_scales(g, blk)[r], m = b.q4k_scales(g, blk)[kRows + r];
      uint8_t* packed = p + 4;  // the inverse of q4k_scale_min
      if (s < 4) {
        packed[s] |= sc & 63;
        packed[s + 4] |= m & 63;
      } else {
        packed[s + 4] = static_cast<uint8_t>((sc & 0x0f) | (m & 0x0f) << 4);
        packed[s - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
        packed[s] |= static_cast<uint8_t>((m >> 4) << 6);
      }
      const uint8_t* src = b.codes(g) + blk * b.code_bytes + r * 4;
      uint8_t* qs = p + 16 + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int t = 0; t < 4; ++t)
        for (int e = 0; e < 4; ++e) {
          qs[4 * t + e] |= static_cast<uint8_t>((src[t * 64 + e] & 0x0f) << shift);
          qs[16 + 4 * t + e] |= static_cast<uint8_t>((src[t * 64 + e] >> 4) << shift);
        }
    }
  });
}

std::shared_ptr<const InterleavedBlocks> interleave_q5_k(const Tensor& w, ThreadPool* pool) {
  return interleave_super_block_groups<kQ5KBytes>(w, pool, DType::Q5_K, InterleavedKind::Affine5,
                                                  [](InterleavedBlocks& b, int64_t g, int64_t sb,
                                                     const uint8_t* const* rows_p, int64_t rows) {
    auto* params = const_cast<float*>(b.params(g));
    for (int64_t r = 0; r < rows; ++r) {  // row by row
      const uint8_t* p = rows_p[r];
      const float d = gguf_f16_at(p), dmin = gguf_f16_at(p + 2);
      const uint8_t* qh = p + 16;
      for (int s = 0; s < 8; ++s) {
        const int64_t blk = sb * 8 + s;
        uint8_t sc, m;
        q4k_scale_min(p + 4, s, &sc, &m);
        params[blk * 32 + r] = d * static_cast<float>(sc);
        params[blk * 32 + kRows + r] = -(dmin * static_cast<float>(m));
        uint8_t* dst = const_cast<uint8_t*>(b.codes(g)) + blk * b.code_bytes + r * 4;
        store_nibble_words(p + 48 + 32 * (s / 2), 4 * (s % 2), dst);
        // The word of fifth bits: byte e, bit t = the fifth bit of column 4t + e.
        for (int c = 0; c < 32; ++c) dst[256 + c % 4] |= static_cast<uint8_t>(((qh[c] >> s) & 1) << (c / 4));
      }
    }
  });
}

// A group at a time, as interleave_q4_k: per super-block the scales and d row by row, the code
// words four rows at a time (store_code_words4: ql's low nibbles for quarter v of a half, its high
// ones for quarter v + 2; store_high_words4: qh's bit pairs).
std::shared_ptr<const InterleavedBlocks> interleave_q6_k(const Tensor& w, ThreadPool* pool) {
  return interleave_super_block_groups<kQ6KBytes>(w, pool, DType::Q6_K, InterleavedKind::Q6_K,
                                                  [](InterleavedBlocks& b, int64_t g, int64_t sb,
                                                     const uint8_t* const* p, int64_t rows) {
    uint8_t* codes = const_cast<uint8_t*>(b.codes(g));
    for (int64_t r = 0; r < rows; ++r) {
      const auto* sc = reinterpret_cast<const int8_t*>(p[r] + 192);
      const_cast<float*>(b.q6k_d(g, sb * 8))[r] = gguf_f16_at(p[r] + 208);
      for (int s = 0; s < 8; ++s) {
        auto* scales = const_cast<int8_t*>(b.q6k_scales(g, sb * 8 + s));
        scales[r] = sc[2 * s];
        scales[kRows + r] = sc[2 * s + 1];
      }
    }
    // Block s is columns 32s .. 32s + 31 of the super-block: h = s / 4, quarter u = s % 4; column
    // 32s + c's high pair is bits 2u, 2u + 1 of qh[32h + c].
    for (int s = 0; s < 8; ++s)
      for (int r0 = 0; r0 < kRows; r0 += 4) {
        const int64_t at = 128 + 32 * (s / 4);
        const uint8_t* qh[4] = {p[r0] + at, p[r0 + 1] + at, p[r0 + 2] + at, p[r0 + 3] + at};
        store_high_words4(qh, s % 4, codes + (sb * 8 + s) * b.code_bytes + r0 * 4);
      }
    // Column 32s + c's low nibble is nibble u / 2 of ql[64h + 32(u % 2) + c]: blocks 4h + v and
    // 4h + v + 2 (v = u % 2) read the same 32 bytes, low and high nibbles.
    for (int h = 0; h < 2; ++h)
      for (int v = 0; v < 2; ++v) {
        uint8_t* first = codes + (sb * 8 + 4 * h + v) * b.code_bytes;
        for (int r0 = 0; r0 < kRows; r0 += 4) {
          const int64_t at = 64 * h + 32 * v;
          const uint8_t* q[4] = {p[r0] + at, p[r0 + 1] + at, p[r0 + 2] + at, p[r0 + 3] + at};
          store_code_words4(q, first + r0 * 4, first + 2 * b.code_bytes + r0 * 4);
        }
      }
  });
}

void deinterleave_q6_k_row(const InterleavedBlocks& b, int64_t j, uint8_t* row) {
  deinterleave_super_blocks(b, DType::Q6_K, InterleavedKind::Q6_K, j, row, kQ6KBytes,
                            [&](int64_t g, int64_t r, int64_t sb, uint8_t* p) {
    const uint16_t d = f32_to_f16(b.q6k_d(g, sb * 8)[r]);
    std::memcpy(p + 208, &d, 2);
    for (int s = 0; s < 8; ++s) {
      const int64_t blk = sb * 8 + s;
      p[192 + 2 * s] = static_cast<uint8_t>(b.q6k_scales(g, blk)[r]);
      p[192 + 2 * s + 1] = static_cast<uint8_t>(b.q6k_scales(g, blk)[kRows + r]);
      const uint8_t* w = b.codes(g) + blk * b.code_bytes + r * 4;
      for (int c = 0; c < 32; ++c) {
        const Place at = place(c);
        const int q = ((w[at.nibble_word * 64 + at.byte] >> at.nibble_shift) & 0x0f) |
                      ((w[at.high_word * 64 + at.byte] >> at.high_shift) & 3) << 4;
        set_q6k_code(p, 32 * s + c, q);
      }
    }
  });
}

}  // namespace graft::compute
