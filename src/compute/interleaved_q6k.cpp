// GGUF Q6_K matrices copied into the interleaved layout of interleaved_blocks.h (kind Q6_K), and back.
//
// A Q6_K super-block (256 columns, 210 bytes: ql[128], qh[64], int8 scales[16], f16 d) dequantizes
// column e as d·sc[e/16]·(q − 32), q = low | high << 4 with (h = e/128, s = (e % 128)/32, l = e % 32)
// low = nibble s/2 of ql[64h + 32(s % 2) + l] (low nibble for s < 2) and high = bits 2s, 2s + 1 of
// qh[32h + l]. The copy keeps q (6 bits), sc (int8) and d (widened to F32, exact) as they are, so a
// block of 32 columns is the block model's two 16-column steps with scales d·sc (exact in F32: 11
// significant bits times 8), and the copy reads back to the GGUF bytes (deinterleave_q6_k_row).
#include <cstring>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"
#include "compute/interleaved_blocks.h"

namespace graft::compute {

namespace {
constexpr int64_t kRows = kInterleavedRows;
constexpr int64_t kSuper = 256;       // columns of a Q6_K super-block
constexpr int64_t kSuperBytes = 210;  // ql[128], qh[64], scales[16], f16 d

uint32_t load_u32(const uint8_t* p) {  // four bytes, little-endian as the file stores them
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
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

std::shared_ptr<const InterleavedBlocks> interleave_q6_k(const Tensor& w, ThreadPool* pool) {
  if (w.dtype != DType::Q6_K || w.shape.size() != 2 || w.shape[1] % kSuper != 0)
    fail_as(ErrorKind::kInternal, "interleave_q6_k: a [n, k] Q6_K weight with k a multiple of 256, got ",
            dtype_name(w.dtype), " ", shape_str(w.shape));
  auto out = detail::allocate_interleaved(InterleavedKind::Q6_K, w.shape[0], w.shape[1], 0);
  InterleavedBlocks& b = *out;
  const int64_t supers = b.k / kSuper, row_bytes = supers * kSuperBytes;
  const auto* src = static_cast<const uint8_t*>(w.data);
  detail::fill_rows(b, pool, [&](int64_t g, int64_t r) {
    auto* codes = const_cast<uint8_t*>(b.codes(g));
    const uint8_t* row = src + (g * kRows + r) * row_bytes;
    for (int64_t sb = 0; sb < supers; ++sb) {
      const uint8_t* p = row + sb * kSuperBytes;
      const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
      const_cast<float*>(b.q6k_d(g, sb * 8))[r] = gguf_f16_at(p + 208);
      for (int s = 0; s < 8; ++s) {
        const int64_t blk = sb * 8 + s;
        auto* scales = const_cast<int8_t*>(b.q6k_scales(g, blk));
        scales[r] = sc[2 * s];
        scales[kRows + r] = sc[2 * s + 1];
        // Block s is columns 32s .. 32s + 31 of the super-block: h = s / 4, quarter u = s % 4; column
        // 32s + c's low nibble is nibble u / 2 of ql[64h + 32(u % 2) + c], its high pair bits 2u, 2u + 1
        // of qh[32h + c]. Four columns at a time in 32-bit words (one byte each).
        const int h = s / 4, u = s % 4;
        const uint8_t* ql = p + 64 * h + 32 * (u % 2);
        const uint8_t* qh = p + 128 + 32 * h;
        const int nibble_shift = 4 * (u / 2), pair_shift = 2 * u;
        uint8_t* dst = codes + blk * b.code_bytes + r * 4;
        // Nibble word t, byte e: column 4t + e low, 16 + 4t + e high; high word 4 + p, byte e, bits
        // 2t, 2t + 1: column 16p + 4t + e.
        uint32_t high[2] = {0, 0};
        for (int t = 0; t < 4; ++t) {
          const uint32_t word = ((load_u32(ql + 4 * t) >> nibble_shift) & 0x0f0f0f0fu) |
                                ((load_u32(ql + 16 + 4 * t) >> nibble_shift) & 0x0f0f0f0fu) << 4;
          std::memcpy(dst + t * 64, &word, 4);
          for (int part = 0; part < 2; ++part)
            high[part] |= ((load_u32(qh + 16 * part + 4 * t) >> pair_shift) & 0x03030303u) << (2 * t);
        }
        std::memcpy(dst + 256, &high[0], 4);
        std::memcpy(dst + 320, &high[1], 4);
      }
    }
  });
  return out;
}

void deinterleave_q6_k_row(const InterleavedBlocks& b, int64_t j, uint8_t* row) {
  if (b.kind != InterleavedKind::Q6_K) fail_as(ErrorKind::kInternal, "deinterleave_q6_k_row: not a Q6_K copy");
  const int64_t g = j / kRows, r = j % kRows;
  std::memset(row, 0, static_cast<size_t>(b.k / kSuper * kSuperBytes));
  for (int64_t sb = 0; sb < b.k / kSuper; ++sb) {
    uint8_t* p = row + sb * kSuperBytes;
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
  }
}

}  // namespace graft::compute
