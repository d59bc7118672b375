#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>
#include <limits>

#include "graft/core/dtype.h"
#include "graft/core/error.h"
#include "graft/core/tensor.h"

namespace graft {

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 lies exactly between two bf16 values: ties to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  // 1 + 3*2^-8 ties between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to even.
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << "half bits " << h;
  }
}

TEST(DType, F16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);      // tie -> even (1.0)
  EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);      // tie -> even (up)
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                // rounds to inf
  EXPECT_EQ(f32_to_f16(5.9604645e-08f), 0x0001);         // smallest subnormal
}

// convert_from_f32 rounds eight at a time (F16C, AVX2 integer BF16 rounding): every element must be
// the scalar converter's, bit for bit, over every F32 exponent, ties, subnormals, infinities, NaNs
// (eights with and without one) and a tail shorter than eight.
TEST(DType, VectorConvertFromF32IsTheScalarRounding) {
  std::vector<uint32_t> bits;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (int i = 0; i < 200000; ++i) {  // random bit patterns: all exponents, both signs
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    bits.push_back(static_cast<uint32_t>(x));
  }
  for (uint32_t e = 0; e < 256; ++e)  // ties and near-ties of both formats at every exponent
    for (uint32_t low : {0x1000u, 0x0fffu, 0x1001u, 0x3000u, 0x8000u, 0x7fffu, 0x18000u, 0x0u, 0x7fffffu})
      for (uint32_t sign : {0u, 0x80000000u}) bits.push_back(sign | e << 23 | low);
  for (uint32_t b : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x477ff000u, 0x477fefffu,
                     0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u, 0x00000001u, 0x80000000u})
    bits.push_back(b);
  bits.resize(bits.size() / 8 * 8 + 5);  // a tail of 5
  const auto n = static_cast<int64_t>(bits.size());
  std::vector<float> f(bits.size());
  std::memcpy(f.data(), bits.data(), bits.size() * 4);
  std::vector<uint16_t> h(bits.size()), b(bits.size());
  convert_from_f32(f.data(), DType::F16, h.data(), n);
  convert_from_f32(f.data(), DType::BF16, b.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i], f32_to_f16(f[i])) << "F16 of bits " << std::hex << bits[i];
    ASSERT_EQ(b[i], f32_to_bf16(f[i])) << "BF16 of bits " << std::hex << bits[i];
  }
}

TEST(DType, BlockSizesMatchGgml) {
  EXPECT_EQ(dtype_bytes(DType::Q8_0, 64), 68);
  EXPECT_EQ(dtype_bytes(DType::Q4_0, 32), 18);
  EXPECT_EQ(dtype_bytes(DType::Q4_1, 96), 60);
  EXPECT_THROW(dtype_bytes(DType::Q4_0, 33), Error);
}

TEST(Tensor, DequantizesQ4_1Block) {
  uint8_t block[20] = {};
  uint16_t d = f32_to_f16(0.5f), m = f32_to_f16(-1.0f);
  block[0] = d & 0xff; block[1] = d >> 8; block[2] = m & 0xff; block[3] = m >> 8;
  for (int i = 0; i < 16; ++i) block[4 + i] = static_cast<uint8_t>(i | (15 - i) << 4);
  float out[32];
  convert_to_f32(DType::Q4_1, block, out, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_FLOAT_EQ(out[i], 0.5f * i - 1.0f);
    EXPECT_FLOAT_EQ(out[16 + i], 0.5f * (15 - i) - 1.0f);
  }
}

}  // namespace graft
