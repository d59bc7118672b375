// llama.cpp GGUF LoRA adapters in the engine, fused (--adapter) and unfused (--lora), against the
// PEFT references their source adapters already have (fixtures: tools/gen_gguf_lora_fixtures.py).
//   * Tiny llama (q/k permuted by the converter) and qwen2: with the F32 conversion, prompt logits
//     equal PEFT's unmerged forward within 1e-4 (the tolerance of adapter_references_test: F32 on both
//     sides, summation order only; measured <= 1.5e-5) and the 16 greedy tokens are PEFT's; with the
//     F16/BF16/Q8_0 conversions the greedy tokens are PEFT's too (the generator chose seeds with
//     top-2 gaps >= 0.02). Their logits move by the factors' rounding: measured max 1.0e-3 (F16),
//     1.2e-2 (BF16, Q8_0); checked at about 3x that (3e-3, 4e-2) as a sanity bound only: the a
//     priori bounds are on the merged tensors (tests/model/gguf_adapters_test.cpp).
//   * SmolLM2-135M-Instruct (Q4_1 GGUF base, so the base's q/k rows are un-permuted too) with
//     demo/adapters/pirate-peft converted to GGUF --outtype q8_0 (the smallest type the converter
//     writes; lora_b stays F16): the greedy tokens for the 3 reference prompts are those PEFT
//     produced with the PEFT adapter (tests/fixtures/smollm2/pirate_peft_reference.json), fused and
//     unfused, and so are llama.cpp's own greedy tokens with the same GGUF adapter on the same GGUF
//     (smollm2_pirate_llamacpp.json: llama.cpp's CPU backend through its C API, Q4_1 x Q8_1 dot
//     products, LoRA unfused); a divergence is accepted only at a recorded near tie (PEFT's top-2
//     gap < 1e-4), as in smollm2_adapters_test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/gguf_quantize.h"
#include "graft/io/safetensors.h"
#include "graft/model/loader.h"
#include "graft/runtime/lora.h"
#include "support/run_util.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {
using test::make_lora_set;

namespace fs = std::filesystem;
using nlohmann::json;
using test::expect_same_greedy;
using test::max_abs_diff;
using test::read_adapter;
using test::read_json;

struct TinyCase {
  const char* file;
  const char* model;
  float logit_tol;
};

class GgufTiny : public ::testing::TestWithParam<TinyCase> {};

