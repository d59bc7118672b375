// The real model with the committed demo adapters (demo/adapters/): SmolLM2-135M-Instruct (Q4_1
// GGUF) and
//   * pirate-peft, trained with PEFT by tools/train_demo_adapter.py: greedy tokens for 3 held-out
//     chat prompts equal PEFT's (transformers loading the same GGUF, F32, adapter unmerged), on the
//     fused and the unfused path, and differ from the base model's;
//   * pirate-mlx, trained with `mlx_lm lora` by tools/train_demo_mlx_adapter.py: greedy tokens equal
//     mlx-lm's generate on the same weights (F32, dequantized from the GGUF).
//   * 4-bit: the GGUF's weights quantized at load (group 64) are the bits mlx_lm.convert -q wrote
//     for the same weights (layer 0 k_proj compared in full), and greedy tokens with and without
//     pirate-mlx (unfused on the quantized base) equal mlx-lm's on its 4-bit model.
// As in smollm2_test, a divergence is accepted only at a recorded near tie (top-two gap < 1e-4).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/adapter/weight_adapter.h"
#include "graft/io/safetensors.h"
#include "runtime/run_util.h"
#include "graft/model/loader.h"
#include "graft/engine/generate.h"
#include "graft/runtime/lora.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {

using engine::generate;
using engine::GenerateOptions;
using engine::GenerateResult;

namespace fs = std::filesystem;

void expect_greedy(const model::LoadedModel& m, std::shared_ptr<const LoraSet> set, std::vector<float> scales,
                   const nlohmann::json& p, const char* greedy_key, const char* gap_key, const std::string& what) {
  const auto ids = p["ids"].get<std::vector<int32_t>>();
  const auto expect = p[greedy_key].get<std::vector<int32_t>>();
  const auto gaps = p[gap_key].get<std::vector<double>>();
  ThreadPool pool(2);
  Transformer t(m.config, m.weights, std::move(set));
  KVCache cache(m.config, 512, test::kReferenceCache);
  GenerateOptions g;
  g.max_tokens = static_cast<int64_t>(expect.size());
  g.sampling.temperature = 0;
  g.lora_scales = scales;
  const GenerateResult r = generate(pool, t, m.tokenizer, cache, ids, g);
  ASSERT_EQ(r.tokens.size(), expect.size()) << what;
  for (size_t i = 0; i < expect.size(); ++i) {
    if (r.tokens[i] == expect[i]) continue;
    EXPECT_LT(gaps[i], 1e-4) << what << ": diverged at step " << i << " (got " << r.tokens[i] << ", expected "
                             << expect[i] << ") where the reference's top-2 gap is " << gaps[i];
    break;
  }
}

// The references are F32 math on the dequantized GGUF (PEFT, mlx-lm): compare on graft's exact
// F32 path (blocks dequantized at load, as `--dtype f32`), not on its 8-bit-activation kernels.
model::LoadOptions f32_options() {
  model::LoadOptions o;
  o.weight_dtype = DType::F32;
  return o;
}

nlohmann::json load(const std::string& fixture) {
  std::ifstream in(test::fixture(fixture));
  if (!in) throw std::runtime_error("missing fixture " + fixture);
  return nlohmann::json::parse(in);
}

