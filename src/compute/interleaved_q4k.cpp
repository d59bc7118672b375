// GGUF Q4_K matrices copied into the interleaved layout of interleaved_blocks.h (kind Q4_K: nibble
// words as Q4_1's, the 6-bit scales and mins as bytes, f16 d and −dmin per super-block), and Q5_K
// matrices as an Affine5 copy with one F32 parameter record per block of 32 columns (param_shift 0),
// which runs on the affine 5-bit kernels (Q5_1's code words; no kernel of its own).
//
// Why this is exact: a Q4_K super-block (256 columns) dequantizes sub-block s (columns 32s ..
// 32s + 31) as w = (d·sc[s])·q − dmin·m[s], q the unsigned nibble (low nibbles of qs[32(s/2) ..] for
// even s, high nibbles for odd s). d and dmin are f16 (11-bit significands), sc and m 6-bit, so
// d·sc and dmin·m are exact in F32: the kernels' block scale d·sc and min (−dmin)·m dequantize to
// the same F32 values, bit for bit (scale·q + (−b) is the same rounding as scale·q − b).
// Q5_K is the same with a fifth bit per code (qh[c] bit s for column c of sub-block s), laid out as
// Q5_1's copy lays out its qh: the code words of Q4, then a word of fifth bits.
#include <cstring>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"
#include "compute/interleaved_blocks.h"

namespace graft::compute {

namespace {
constexpr int64_t kRows = kInterleavedRows;
constexpr int64_t kSuper = 256;       // columns of a Q4_K super-block
constexpr int64_t kSuperBytes = 144;  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes qs
constexpr int64_t kSuperBytes5 = 176;  // Q5_K: the same, with qh[32] before qs
uint32_t load_u32(const uint8_t* p) {  // four bytes, little-endian as the file stores them
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
}  // namespace

std::shared_ptr<const InterleavedBlocks> interleave_q4_k(const Tensor& w, ThreadPool* pool) {
  if (w.dtype != DType::Q4_K || w.shape.size() != 2 || w.shape[1] % kSuper != 0)
    fail_as(ErrorKind::kInternal, "interleave_q4_k: a [n, k] Q4_K weight with k a multiple of 256, got ",
            dtype_name(w.dtype), " ", shape_str(w.shape));
  auto out = detail::allocate_interleaved(InterleavedKind::Q4_K, w.shape[0], w.shape[1], 0);
  InterleavedBlocks& b = *out;
  const int64_t supers = b.k / kSuper, row_bytes = supers * kSuperBytes;
  const auto* src = static_cast<const uint8_t*>(w.data);
  detail::fill_rows(b, pool, [&](int64_t g, int64_t r) {
    auto* codes = const_cast<uint8_t*>(b.codes(g));
    const uint8_t* row = src + (g * kRows + r) * row_bytes;
    for (int64_t sb = 0; sb < supers; ++sb) {
      const uint8_t* p = row + sb * kSuperBytes;
      auto* d = const_cast<uint16_t*>(b.q4k_d(g, sb * 8));
      std::memcpy(&d[r], p, 2);
      uint16_t dmin;
      std::memcpy(&dmin, p + 2, 2);
      d[kRows + r] = static_cast<uint16_t>(dmin ^ 0x8000u);  // −dmin: the f16 sign bit flipped
      for (int s = 0; s < 8; ++s) {
        const int64_t blk = sb * 8 + s;
        auto* sm = const_cast<uint8_t*>(b.q4k_scales(g, blk));
        q4k_scale_min(p + 4, s, &sm[r], &sm[kRows + r]);
        // Sub-block s's nibble of column c: qs[32(s/2) + c], low for even s. The copy's word t,
        // byte e holds column 4t + e in its low nibble and 16 + 4t + e in its high one.
        // Four bytes at a time in 32-bit words (byte arrays made the compiler store bytes and load
        // words, a store-forwarding stall per word: half of the copy's time).
        const uint8_t* qs = p + 16 + 32 * (s / 2);
        const int shift = 4 * (s % 2);
        uint8_t* dst = codes + blk * b.code_bytes + r * 4;
        for (int t = 0; t < 4; ++t) {
          const uint32_t word = ((load_u32(qs + 4 * t) >> shift) & 0x0f0f0f0fu) |
                                ((load_u32(qs + 16 + 4 * t) >> shift) & 0x0f0f0f0fu) << 4;
          std::memcpy(dst + t * 64, &word, 4);
        }
      }
    }
  });
  return out;
}

void deinterleave_q4_k_row(const InterleavedBlocks& b, int64_t j, uint8_t* row) {
  if (b.kind != InterleavedKind::Q4_K) fail_as(ErrorKind::kInternal, "deinterleave_q4_k_row: not a Q4_K copy");
  const int64_t g = j / kRows, r = j % kRows;
  std::memset(row, 0, static_cast<size_t>(b.k / kSuper * kSuperBytes));
  for (int64_t sb = 0; sb < b.k / kSuper; ++sb) {
    uint8_t* p = row + sb * kSuperBytes;
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
  }
}

std::shared_ptr<const InterleavedBlocks> interleave_q5_k(const Tensor& w, ThreadPool* pool) {
  if (w.dtype != DType::Q5_K || w.shape.size() != 2 || w.shape[1] % kSuper != 0)
    fail_as(ErrorKind::kInternal, "interleave_q5_k: a [n, k] Q5_K weight with k a multiple of 256, got ",
            dtype_name(w.dtype), " ", shape_str(w.shape));
  auto out = detail::allocate_interleaved(InterleavedKind::Affine5, w.shape[0], w.shape[1], 0);
  InterleavedBlocks& b = *out;
  const int64_t supers = b.k / kSuper, row_bytes = supers * kSuperBytes5;
  const auto* src = static_cast<const uint8_t*>(w.data);
  detail::fill_rows(b, pool, [&](int64_t g, int64_t r) {
    auto* codes = const_cast<uint8_t*>(b.codes(g));
    auto* params = const_cast<float*>(b.params(g));
    const uint8_t* row = src + (g * kRows + r) * row_bytes;
    for (int64_t sb = 0; sb < supers; ++sb) {
      const uint8_t* p = row + sb * kSuperBytes5;
      const float d = gguf_f16_at(p), dmin = gguf_f16_at(p + 2);
      const uint8_t* qh = p + 16;
      for (int s = 0; s < 8; ++s) {
        const int64_t blk = sb * 8 + s;
        uint8_t sc, m;
        q4k_scale_min(p + 4, s, &sc, &m);
        params[blk * 32 + r] = d * static_cast<float>(sc);
        params[blk * 32 + kRows + r] = -(dmin * static_cast<float>(m));
        const uint8_t* qs = p + 48 + 32 * (s / 2);
        const int shift = 4 * (s % 2);
        uint8_t* dst = codes + blk * b.code_bytes + r * 4;
        for (int t = 0; t < 4; ++t)
          for (int e = 0; e < 4; ++e)
            dst[t * 64 + e] = static_cast<uint8_t>(((qs[4 * t + e] >> shift) & 0x0f) |
                                                   ((qs[16 + 4 * t + e] >> shift) & 0x0f) << 4);
        // The word of fifth bits: byte e, bit t = the fifth bit of column 4t + e.
        for (int c = 0; c < 32; ++c) dst[256 + c % 4] |= static_cast<uint8_t>(((qh[c] >> s) & 1) << (c / 4));
      }
    }
  });
  return out;
}

}  // namespace graft::compute
