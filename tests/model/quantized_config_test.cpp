// mlx-lm quantization metadata: the config block with defaults, per-module overrides and `false`,
// the refusals, and the checkpoint view that finds quantized modules by their `.scales` tensor and
// checks each against its own spec (mixed widths).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "graft/core/affine_quant.h"
#include "graft/core/error.h"
#include "graft/model/config.h"
#include "graft/model/quantized_source.h"
#include "map_source.h"
#include "support/errors.h"

namespace graft::model {
namespace {

using nlohmann::json;

json config_with(const json& quant, const char* key = "quantization") {
  json j = {{"model_type", "llama"},     {"hidden_size", 64},         {"intermediate_size", 128},
            {"num_hidden_layers", 1},    {"num_attention_heads", 4},  {"vocab_size", 300}};
  j[key] = quant;
  return j;
}

std::string error_of(const json& j) {
  return test::message_of([&] { parse_hf_config(j, "cfg.json"); });
}

TEST(QuantizationConfig, DefaultsOverridesAndFalse) {
  const ModelConfig c = parse_hf_config(
      config_with({{"group_size", 64}, {"bits", 4}, {"mode", "affine"},
                   {"model.layers.0.mlp.down_proj", {{"group_size", 32}, {"bits", 8}}},
                   {"lm_head", false}}),
      "cfg.json");
  ASSERT_TRUE(c.quantization);
  EXPECT_EQ(c.quantization->spec_for("model.layers.0.self_attn.q_proj"), (QuantSpec{4, 64}));
  EXPECT_EQ(c.quantization->spec_for("model.layers.0.mlp.down_proj"), (QuantSpec{8, 32}));
  EXPECT_FALSE(c.quantization->spec_for("lm_head").has_value());
  // mlx-lm's mirror name alone is read too; an unquantized config has none.
  EXPECT_TRUE(parse_hf_config(config_with({{"group_size", 32}, {"bits", 8}}, "quantization_config"), "c").quantization);
  json plain = config_with({});
  plain.erase("quantization");
  EXPECT_FALSE(parse_hf_config(plain, "c").quantization);
}

TEST(QuantizationConfig, RefusesWhatGraftDoesNotRun) {
  EXPECT_NE(error_of(config_with({{"group_size", 32}, {"bits", 4}, {"mode", "mxfp4"}})).find("mode \"mxfp4\""),
            std::string::npos);
  EXPECT_NE(error_of(config_with({{"group_size", 64}, {"bits", 3}})).find("bits 3 is not supported"), std::string::npos);
  EXPECT_NE(error_of(config_with({{"group_size", 16}, {"bits", 4}})).find("group_size 16"), std::string::npos);
  EXPECT_NE(error_of(config_with({{"quant_method", "gptq"}, {"bits", 4}}, "quantization_config")).find("gptq"),
            std::string::npos);
  EXPECT_NE(error_of(config_with({{"group_size", 64}, {"bits", 4}, {"lm_head", true}})).find("lm_head is true"),
            std::string::npos);
}

Tensor dense(int64_t rows, int64_t cols) {
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols * 4));
  float* f = reinterpret_cast<float*>(bytes.data());
  for (int64_t i = 0; i < rows * cols; ++i) f[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  return Tensor::owned(DType::F32, {rows, cols}, std::move(bytes));
}

void put(test::MapSource& s, const std::string& stem, const AffineQuantized& q) {
  s.t[stem + ".weight"] = q.packed;
  s.t[stem + ".scales"] = affine_param_as(q.scales, DType::BF16);
  s.t[stem + ".biases"] = affine_param_as(q.biases, DType::BF16);
}

TEST(QuantizedCheckpointSource, MixedWidthsAndLogicalView) {
  QuantizationConfig qc;
  qc.default_spec = {4, 64};
  qc.overrides["b"] = QuantSpec{8, 32};
  auto raw = std::make_shared<test::MapSource>();
  put(*raw, "a", quantize_affine(dense(8, 128), 4, 64, DType::BF16));
  put(*raw, "b", quantize_affine(dense(8, 128), 8, 32, DType::BF16));
  raw->t["norm.weight"] = dense(1, 128);
  QuantizedCheckpointSource src(raw, qc);
  EXPECT_EQ(src.quantized_count(), 2u);
  EXPECT_EQ(src.names(), (std::vector<std::string>{"a.weight", "b.weight", "norm.weight"}));
  EXPECT_EQ(src.info("b.weight")->shape, (Shape{8, 128}));
  EXPECT_FALSE(src.info("a.scales").has_value());
  EXPECT_EQ(src.spec("b.weight"), (QuantSpec{8, 32}));
  EXPECT_EQ(src.scale_dtype("a.weight"), DType::BF16);
  const Tensor dq = src.read("b.weight");  // dequantized for binding / --fuse-requantize
  EXPECT_EQ(dq.dtype, DType::F32);
  EXPECT_NEAR(dq.as<float>()[5], dense(8, 128).as<float>()[5], 0.01f);

  // A module whose codes do not fit the spec is refused naming it; so is `.scales` under `false`.
  QuantizationConfig wrong = qc;
  // b's 8-bit g32 codes read as 4-bit g32: 256 columns, 8 groups, but 4 scales per row. (Read as
  // 4-bit g64 they would fit [8, 4] scales too; then the logical width, 256 instead of the
  // config's 128, is what load_weights refuses.)
  wrong.overrides["b"] = QuantSpec{4, 32};
  try {
    QuantizedCheckpointSource bad(raw, wrong);
    ADD_FAILURE() << "inconsistent quantized module accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("quantized module 'b'"), std::string::npos) << e.what();
  }
  QuantizationConfig off = qc;
  off.overrides["a"] = std::nullopt;
  EXPECT_THROW(QuantizedCheckpointSource(raw, off), Error);
}

}  // namespace
}  // namespace graft::model
