// graft's GGUF quantizers (graft/core/gguf_quantize.h).
//   * The 32-element formats against the `gguf` Python package's quantizers, byte for byte: the
//     data gguf-py quantized is in tests/fixtures/gguf/blocks.gguf (T.src beside T), with an all-zero
//     block, a constant block and an outlier of 40 (tools/gen_gguf_block_fixtures.py).
//   * Q4_K and Q6_K (no Python quantizer exists) against llama-quantize's own output on the whole
//     SmolLM2 model in tests/engine/smollm2_q4km_test.cpp; here their edge cases (all-zero
//     super-blocks, constants, one outlier, tiny values) and the error bound every quantizer must
//     keep: dequantize(quantize(x)) within half a code step of x, plus the scale's f16 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"
#include "graft/core/gguf_quantize.h"
#include "graft/io/gguf.h"
#include "test_paths.h"

namespace graft {
namespace {

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> out(static_cast<size_t>(dtype_bytes(t, static_cast<int64_t>(x.size()))));
  quantize_gguf_blocks(t, x.data(), out.data(), static_cast<int64_t>(x.size()));
  return out;
}

std::vector<float> dequantize(DType t, const std::vector<uint8_t>& q, size_t n) {
  std::vector<float> y(n);
  dequantize_gguf_blocks(t, q.data(), y.data(), static_cast<int64_t>(n));
  return y;
}

class GgufPyQuantizer : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufPyQuantizer, WritesGgufPysBytes) {
  auto f = io::GgufFile::open(test::fixture("gguf/blocks.gguf"));
  const std::string name = GetParam();
  const Tensor want = f->tensor(name);
  const Tensor src = f->tensor(name + ".src");
  ASSERT_EQ(src.dtype, DType::F32);
  std::vector<float> x(src.as<float>(), src.as<float>() + src.numel());
  const std::vector<uint8_t> got = quantize(want.dtype, x);
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.nbytes());
  const int64_t block = dtype_block_bytes(want.dtype);
  int mismatched = 0;
  for (int64_t b = 0; b < want.nbytes() / block; ++b)
    if (std::memcmp(got.data() + b * block, want.as<uint8_t>() + b * block, static_cast<size_t>(block)) != 0 &&
        mismatched++ < 3)
      ADD_FAILURE() << name << " block " << b << " differs from gguf-py's";
  EXPECT_EQ(mismatched, 0);
}

INSTANTIATE_TEST_SUITE_P(LegacyFormats, GgufPyQuantizer, ::testing::Values("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"));

// Data with the cases a quantizer's scale search can trip on, in blocks of 256.
std::vector<float> awkward_data() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(256 * 6);
  for (float& v : x) v = normal(rng);
  std::fill(x.begin(), x.begin() + 256, 0.0f);              // an all-zero super-block
  std::fill(x.begin() + 256, x.begin() + 256 + 32, 0.75f);  // a constant sub-block
  std::fill(x.begin() + 512, x.begin() + 512 + 16, -2.5f);  // a negative constant
  x[800] = 40.0f;                                           // one outlier
  for (size_t i = 1024; i < 1280; ++i) x[i] *= 1e-6f;       // tiny values (scales in f16 subnormals)
  for (size_t i = 1280; i < 1536; ++i) x[i] = std::abs(x[i]) + 3.0f;  // all positive, far from zero
  return x;
}

class RoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(RoundTrip, StaysWithinItsRoundingBound) {
  const DType t = GetParam();
  const std::vector<float> x = awkward_data();
  const std::vector<float> y = dequantize(t, quantize(t, x), x.size());
  // Per group of the format's smallest scale: asymmetric formats (Q4_1, Q5_1, Q4_K: a min and a
  // step (max − min) / codes) round to within half a step; symmetric ones (Q8_0, Q4_0, Q5_0, Q6_K:
  // step max|x| / half the codes, codes −half..half−1) within a step, since the end opposite the
  // largest element is clamped one code short. Q4_K and Q6_K search their group scales (which may
  // clip an end by up to a step: half a step more) and round them to 6 / 8 bits of the super-block's
  // largest, which costs up to max|x| of the super-block / 63 (Q4_K) or / 128 (Q6_K). Slack: the f16 rounding of the scales, 2^-11
  // relative, and their subnormal floor (6e-8 per code step: the 1e-6 super-block rounds to ~0).
  struct Rule {
    int group;
    float codes;
    bool symmetric;
  };
  const Rule r = t == DType::Q8_0   ? Rule{32, 127, true}
                 : t == DType::Q4_0 ? Rule{32, 8, true}
                 : t == DType::Q5_0 ? Rule{32, 16, true}
                 : t == DType::Q6_K ? Rule{16, 32, true}
                 : t == DType::Q5_1 ? Rule{32, 31, false}
                                    : Rule{32, 15, false};
  const bool k_quant = t == DType::Q4_K || t == DType::Q6_K;
  for (size_t g = 0; g < x.size(); g += static_cast<size_t>(r.group)) {
    float lo = 0, hi = 0, amax = 0;
    for (int i = 0; i < r.group; ++i) {
      lo = std::min(lo, x[g + i]);
      hi = std::max(hi, x[g + i]);
      amax = std::max(amax, std::abs(x[g + i]));
    }
    const float step = r.symmetric ? amax / r.codes : (hi - lo) / r.codes;
    float super_amax = 0;
    for (size_t i = g / 256 * 256; i < g / 256 * 256 + 256; ++i) super_amax = std::max(super_amax, std::abs(x[i]));
    const float scale_rounding = !k_quant ? 0.0f : super_amax / (t == DType::Q4_K ? 63.f : 128.f);
    const float bound = ((r.symmetric ? 1.0f : 0.5f) + (k_quant ? 0.5f : 0.0f)) * step + scale_rounding +
                        amax * 2e-3f + 128 * 6e-8f;
    for (int i = 0; i < r.group; ++i)
      ASSERT_LE(std::abs(y[g + i] - x[g + i]), bound)
          << dtype_name(t) << " element " << g + i << ": " << x[g + i] << " came back as " << y[g + i];
  }
  // All-zero input is exact, and so is a constant sub-block in the formats with a min.
  for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << dtype_name(t);
  if (t == DType::Q4_1 || t == DType::Q5_1) {
    for (int i = 256; i < 288; ++i) EXPECT_NEAR(y[i], 0.75f, 1e-3f) << dtype_name(t);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryFormat, RoundTrip,
                         ::testing::Values(DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q4_K,
                                           DType::Q6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(GgufQuantize, RefusesOtherFormatsAndPartialBlocks) {
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> out(1024);
  EXPECT_FALSE(gguf_quantize_supported(DType::Q3_K));
  EXPECT_FALSE(gguf_quantize_supported(DType::F16));
  EXPECT_TRUE(gguf_quantize_supported(DType::Q6_K));
  try {
    quantize_gguf_blocks(DType::Q5_K, x.data(), out.data(), 256);
    ADD_FAILURE() << "Q5_K accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("Q5_K"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_gguf_blocks(DType::Q4_K, x.data(), out.data(), 128), Error);  // half a super-block
  EXPECT_THROW(quantize_gguf_blocks(DType::Q8_0, x.data(), out.data(), 48), Error);
}

}  // namespace
}  // namespace graft
