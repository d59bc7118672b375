// Dequantization of the GGUF block formats; each loop mirrors gguf-py's numpy expression for the
// format (gguf/quants.py), product by product, so the F32 results are identical.
#include "graft/core/gguf_blocks.h"

#include <cstring>

#include "graft/core/error.h"

namespace graft {

namespace {

void q8_0(const uint8_t* b, float* y) {
  const float d = gguf_f16_at(b);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
}
void q4_0(const uint8_t* b, float* y) {
  const float d = gguf_f16_at(b);
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>((b[2 + i] & 0x0f) - 8);
    y[i + 16] = d * static_cast<float>((b[2 + i] >> 4) - 8);
  }
}
void q4_1(const uint8_t* b, float* y) {
  const float d = gguf_f16_at(b), m = gguf_f16_at(b + 2);
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(b[4 + i] & 0x0f) + m;
    y[i + 16] = d * static_cast<float>(b[4 + i] >> 4) + m;
  }
}
// The 5-bit code of element i of a Q5_0/Q5_1 block (qh at h, nibbles at qs).
int q5_code(const uint8_t* h, const uint8_t* qs, int i) {
  uint32_t qh;
  std::memcpy(&qh, h, 4);
  const int low = i < 16 ? (qs[i] & 0x0f) : (qs[i - 16] >> 4);
  return low | static_cast<int>((qh >> i) & 1u) << 4;
}
void q5_0(const uint8_t* b, float* y) {
  const float d = gguf_f16_at(b);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(q5_code(b + 2, b + 6, i) - 16);
}
void q5_1(const uint8_t* b, float* y) {
  const float d = gguf_f16_at(b), m = gguf_f16_at(b + 2);
  for (int i = 0; i < 32; ++i) y[i] = d * static_cast<float>(q5_code(b + 4, b + 8, i)) + m;
}
void iq4_nl(const uint8_t* b, float* y) {
  const float d = gguf_f16_at(b);
  for (int i = 0; i < 16; ++i) {
    y[i] = d * static_cast<float>(kIq4nlValues[b[2 + i] & 0x0f]);
    y[i + 16] = d * static_cast<float>(kIq4nlValues[b[2 + i] >> 4]);
  }
}
void q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* qs = b + 16;
  const float d = gguf_f16_at(b + 80), dmin = gguf_f16_at(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32, j = e / 16;
    const float dl = d * static_cast<float>(scales[j] & 0x0f);
    const float ml = dmin * static_cast<float>(scales[j] >> 4);
    const int q = (qs[h * 32 + l] >> (2 * s)) & 3;
    y[e] = dl * static_cast<float>(q) - ml;
  }
}
void q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* scales = b + 96;
  const float d = gguf_f16_at(b + 108);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32, j = e / 16;
    const float dl = d * static_cast<float>(q3k_scale(scales, j) - 32);
    const int low = (qs[h * 32 + l] >> (2 * s)) & 3;
    const int high = (hmask[l] >> (e / 32)) & 1;
    y[e] = dl * static_cast<float>(low - (high ? 0 : 4));
  }
}
void q4_k(const uint8_t* b, float* y) {
  const float d = gguf_f16_at(b), dmin = gguf_f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qs = b + 16;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(scales, j, &sc, &m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      const int q = j % 2 == 0 ? (qs[(j / 2) * 32 + l] & 0x0f) : (qs[(j / 2) * 32 + l] >> 4);
      y[j * 32 + l] = dl * static_cast<float>(q) - ml;
    }
  }
}
void q5_k(const uint8_t* b, float* y) {
  const float d = gguf_f16_at(b), dmin = gguf_f16_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + 48;
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(scales, j, &sc, &m);
    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      const int low = j % 2 == 0 ? (qs[(j / 2) * 32 + l] & 0x0f) : (qs[(j / 2) * 32 + l] >> 4);
      const int q = low | ((qh[l] >> j) & 1) << 4;
      y[j * 32 + l] = dl * static_cast<float>(q) - ml;
    }
  }
}
void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = gguf_f16_at(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const uint8_t lbyte = ql[h * 64 + (s % 2) * 32 + l];
    const int low = s < 2 ? (lbyte & 0x0f) : (lbyte >> 4);
    const int high = (qh[h * 32 + l] >> (2 * s)) & 3;
    const float dl = d * static_cast<float>(scales[e / 16]);
    y[e] = dl * static_cast<float>((low | high << 4) - 32);
  }
}
void iq4_xs(const uint8_t* b, float* y) {
  const float d = gguf_f16_at(b);
  uint16_t sh;
  std::memcpy(&sh, b + 2, 2);
  const uint8_t* sl = b + 4;
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 8; ++j) {
    const int ls = (((sl[j / 2] >> (4 * (j % 2))) & 0x0f) | ((sh >> (2 * j)) & 3) << 4) - 32;
    const float dl = d * static_cast<float>(ls);
    for (int l = 0; l < 16; ++l) {
      y[j * 32 + l] = dl * static_cast<float>(kIq4nlValues[qs[j * 16 + l] & 0x0f]);
      y[j * 32 + 16 + l] = dl * static_cast<float>(kIq4nlValues[qs[j * 16 + l] >> 4]);
    }
  }
}

}  // namespace

std::vector<int> gguf_block_f16_fields(DType t) {
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    case DType::Q8_0: case DType::Q4_0: case DType::Q5_0: case DType::IQ4_NL: case DType::IQ4_XS: return {0};
    default: fail_as(ErrorKind::kInternal, "gguf_block_f16_fields: ", dtype_name(t), " is not a GGUF block format");
  }
}

void dequantize_gguf_blocks(DType t, const void* src, float* dst, int64_t n) {
  void (*one)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case DType::Q8_0: one = q8_0; break;
    case DType::Q4_0: one = q4_0; break;
    case DType::Q4_1: one = q4_1; break;
    case DType::Q5_0: one = q5_0; break;
    case DType::Q5_1: one = q5_1; break;
    case DType::IQ4_NL: one = iq4_nl; break;
    case DType::Q2_K: one = q2_k; break;
    case DType::Q3_K: one = q3_k; break;
    case DType::Q4_K: one = q4_k; break;
    case DType::Q5_K: one = q5_k; break;
    case DType::Q6_K: one = q6_k; break;
    case DType::IQ4_XS: one = iq4_xs; break;
    default: fail_as(ErrorKind::kInternal, "dequantize_gguf_blocks: ", dtype_name(t), " is not a GGUF block format");
  }
  const int64_t be = dtype_block_elems(t), bb = dtype_block_bytes(t);
  if (n % be != 0) fail("dequantize ", dtype_name(t), ": ", n, " elements is not a multiple of the block size ", be);
  const auto* b = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / be; ++i) one(b + i * bb, dst + i * be);
}

}  // namespace graft
