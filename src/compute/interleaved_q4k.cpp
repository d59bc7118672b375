// GGUF Q4_K (and Q5_K) matrices copied into the interleaved layout of interleaved_blocks.h as an
// Affine4 (Affine5) copy with one parameter record per block of 32 columns (param_shift 0), so that
// they run on the same block-model kernels as mlx affine 4-bit and Q4_1 (Q5_1's code words; no
// kernel of their own).
//
// Why this is exact: a Q4_K super-block (256 columns) dequantizes sub-block s (columns 32s ..
// 32s + 31) as w = (d·sc[s])·q − dmin·m[s], q the unsigned nibble (low nibbles of qs[32(s/2) ..] for
// even s, high nibbles for odd s). d and dmin are f16 (11-bit significands), sc and m 6-bit, so
// d·sc and dmin·m are exact in F32: an affine block with scale d·sc and bias −(dmin·m) dequantizes
// to the same F32 values, bit for bit (scale·q + (−b) is the same rounding as scale·q − b).
// Q5_K is the same with a fifth bit per code (qh[c] bit s for column c of sub-block s), laid out as
// Q5_1's copy lays out its qh: the code words of Q4, then a word of fifth bits.
#include <cstring>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"
#include "compute/interleaved_blocks.h"

namespace graft::runtime {

namespace {
constexpr int64_t kRows = kInterleavedRows;
constexpr int64_t kSuper = 256;       // columns of a Q4_K super-block
constexpr int64_t kSuperBytes = 144;  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes qs
constexpr int64_t kSuperBytes5 = 176;  // Q5_K: the same, with qh[32] before qs
}  // namespace

std::shared_ptr<const InterleavedBlocks> interleave_q4_k(const Tensor& w, ThreadPool* pool) {
  if (w.dtype != DType::Q4_K || w.shape.size() != 2 || w.shape[1] % kSuper != 0)
    fail_as(ErrorKind::kInternal, "interleave_q4_k: a [n, k] Q4_K weight with k a multiple of 256, got ",
            dtype_name(w.dtype), " ", shape_str(w.shape));
  auto out = detail::allocate_interleaved(InterleavedKind::Affine4, w.shape[0], w.shape[1], 0);
  InterleavedBlocks& b = *out;
  const int64_t supers = b.k / kSuper, row_bytes = supers * kSuperBytes;
  const auto* src = static_cast<const uint8_t*>(w.data);
  detail::fill_rows(b, pool, [&](int64_t g, int64_t r) {
    auto* codes = const_cast<uint8_t*>(b.codes(g));
    auto* params = const_cast<float*>(b.params(g));
    const uint8_t* row = src + (g * kRows + r) * row_bytes;
    for (int64_t sb = 0; sb < supers; ++sb) {
      const uint8_t* p = row + sb * kSuperBytes;
      const float d = gguf_f16_at(p), dmin = gguf_f16_at(p + 2);
      for (int s = 0; s < 8; ++s) {
        const int64_t blk = sb * 8 + s;
        uint8_t sc, m;
        q4k_scale_min(p + 4, s, &sc, &m);
        params[blk * 32 + r] = d * static_cast<float>(sc);
        params[blk * 32 + kRows + r] = -(dmin * static_cast<float>(m));
        // Sub-block s's nibble of column c: qs[32(s/2) + c], low for even s. The copy's word t,
        // byte e holds column 4t + e in its low nibble and 16 + 4t + e in its high one.
        const uint8_t* qs = p + 16 + 32 * (s / 2);
        const int shift = 4 * (s % 2);
        uint8_t* dst = codes + blk * b.code_bytes + r * 4;
        for (int t = 0; t < 4; ++t)
          for (int e = 0; e < 4; ++e)
            dst[t * 64 + e] = static_cast<uint8_t>(((qs[4 * t + e] >> shift) & 0x0f) |
                                                   ((qs[16 + 4 * t + e] >> shift) & 0x0f) << 4);
      }
    }
  });
  return out;
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

}  // namespace graft::runtime
