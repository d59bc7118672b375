// GGUF (ggml) block-quantized formats: byte layouts and dequantization to F32.
//
// Every function reproduces the `gguf` Python package's reference `gguf.quants.dequantize` bit for
// bit (the same F32 products and sums in the same order; the build's -ffp-contract=off keeps the
// compiler from fusing them), so a block dequantizes here exactly as llama.cpp's tools see it.
//
// Layouts (little-endian; d, dmin, m are f16; "sub-block" = the elements sharing one scale):
//   Q8_0   32: d, int8 q[32]                                   w = d·q
//   Q4_0   32: d, u8 qs[16] (element i: low nibble of qs[i], i+16: high nibble)   w = d·(q − 8)
//   Q4_1   32: d, m, qs[16] as Q4_0                            w = d·q + m
//   Q5_0   32: d, u32 qh (bit i = 5th bit of element i), qs[16] as Q4_0            w = d·(q − 16)
//   Q5_1   32: d, m, qh, qs[16]                                 w = d·q + m
//   IQ4_NL 32: d, qs[16] as Q4_0, q indexes the non-linear table kIq4nlValues     w = d·kv[q]
//   Q2_K  256: u8 scales[16] (low nibble scale, high nibble min per 16), qs[64] (2 bits), d, dmin
//              w = d·sc·q − dmin·m
//   Q3_K  256: hmask[32], qs[64] (2 bits), scales[12] (16 x 6 bits, offset 32), d
//              w = d·(sc − 32)·(q − (hbit ? 0 : 4))
//   Q4_K  256: d, dmin, scales[12] (8 x 6-bit scale + 8 x 6-bit min), qs[128]   w = d·sc·q − dmin·m (per 32)
//   Q5_K  256: d, dmin, scales[12], qh[32], qs[128]            w = d·sc·q − dmin·m (per 32)
//   Q6_K  256: ql[128], qh[64], int8 scales[16], d             w = d·sc·(q − 32) (per 16)
//   IQ4_XS 256: d, u16 scales_h, scales_l[4], qs[128]          w = d·(ls − 32)·kv[q] (per 32)
#pragma once
#include <cstdint>
#include <cstring>
#include <vector>

#include "graft/core/dtype.h"

namespace graft {

// IQ4_NL / IQ4_XS code book (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// The little-endian f16 at p (a block's d, dmin or m), as F32 (exact).
inline float gguf_f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// Byte offsets of the f16 fields (scale, and min or dmin) in one block of a GGUF block format.
std::vector<int> gguf_block_f16_fields(DType t);

// Dequantizes n elements (a multiple of the block size) of a GGUF block format to F32.
void dequantize_gguf_blocks(DType t, const void* src, float* dst, int64_t n);

// Q4_K / Q5_K 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes.
inline void q4k_scale_min(const uint8_t* s, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
  }
}

// Q3_K 6-bit scale of sub-block j (0..15), before the −32 offset.
inline int q3k_scale(const uint8_t* s, int j) {
  const int low = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
  const int high = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return low | high << 4;
}

}  // namespace graft
