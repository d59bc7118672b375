#include "graft/model/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "graft/core/error.h"
#include "graft/model/family.h"
#include "graft/model/weights.h"
#include "map_source.h"
#include "support/errors.h"

namespace graft::model {
namespace {

using nlohmann::json;

json base_config(const std::string& type = "llama") {
  return {{"model_type", type},          {"hidden_size", 64},   {"intermediate_size", 128},
          {"num_hidden_layers", 2},      {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"vocab_size", 300},           {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
          {"max_position_embeddings", 256}, {"hidden_act", "silu"}};
}

std::string error_of(const json& j) {
  return test::message_of([&] { parse_hf_config(j, "cfg.json"); });
}

TEST(Config, ParsesLlama) {
  ModelConfig c = parse_hf_config(base_config(), "cfg.json");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.kv_dim(), 32);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
}

TEST(Config, FamilyTraitsApply) {
  EXPECT_TRUE(parse_hf_config(base_config("qwen2"), "c").attention_bias);
  ModelConfig q3 = parse_hf_config(base_config("qwen3"), "c");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_TRUE(q3.tie_word_embeddings);  // qwen3's default when the field is absent
  json j = base_config("qwen3");
  j["tie_word_embeddings"] = false;
  EXPECT_FALSE(parse_hf_config(j, "c").tie_word_embeddings);
}

TEST(Config, RefusesUnknownModelTypeListingSupported) {
  std::string e = error_of(base_config("gpt_neox"));
  EXPECT_NE(e.find("'gpt_neox'"), std::string::npos) << e;
  EXPECT_NE(e.find("llama, mistral, qwen2, qwen3"), std::string::npos) << e;
}

TEST(Config, RefusesUnknownRopeScaling) {
  json j = base_config();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  std::string e = error_of(j);
  EXPECT_NE(e.find("'yarn'"), std::string::npos) << e;
  EXPECT_NE(e.find("cfg.json"), std::string::npos) << e;
}

TEST(Config, RefusesMathChangingFields) {
  json j = base_config();
  j["hidden_act"] = "gelu";
  EXPECT_NE(error_of(j).find("hidden_act"), std::string::npos);
  j = base_config();
  j["mlp_bias"] = true;
  EXPECT_NE(error_of(j).find("mlp_bias"), std::string::npos);
  j = base_config("qwen2");
  j["use_sliding_window"] = true;
  EXPECT_NE(error_of(j).find("use_sliding_window"), std::string::npos);
  j = base_config();
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("multiple"), std::string::npos);
  j = base_config();
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("hidden_size"), std::string::npos);
}

TEST(Config, Llama3RopeScalingMatchesFormula) {
  json j = base_config();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  ModelConfig c = parse_hf_config(j, "c");
  std::vector<float> inv = rope_inv_freq(c);
  ASSERT_EQ(inv.size(), 8u);
  // Highest frequency (wavelength 2π < 32/4): unchanged. Lowest (wavelength > 32): divided by 8.
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  const float base_last = 1.0f / std::pow(500000.0f, 14.0f / 16.0f);
  EXPECT_FLOAT_EQ(inv[7], base_last / 8.0f);
}

TEST(Config, TransformersFiveRopeParameters) {
  json j = base_config();
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 123.0}};
  EXPECT_DOUBLE_EQ(parse_hf_config(j, "c").rope_theta, 123.0);
}

json gemma_config(const std::string& type) {
  json j = base_config(type);
  j.erase("hidden_act");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["sliding_window"] = 8;
  j["query_pre_attn_scalar"] = 24;
  return j;
}

TEST(Config, Gemma2RowAndFields) {
  json j = gemma_config("gemma2");
  j["attn_logit_softcapping"] = 50.0;
  j["final_logit_softcapping"] = 30.0;
  ModelConfig c = parse_hf_config(j, "c");
  EXPECT_EQ(c.activation, Activation::GeluTanh);
  EXPECT_EQ(c.norm_weight_offset, 1.0f);
  EXPECT_TRUE(c.scale_embeddings && c.sandwich_norms && c.tie_word_embeddings);
  EXPECT_EQ(*c.attn_logit_softcap, 50.0);
  EXPECT_EQ(*c.final_logit_softcap, 30.0);
  EXPECT_FLOAT_EQ(c.attention_scale(), 1.0f / std::sqrt(24.0f));
  // No layer_types (transformers 4.x): layer 0 local, layer 1 global.
  EXPECT_TRUE(c.layer_slides(0));
  EXPECT_FALSE(c.layer_slides(1));
  EXPECT_EQ(hf_layer_tensor_name(c, 0, Role::MlpNorm), "model.layers.0.pre_feedforward_layernorm.weight");
  EXPECT_EQ(hf_layer_tensor_name(c, 0, Role::AttnPostNorm), "model.layers.0.post_attention_layernorm.weight");
}

TEST(Config, Gemma3LegacyRopeKeys) {
  json j = gemma_config("gemma3_text");
  j["num_hidden_layers"] = 4;
  j["sliding_window_pattern"] = 2;
  j["rope_theta"] = 1e6;
  j["rope_local_base_freq"] = 1e4;
  j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 8.0}};
  ModelConfig c = parse_hf_config(j, "c");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(*c.rope_local_theta, 1e4);
  EXPECT_TRUE(c.layer_slides(0) && c.layer_slides(2));
  EXPECT_FALSE(c.layer_slides(1) || c.layer_slides(3));
  // Global layers scaled, local ones the plain 1e4 base.
  EXPECT_FLOAT_EQ(rope_inv_freq(c)[1], 1.0f / std::pow(1e6f, 2.0f / 16.0f) / 8.0f);
  EXPECT_FLOAT_EQ(rope_inv_freq(c, true)[1], 1.0f / std::pow(1e4f, 2.0f / 16.0f));
}