TEST(SmolLM2Adapters, PeftPirateMatchesPeftFusedAndUnfused) {
  if (!fs::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  const auto ref = load("smollm2/pirate_peft_reference.json");
  auto adapter = std::make_shared<const adapter::WeightAdapter>(
      adapter::read_weight_adapter(test::source_dir() + "/demo/adapters/pirate-peft"));
  model::LoadedModel base = model::load_model(test::smollm2_gguf(), f32_options());
  model::LoadOptions o = f32_options();
  o.fused_adapters = {{adapter, 1.0f}};
  model::LoadedModel fused = model::load_model(test::smollm2_gguf(), o);
  auto set = make_lora_set(base.config, *base.source, {{adapter, 1.0f}});
  ASSERT_EQ(ref["prompts"].size(), 3u);
  for (const auto& p : ref["prompts"]) {
    ASSERT_NE(p["greedy"], p["base_greedy"]) << "the reference adapter changes nothing";
    expect_greedy(fused, nullptr, {}, p, "greedy", "top2_gap", "fused");
    expect_greedy(base, set, {1.0f}, p, "greedy", "top2_gap", "unfused");
  }
}

TEST(SmolLM2Adapters, MlxPirateMatchesMlxLmGenerate) {
  if (!fs::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  const auto ref = load("smollm2/pirate_mlx_reference.json");
  auto adapter = std::make_shared<const adapter::WeightAdapter>(
      adapter::read_weight_adapter(test::source_dir() + "/demo/adapters/pirate-mlx"));
  model::LoadedModel base = model::load_model(test::smollm2_gguf(), f32_options());
  auto set = make_lora_set(base.config, *base.source, {{adapter, 1.0f}});
  model::LoadOptions o = f32_options();
  o.fused_adapters = {{adapter, 1.0f}};
  model::LoadedModel fused = model::load_model(test::smollm2_gguf(), o);
  ASSERT_EQ(ref["prompts"].size(), 3u);
  for (const auto& p : ref["prompts"]) {
    expect_greedy(base, set, {1.0f}, p, "greedy", "top2_gap", "unfused");
    expect_greedy(fused, nullptr, {}, p, "greedy", "top2_gap", "fused");
  }
}

TEST(SmolLM2Adapters, FourBitQuantizationAndMlxAdapterMatchMlxLm) {
  if (!fs::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  const auto ref = load("smollm2/mlx_q4_reference.json");
  model::LoadOptions o = f32_options();
  o.quantize = model::QuantSpec{4, 64};
  model::LoadedModel m = model::load_model(test::smollm2_gguf(), o);
  // The same codes, scales and biases as mlx (F32 scales: the weights were F32).
  auto mlx = io::SafetensorsFile::open(test::fixture("smollm2/mlx_q4_layer0_k_proj.safetensors"));
  const AffineQuantized& k = m.weights.layers[0].k.quant;
  ASSERT_TRUE(m.weights.layers[0].k.quantized());
  auto same = [](const Tensor& a, const Tensor& b) {
    return a.dtype == b.dtype && a.shape == b.shape && std::memcmp(a.data, b.data, static_cast<size_t>(a.nbytes())) == 0;
  };
  EXPECT_TRUE(same(k.packed, mlx->tensor("model.layers.0.self_attn.k_proj.weight")));
  EXPECT_TRUE(same(k.scales, mlx->tensor("model.layers.0.self_attn.k_proj.scales")));
  EXPECT_TRUE(same(k.biases, mlx->tensor("model.layers.0.self_attn.k_proj.biases")));
  EXPECT_TRUE(m.weights.embed.quantized());

  auto adapter = std::make_shared<const adapter::WeightAdapter>(
      adapter::read_weight_adapter(test::source_dir() + "/demo/adapters/pirate-mlx"));
  auto set = make_lora_set(m.config, *m.source, {{adapter, 1.0f}});
  ASSERT_EQ(ref["prompts"].size(), 3u);
  for (const auto& p : ref["prompts"]) {
    const auto ids = p["ids"].get<std::vector<int32_t>>();
    const auto base = p["q4_greedy"].get<std::vector<int32_t>>(), lora = p["q4_adapter_greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(test::greedy_ids(m, nullptr, {}, ids, base.size()), base) << "4-bit base, min gap " << p["q4_min_top2_gap"];
    EXPECT_EQ(test::greedy_ids(m, set, {1.0f}, ids, lora.size()), lora)
        << "4-bit + pirate-mlx, min gap " << p["q4_adapter_min_top2_gap"];
  }
}

}  // namespace
}  // namespace graft::runtime
