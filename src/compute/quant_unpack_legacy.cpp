// Unpacking of the 32-element GGUF block formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) for the
// integer kernels (layouts: graft/core/gguf_blocks.h), in AVX2/F16C (the build's baseline ISA):
// decode unpacks every weight once per token, so this runs at memory speed or the kernels wait.
#include <immintrin.h>

#include <cstring>

#include "graft/core/gguf_blocks.h"
#include "compute/q8_simd.h"
#include "compute/quant_formats.h"

namespace graft::compute::detail {

namespace {

void unpack_q8_0(const uint8_t* row, int64_t k, int8_t* q, float* a4, float*) {
  for (int64_t b = 0; b < k / 32; ++b, row += 34, q += 32, a4 += 8) {
    const float d = f16_at(row);
    std::memcpy(q, row + 2, 32);
    fill4(a4, d);
    fill4(a4 + 4, d);
  }
}

inline void store_nibbles16(const uint8_t* qs, int8_t* q, int offset) {
  const __m256i v = _mm256_sub_epi8(nibbles16(qs), _mm256_set1_epi8(static_cast<char>(offset)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), v);
}

void unpack_q4_0(const uint8_t* row, int64_t k, int8_t* q, float* a4, float*) {
  for (int64_t b = 0; b < k / 32; ++b, row += 18, q += 32, a4 += 8) {
    store_nibbles16(row + 2, q, 8);
    const float d = f16_at(row);
    fill4(a4, d);
    fill4(a4 + 4, d);
  }
}

void unpack_q4_1(const uint8_t* row, int64_t k, int8_t* q, float* a4, float* b16) {
  for (int64_t b = 0; b < k / 32; ++b, row += 20, q += 32, a4 += 8, b16 += 2) {
    store_nibbles16(row + 4, q, 0);
    const float d = f16_at(row), m = f16_at(row + 2);
    fill4(a4, d);
    fill4(a4 + 4, d);
    b16[0] = b16[1] = m;
  }
}

inline void q5_codes(const uint8_t* qh_bytes, const uint8_t* qs, int8_t* q, int offset) {
  const __m256i v = _mm256_or_si256(nibbles16(qs), bits_to_0x10(qh_bytes));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_sub_epi8(v, _mm256_set1_epi8(static_cast<char>(offset))));
}

void unpack_q5_0(const uint8_t* row, int64_t k, int8_t* q, float* a4, float*) {
  for (int64_t b = 0; b < k / 32; ++b, row += 22, q += 32, a4 += 8) {
    q5_codes(row + 2, row + 6, q, 16);
    const float d = f16_at(row);
    fill4(a4, d);
    fill4(a4 + 4, d);
  }
}

void unpack_q5_1(const uint8_t* row, int64_t k, int8_t* q, float* a4, float* b16) {
  for (int64_t b = 0; b < k / 32; ++b, row += 24, q += 32, a4 += 8, b16 += 2) {
    q5_codes(row + 4, row + 8, q, 0);
    const float d = f16_at(row), m = f16_at(row + 2);
    fill4(a4, d);
    fill4(a4 + 4, d);
    b16[0] = b16[1] = m;
  }
}

void unpack_iq4_nl(const uint8_t* row, int64_t k, int8_t* q, float* a4, float*) {
  for (int64_t b = 0; b < k / 32; ++b, row += 18, q += 32, a4 += 8) {
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    const __m256i idx = nibbles16(row + 2);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set_m128i(table, table), idx);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), v);
    const float d = f16_at(row);
    fill4(a4, d);
    fill4(a4 + 4, d);
  }
}

constexpr QuantFormat kFormats[] = {
    {DType::Q8_0, false, unpack_q8_0}, {DType::Q4_0, false, unpack_q4_0}, {DType::Q4_1, true, unpack_q4_1},
    {DType::Q5_0, false, unpack_q5_0}, {DType::Q5_1, true, unpack_q5_1}, {DType::IQ4_NL, false, unpack_iq4_nl},
};

}  // namespace

const QuantFormat* quant_format_legacy(DType t) {
  for (const auto& f : kFormats)
    if (f.type == t) return &f;
  return nullptr;
}

const QuantFormat* quant_format(DType t) {
  if (const QuantFormat* f = quant_format_legacy(t)) return f;
  return quant_format_kquants(t);
}

}  // namespace graft::compute::detail
