// Element types graft reads and computes with, and scalar conversions between them.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace graft {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  I8,
  I16,
  I32,
  I64,
  U8,
  U32,
  Q8_0,  // GGUF blocks of 32: f16 scale + 32 x int8 (34 bytes)
  Q4_0,  // GGUF blocks of 32: f16 scale + 16 bytes of nibbles (18 bytes)
  Q4_1,  // GGUF blocks of 32: f16 scale + f16 min + 16 bytes of nibbles (20 bytes)
  // More GGUF block formats (layouts in graft/core/gguf_blocks.h): blocks of 32 ...
  Q5_0,
  Q5_1,
  IQ4_NL,
  // ... and "K-quant" super-blocks of 256.
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
  IQ4_XS,
};

std::string_view dtype_name(DType t);

// Elements per storage block (1 for plain types, 32 or 256 for the GGUF block formats).
int64_t dtype_block_elems(DType t);
// Bytes per storage block.
int64_t dtype_block_bytes(DType t);
// Bytes for n elements; n must be a multiple of the block size.
int64_t dtype_bytes(DType t, int64_t n);
bool dtype_is_quantized(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even, NaN kept quiet: the same rule torch and mlx use.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace graft