// Every field that would change the math of a family that does not run it is refused by name,
// with the family named.
TEST(Config, RefusesFamilyFieldsByName) {
  auto expect_refused = [](const json& j, const std::vector<std::string>& needles) {
    const std::string e = error_of(j);
    for (const auto& n : needles) EXPECT_NE(e.find(n), std::string::npos) << "want '" << n << "' in: " << e;
  };
  json j = base_config();
  j["attn_logit_softcapping"] = 50.0;
  expect_refused(j, {"attn_logit_softcapping", "llama"});
  j = base_config("qwen2");
  j["final_logit_softcapping"] = 30.0;
  expect_refused(j, {"final_logit_softcapping", "qwen2"});
  j = base_config("mistral");
  j["query_pre_attn_scalar"] = 24;
  expect_refused(j, {"query_pre_attn_scalar", "mistral"});
  j = gemma_config("gemma2");
  j["rope_local_base_freq"] = 1e4;
  expect_refused(j, {"rope_local_base_freq", "gemma2"});
  j = gemma_config("gemma2");
  j["hidden_activation"] = "gelu";
  expect_refused(j, {"hidden_activation", "gemma2", "gelu_pytorch_tanh"});
  j = gemma_config("gemma3_text");
  j["use_bidirectional_attention"] = true;
  expect_refused(j, {"use_bidirectional_attention", "gemma3_text"});
  j = gemma_config("gemma3_text");
  j["layer_types"] = {"sliding_attention", "chunked_attention"};
  expect_refused(j, {"chunked_attention", "gemma3_text"});
  j = gemma_config("gemma3_text");
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}},
                          {"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e4}}}};
  expect_refused(j, {"rope_parameters.sliding_attention.rope_type", "linear"});
  j = gemma_config("gemma3_text");
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_refused(j, {"'yarn'", "gemma3_text"});
  j = gemma_config("gemma2");
  j.erase("sliding_window");
  expect_refused(j, {"sliding_window"});
  j = base_config();
  j["partial_rotary_factor"] = 0.5;
  expect_refused(j, {"partial_rotary_factor", "llama"});
}

using test::MapSource;

MapSource complete_source(const ModelConfig& c) {
  MapSource s;
  s.t[kEmbedName] = Tensor::zeros_f32({c.vocab_size, c.hidden_size});
  s.t[kFinalNormName] = Tensor::zeros_f32({c.hidden_size});
  if (!c.tie_word_embeddings) s.t[kLmHeadName] = Tensor::zeros_f32({c.vocab_size, c.hidden_size});
  for (int64_t i = 0; i < c.num_layers; ++i)
    for (const auto& spec : layer_tensor_specs(c))
      if (layer_tensor_present(c, spec.role))
        s.t[hf_layer_tensor_name(c, i, spec.role)] = Tensor::zeros_f32(layer_tensor_shape(c, spec.role));
  return s;
}

TEST(Weights, LoadsCompleteCheckpoint) {
  for (const char* fam : {"llama", "qwen2", "qwen3"}) {
    ModelConfig c = parse_hf_config(base_config(fam), "c");
    MapSource s = complete_source(c);
    ModelWeights w = load_weights(c, s);
    EXPECT_EQ(w.layers.size(), 2u);
    EXPECT_EQ(w.layers[1].q_bias.data != nullptr, c.attention_bias) << fam;
    EXPECT_EQ(w.layers[1].q_norm.data != nullptr, c.qk_norm) << fam;
  }
}

TEST(Weights, ListsEveryProblemAtOnce) {
  ModelConfig c = parse_hf_config(base_config(), "c");
  MapSource s = complete_source(c);
  s.t.erase("model.layers.0.mlp.up_proj.weight");
  s.t["model.layers.1.self_attn.k_proj.weight"] = Tensor::zeros_f32({64, 64});
  s.t["model.layers.1.self_attn.v_proj.weight"] = Tensor::owned(DType::I32, {32, 64}, std::vector<uint8_t>(32 * 64 * 4));
  s.t["model.layers.7.mlp.up_proj.weight"] = Tensor::zeros_f32({1});
  try {
    load_weights(c, s);
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("4 problems"), std::string::npos) << m;
    EXPECT_NE(m.find("missing tensor 'model.layers.0.mlp.up_proj.weight'"), std::string::npos) << m;
    EXPECT_NE(m.find("'model.layers.1.self_attn.k_proj.weight' has shape [64, 64], expected [32, 64]"), std::string::npos) << m;
    EXPECT_NE(m.find("dtype I32"), std::string::npos) << m;
    EXPECT_NE(m.find("unexpected tensor 'model.layers.7.mlp.up_proj.weight'"), std::string::npos) << m;
  }
}

TEST(Weights, TiedCheckpointWithDifferentHeadIsRefused) {
  json j = base_config();
  j["tie_word_embeddings"] = true;
  ModelConfig c = parse_hf_config(j, "c");
  MapSource s = complete_source(c);
  Tensor head = Tensor::zeros_f32({c.vocab_size, c.hidden_size});
  head.mutable_as<float>()[3] = 1.0f;
  s.t[kLmHeadName] = head;
  EXPECT_THROW(load_weights(c, s), Error);
}

}  // namespace
}  // namespace graft::model
