// Unpacking of the 256-element GGUF "K-quant" super-blocks (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and
// IQ4_XS for the integer kernels (layouts: graft/core/gguf_blocks.h). Q4_K and Q6_K (what Q4_K_M
// files are mostly made of) unpack in AVX2; the rest in plain loops.
#include <immintrin.h>

#include "graft/core/gguf_blocks.h"
#include "compute/quant_formats.h"

namespace graft::compute::detail {

namespace {

// Element e = h·128 + s·32 + l of a 2-bit field packed as in Q2_K/Q3_K: bits 2s.. of byte h·32 + l.
void unpack_q2_k(const uint8_t* row, int64_t k, int8_t* q, float* a4, float* b16) {
  for (int64_t b = 0; b < k / 256; ++b, row += 84, q += 256, a4 += 64, b16 += 16) {
    const uint8_t* scales = row;
    const uint8_t* qs = row + 16;
    const float d = f16_at(row + 80), dmin = f16_at(row + 82);
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 4; ++s)
        for (int l = 0; l < 32; ++l) q[h * 128 + s * 32 + l] = static_cast<int8_t>((qs[h * 32 + l] >> (2 * s)) & 3);
    for (int j = 0; j < 16; ++j) {
      fill4(a4 + 4 * j, d * static_cast<float>(scales[j] & 0x0f));
      b16[j] = -(dmin * static_cast<float>(scales[j] >> 4));
    }
  }
}

void unpack_q3_k(const uint8_t* row, int64_t k, int8_t* q, float* a4, float*) {
  for (int64_t b = 0; b < k / 256; ++b, row += 110, q += 256, a4 += 64) {
    const uint8_t* hmask = row;
    const uint8_t* qs = row + 32;
    const float d = f16_at(row + 108);
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 4; ++s) {
        const int bit = h * 4 + s;  // hmask bit of elements h·128 + s·32 + l
        for (int l = 0; l < 32; ++l)
          q[h * 128 + s * 32 + l] =
              static_cast<int8_t>(((qs[h * 32 + l] >> (2 * s)) & 3) - (((hmask[l] >> bit) & 1) ? 0 : 4));
      }
    for (int j = 0; j < 16; ++j) fill4(a4 + 4 * j, d * static_cast<float>(q3k_scale(row + 96, j) - 32));
  }
}

// Q4_K and Q5_K: eight sub-blocks of 32 with a 6-bit scale and min each.
template <bool Five>
void unpack_q45_k(const uint8_t* row, int64_t k, int8_t* q, float* a4, float* b16) {
  constexpr int kBytes = Five ? 176 : 144;
  for (int64_t b = 0; b < k / 256; ++b, row += kBytes, q += 256, a4 += 64, b16 += 16) {
    const float d = f16_at(row), dmin = f16_at(row + 2);
    const uint8_t* scales = row + 4;
    const uint8_t* qh = row + 16;
    const uint8_t* qs = row + (Five ? 48 : 16);
    if constexpr (Five) {
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
          const int lo = (qs[c * 32 + l] & 0x0f) | ((qh[l] >> (2 * c)) & 1) << 4;
          const int hi = (qs[c * 32 + l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4;
          q[c * 64 + l] = static_cast<int8_t>(lo);
          q[c * 64 + 32 + l] = static_cast<int8_t>(hi);
        }
    } else {
      const __m256i m = _mm256_set1_epi8(0x0f);
      for (int c = 0; c < 4; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + c * 32));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c * 64), _mm256_and_si256(v, m));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + c * 64 + 32), _mm256_and_si256(_mm256_srli_epi16(v, 4), m));
      }
    }
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4k_scale_min(scales, j, &sc, &m);
      const float a = d * static_cast<float>(sc), mb = -(dmin * static_cast<float>(m));
      fill4(a4 + 8 * j, a);
      fill4(a4 + 8 * j + 4, a);
      b16[2 * j] = b16[2 * j + 1] = mb;
    }
  }
}

void unpack_q6_k(const uint8_t* row, int64_t k, int8_t* q, float* a4, float*) {
  for (int64_t b = 0; b < k / 256; ++b, row += 210, q += 256, a4 += 64) {
    const uint8_t* ql = row;
    const uint8_t* qh = row + 128;
    const auto* scales = reinterpret_cast<const int8_t*>(row + 192);
    const float d = f16_at(row + 208);
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03), off = _mm256_set1_epi8(32);
    // 16-bit shifts of byte fields: the masks drop what crosses from the neighbouring byte.
    auto code = [&](__m256i low4, __m256i hb, int shift) {
      const __m256i high2 = _mm256_and_si256(_mm256_srli_epi16(hb, shift), m2);
      return _mm256_sub_epi8(_mm256_or_si256(low4, _mm256_slli_epi16(high2, 4)), off);
    };
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + h * 64));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + h * 64 + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh + h * 32));
      auto* qq = reinterpret_cast<__m256i*>(q + h * 128);
      _mm256_storeu_si256(qq, code(_mm256_and_si256(l0, m4), hb, 0));
      _mm256_storeu_si256(qq + 1, code(_mm256_and_si256(l1, m4), hb, 2));
      _mm256_storeu_si256(qq + 2, code(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), hb, 4));
      _mm256_storeu_si256(qq + 3, code(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), hb, 6));
    }
    for (int j = 0; j < 16; ++j) fill4(a4 + 4 * j, d * static_cast<float>(scales[j]));
  }
}

void unpack_iq4_xs(const uint8_t* row, int64_t k, int8_t* q, float* a4, float*) {
  for (int64_t b = 0; b < k / 256; ++b, row += 136, q += 256, a4 += 64) {
    const float d = f16_at(row);
    const int sh = row[2] | row[3] << 8;
    const uint8_t* sl = row + 4;
    const uint8_t* qs = row + 8;
    for (int j = 0; j < 8; ++j) {
      for (int l = 0; l < 16; ++l) {
        q[j * 32 + l] = kIq4nlValues[qs[j * 16 + l] & 0x0f];
        q[j * 32 + 16 + l] = kIq4nlValues[qs[j * 16 + l] >> 4];
      }
      const int ls = (((sl[j / 2] >> (4 * (j % 2))) & 0x0f) | ((sh >> (2 * j)) & 3) << 4) - 32;
      const float a = d * static_cast<float>(ls);
      fill4(a4 + 8 * j, a);
      fill4(a4 + 8 * j + 4, a);
    }
  }
}

constexpr QuantFormat kFormats[] = {
    {DType::Q2_K, true, unpack_q2_k},         {DType::Q3_K, false, unpack_q3_k},
    {DType::Q4_K, true, unpack_q45_k<false>}, {DType::Q5_K, true, unpack_q45_k<true>},
    {DType::Q6_K, false, unpack_q6_k},        {DType::IQ4_XS, false, unpack_iq4_xs},
};

}  // namespace

const QuantFormat* quant_format_kquants(DType t) {
  for (const auto& f : kFormats)
    if (f.type == t) return &f;
  return nullptr;
}

}  // namespace graft::compute::detail
