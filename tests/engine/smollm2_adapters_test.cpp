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

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/adapter/weight_adapter.h"
#include "graft/io/safetensors.h"
#include "support/run_util.h"
#include "graft/model/loader.h"
#include "graft/engine/generate.h"
#include "graft/runtime/lora.h"
#include "graft/runtime/kernels.h"
#include "graft/compute/weight.h"
#include "test_paths.h"

namespace graft::engine {
namespace {
using test::LoraSet;
using test::make_lora_set;

namespace fs = std::filesystem;

void expect_greedy(const model::LoadedModel& m, std::shared_ptr<const LoraSet> set, std::vector<float> scales,
                   const nlohmann::json& p, const char* greedy_key, const char* gap_key, const std::string& what) {
  const auto ids = p["ids"].get<std::vector<int32_t>>();
  const auto expect = p[greedy_key].get<std::vector<int32_t>>();
  const auto gaps = p[gap_key].get<std::vector<double>>();
  ThreadPool pool(2);
  runtime::Transformer t(m.config, m.weights);
  runtime::KVCache cache(m.config, 512, test::kReferenceCache);
  GenerateOptions g;
  g.max_tokens = static_cast<int64_t>(expect.size());
  g.sampling.temperature = 0;
  g.adapters = test::scaled(set, scales);
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

// The default path on CPUs with an integer kernel (what `graft generate` runs on an mlx 4-bit or
// 8-bit SmolLM2): the affine matrices interleaved and multiplied with 8-bit activations. Expected:
// mlx-lm's 4-bit greedy tokens (q4_greedy), and for 8-bit graft's F32 path on the same codes (the
// F32 path equals mlx-lm's arithmetic to 1e-4: quantized_test). As for the Q4_1 blocks
// (smollm2_test's Q8KernelsStayNearTheF32Path, bound 4), this model's activation outliers make the
// int8 rounding move logits by up to a few units: measured max |Δlogit| against the F32 path over the
// prompts 2.31 (4-bit) / 1.77 (8-bit), bound 4. A greedy divergence is accepted only where the F32
// path's top two are within 1.0 at that step (measured: 4-bit diverges at steps 4 and 13 of two
// prompts at gaps 0.233 and 0.155, the third equal for 32 steps; 8-bit at step 22 of one prompt at
// gap 0.383, two equal for 32 steps): a near tie for a path whose logits move by ±2.
TEST(SmolLM2Adapters, InterleavedAffineGreedyStaysNearMlxLm) {
  if (!fs::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  if (!compute::interleave_enabled_affine()) GTEST_SKIP() << "no interleaved integer kernel on this CPU (or GRAFT_Q8_INTERLEAVE=0)";
  constexpr double kMaxAbs = 4.0, kNearTie = 1.0;
  const auto ref = load("smollm2/mlx_q4_reference.json");
  for (int bits : {4, 8}) {
    model::LoadOptions o = f32_options();
    o.quantize = model::QuantSpec{bits, 64};
    const model::LoadedModel exact = model::load_model(test::smollm2_gguf(), o);
    model::LoadedModel fast = model::load_model(test::smollm2_gguf(), o);
    ThreadPool prep(2);
    ASSERT_GT(runtime::prepare_weights(fast.weights, prep), 0);
    const int64_t V = exact.config.vocab_size;
    for (const auto& p : ref["prompts"]) {
      const auto ids = p["ids"].get<std::vector<int32_t>>();
      const auto a = test::prompt_logits(exact, nullptr, {}, ids), b = test::prompt_logits(fast, nullptr, {}, ids);
      double worst = 0;
      for (size_t j = 0; j < a.size(); ++j) worst = std::max(worst, std::fabs(static_cast<double>(a[j]) - b[j]));
      EXPECT_LE(worst, kMaxAbs) << bits << "-bit";
      EXPECT_GT(worst, 0.0) << bits << "-bit: the interleaved path is not a different computation";
      const auto want = bits == 4 ? p["q4_greedy"].get<std::vector<int32_t>>() : test::greedy_ids(exact, nullptr, {}, ids, 32);
      const auto got = test::greedy_ids(fast, nullptr, {}, ids, want.size());
      size_t i = 0;
      while (i < want.size() && got[i] == want[i]) ++i;
      if (i == want.size()) continue;
      std::vector<int32_t> prefix = ids;  // the F32 path's logits at the diverging step
      prefix.insert(prefix.end(), want.begin(), want.begin() + static_cast<std::ptrdiff_t>(i));
      const auto lg = test::prompt_logits(exact, nullptr, {}, prefix);
      std::vector<float> last(lg.end() - V, lg.end());
      std::partial_sort(last.begin(), last.begin() + 2, last.end(), std::greater<float>());
      std::printf("%d-bit interleaved: diverged at step %zu, F32-path top-2 gap %g\n", bits, i, last[0] - last[1]);
      EXPECT_LT(last[0] - last[1], kNearTie) << bits << "-bit: diverged at step " << i;
    }
  }
}

}  // namespace
}  // namespace graft::engine