TEST_P(GgufTiny, FusedAndUnfusedMatchPeft) {
  const TinyCase c = GetParam();
  const std::string model_dir = test::fixture(std::string("models/") + c.model);
  const std::string ref_dir = test::fixture(std::string("engine_adapters/") + c.model + "/peft_lora");
  const json prompts = read_json(ref_dir + "/reference.json")["prompts"];
  auto ref = io::SafetensorsFile::open(ref_dir + "/reference.safetensors");
  auto a = read_adapter(test::fixture(std::string("gguf_adapters/") + c.file));
  model::LoadedModel base = model::load_model(model_dir);
  auto set = make_lora_set(base.config, *base.source, {{a, 1.0f}});
  model::LoadOptions o;
  o.fused_adapters = {{a, 1.0f}};
  o.weight_dtype = DType::F32;
  model::LoadedModel fused = model::load_model(model_dir, o);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto ids = prompts[p]["ids"].get<std::vector<int32_t>>();
    const Tensor want = ref->tensor("logits_" + std::to_string(p));
    const float du = max_abs_diff(test::prompt_logits(base, set, {1.0f}, ids), want);
    const float df = max_abs_diff(test::prompt_logits(fused, nullptr, {}, ids), want);
    std::printf("%s prompt %zu: max |logit - PEFT| unfused %.3g fused %.3g\n", c.file, p, du, df);
    EXPECT_LE(du, c.logit_tol) << "unfused " << p;
    EXPECT_LE(df, c.logit_tol) << "fused " << p;
    const auto want_ids = prompts[p]["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(test::greedy_ids(base, set, {1.0f}, ids, want_ids.size()), want_ids) << "unfused " << p;
    EXPECT_EQ(test::greedy_ids(fused, nullptr, {}, ids, want_ids.size()), want_ids) << "fused " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Converter, GgufTiny,
                         ::testing::Values(TinyCase{"llama_f32_lora.f32.gguf", "llama_f32", 1e-4f},
                                           TinyCase{"llama_f32_lora.f16.gguf", "llama_f32", 3e-3f},
                                           TinyCase{"llama_f32_lora.bf16.gguf", "llama_f32", 4e-2f},
                                           TinyCase{"llama_f32_lora.q8_0.gguf", "llama_f32", 4e-2f},
                                           TinyCase{"qwen2_f32_lora.f32.gguf", "qwen2_f32", 1e-4f}),
                         [](const auto& info) { return test::param_name_of_file(info.param.file); });

// Fusing into a GGUF block base (the tiny Mixtral quantized to Q8_0 by llama.cpp; the PEFT attention
// LoRA of its F32 twin): each changed matrix is the dense fuse's merged F32 matrix (what fuse_dense
// keeps) quantized to Q8_0 by the reference quantizer (llama-quantize's rounding, byte for byte).
// Both stay nearer the unfused adapter than the base is.
TEST(GgufBlocksBase, FusedMatricesAreRequantizedToTheBaseTypeOrKeptDense) {
  const std::string gguf = test::fixture("models_gguf/mixtral_q8_0.gguf");
  auto a = read_adapter(test::fixture("engine_adapters/mixtral_f32/peft_lora"));
  model::LoadOptions o;
  o.fused_adapters = {{a, 1.0f}};
  model::LoadedModel requantized = model::load_model(gguf, o);
  o.fuse_dense = true;
  model::LoadedModel dense = model::load_model(gguf, o);
  const Tensor& rq = requantized.weights.layers[0].q.dense;
  const Tensor& dq = dense.weights.layers[0].q.dense;
  ASSERT_EQ(rq.dtype, DType::Q8_0);
  ASSERT_EQ(dq.dtype, DType::F32);
  EXPECT_EQ(requantized.fused_formats.at("Q8_0"), static_cast<int64_t>(requantized.fused->updates.size()));
  EXPECT_EQ(dense.fused_formats.at("F32"), static_cast<int64_t>(dense.fused->updates.size()));
  model::LoadedModel base = model::load_model(gguf);
  const Tensor& bq = base.weights.layers[0].q.dense;
  std::vector<uint8_t> want(static_cast<size_t>(rq.nbytes()));
  quantize_gguf_blocks(DType::Q8_0, dq.as<float>(), want.data(), dq.numel());
  EXPECT_EQ(std::memcmp(want.data(), rq.data, want.size()), 0) << "not the reference quantizer's bytes";
  EXPECT_NE(std::memcmp(bq.data, rq.data, want.size()), 0) << "the adapter changed no code";
  auto set = make_lora_set(base.config, *base.source, {{a, 1.0f}});
  const std::vector<int32_t> ids = {5, 17, 42, 99, 7};
  const auto unfused = test::prompt_logits(base, set, {1.0f}, ids), plain = test::prompt_logits(base, nullptr, {}, ids);
  for (model::LoadedModel* fused : {&requantized, &dense}) {
    const auto got = test::prompt_logits(*fused, nullptr, {}, ids);
    double err = 0, effect = 0;
    for (size_t i = 0; i < got.size(); ++i) err += std::abs(got[i] - unfused[i]), effect += std::abs(unfused[i] - plain[i]);
    EXPECT_LT(err, 0.5 * effect) << (fused == &dense ? "dense" : "requantized");
  }
}

TEST(GgufSmolLM2, PiratePeftConvertedByLlamaCppGivesPeftAndLlamaCppTokens) {
  if (!fs::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  const json ref = read_json(test::fixture("smollm2/pirate_peft_reference.json"));
  const json llama_cpp = read_json(test::fixture("gguf_adapters/smollm2_pirate_llamacpp.json"));
  auto a = read_adapter(test::fixture("gguf_adapters/smollm2_pirate.q8_0.gguf"));
  // PEFT's tokens are F32 math on the dequantized base: compare on graft's F32 path (--dtype f32),
  // not on its 8-bit-activation block kernels.
  model::LoadOptions f32;
  f32.weight_dtype = DType::F32;
  model::LoadedModel base = model::load_model(test::smollm2_gguf(), f32);
  model::LoadOptions o = f32;
  o.fused_adapters = {{a, 1.0f}};
  model::LoadedModel fused = model::load_model(test::smollm2_gguf(), o);
  auto set = make_lora_set(base.config, *base.source, {{a, 1.0f}});
  ASSERT_EQ(ref["prompts"].size(), 3u);
  ASSERT_EQ(llama_cpp["prompts"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const json& p = ref["prompts"][i];
    ASSERT_NE(p["greedy"], p["base_greedy"]);
    ASSERT_EQ(llama_cpp["prompts"][i]["ids"], p["ids"]);
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    const auto want = p["greedy"].get<std::vector<int32_t>>();
    const auto want_llama_cpp = llama_cpp["prompts"][i]["greedy"].get<std::vector<int32_t>>();
    const auto gaps = p["top2_gap"].get<std::vector<double>>();
    const auto got_fused = test::greedy_ids(fused, nullptr, {}, ids, want.size());
    const auto got_unfused = test::greedy_ids(base, set, {1.0f}, ids, want.size());
    expect_same_greedy(got_fused, want, gaps, "fused vs PEFT, prompt " + std::to_string(i));
    expect_same_greedy(got_unfused, want, gaps, "unfused vs PEFT, prompt " + std::to_string(i));
    expect_same_greedy(got_fused, want_llama_cpp, gaps, "fused vs llama.cpp, prompt " + std::to_string(i));
    expect_same_greedy(got_unfused, want_llama_cpp, gaps, "unfused vs llama.cpp, prompt " + std::to_string(i));
  }
}

}  // namespace
}  // namespace graft::runtime
