// Adapters in the engine against the real tools: PEFT (unmerged forward, or merge_and_unload where
// that is graft's semantics) and mlx-lm, on the tiny checkpoints of every family, both load paths.
// Fixtures: tools/gen_engine_adapter_fixtures.py (tests/fixtures/engine_adapters/README.md).
//
// Tolerance: max |logit - reference| <= 1e-4, as for the base models (reference_models_test):
// both sides compute in F32 and differ only in summation order; the generator measured 5e-6..2e-5
// between its references and an independent float64 merge. BF16 bases are compared with the
// BF16 checkpoint upcast to F32 (graft keeps BF16 weights and computes in F32; the unfused term
// is F32). The fused path is checked merging into F32 (LoadOptions::weight_dtype), since fusing
// into BF16 storage rounds W + ΔW to BF16 and moves these logits by 0.04-0.1 (measured by the
// generator): correct behaviour of "fused weights keep the base dtype", not a reference match.
// Greedy continuations (16 tokens, the generator chose seeds with top-1/top-2 gaps >= 0.02) must
// be identical on the unfused path.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/error.h"
#include "graft/io/safetensors.h"
#include "graft/model/loader.h"
#include "graft/runtime/lora.h"
#include "graft/runtime/transformer.h"
#include "support/run_util.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {
using test::make_lora_set;

using nlohmann::json;

using test::greedy_ids;
using test::max_abs_diff;
using test::prompt_logits;
using test::read_adapter;
using test::read_json;

constexpr float kTol = 1e-4f;

// Checks one adapter set (adapters with user scales) on both paths against `logits_<i>`.
void check_against_reference(const std::string& model_dir, const std::vector<adapter::AdapterUse>& uses,
                             const std::string& reference_file, const json& prompts, bool check_greedy) {
  model::LoadedModel base = model::load_model(model_dir);
  auto set = make_lora_set(base.config, *base.source, uses);
  std::vector<float> scales;
  for (const auto& u : uses) scales.push_back(u.strength);
  model::LoadOptions o;
  o.fused_adapters = uses;
  o.weight_dtype = DType::F32;
  model::LoadedModel fused = model::load_model(model_dir, o);
  auto ref = io::SafetensorsFile::open(reference_file);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto ids = prompts[p]["ids"].get<std::vector<int32_t>>();
    const Tensor want = ref->tensor("logits_" + std::to_string(p));
    EXPECT_LE(max_abs_diff(prompt_logits(base, set, scales, ids), want), kTol) << reference_file << " unfused, prompt " << p;
    EXPECT_LE(max_abs_diff(prompt_logits(fused, nullptr, {}, ids), want), kTol) << reference_file << " fused, prompt " << p;
    if (check_greedy && prompts[p].contains("greedy")) {
      const auto want_ids = prompts[p]["greedy"].get<std::vector<int32_t>>();
      EXPECT_EQ(greedy_ids(base, set, scales, ids, want_ids.size()), want_ids) << reference_file << " prompt " << p;
    }
  }
}

const char* kModels[] = {"llama_f32",  "llama_bf16",  "llama3rope_f32", "mistral_f32", "mistral_bf16",
                         "qwen2_f32",  "qwen2_bf16",  "qwen3_f32",      "qwen3_bf16",  "gemma2_f32",
                         "gemma3_f32", "phi3_f32"};

class PeftLoraReference : public ::testing::TestWithParam<const char*> {};

TEST_P(PeftLoraReference, FusedAndUnfusedMatchPeft) {
  const std::string dir = test::fixture(std::string("engine_adapters/") + GetParam() + "/peft_lora");
  const json ref = read_json(dir + "/reference.json");
  check_against_reference(test::fixture(std::string("models/") + GetParam()), {{read_adapter(dir), 1.0f}},
                          dir + "/reference.safetensors", ref["prompts"], true);
}

INSTANTIATE_TEST_SUITE_P(Families, PeftLoraReference, ::testing::ValuesIn(kModels));

// mlx-lm's own LoRA (tools/gen_mlx_lora_fixtures.py: linear_to_lora_layers over every layer with
// the default keys, lora_b perturbed) on the non-Llama families, against transformers' forward of
// the weights mlx-lm's own fuse writes: the adapter's meaning is mlx-lm's (mlx-lm 0.32's forward is
// no reference for these checkpoints: it has no sliding window for gemma2 / phi3, and its
// gemma3_text fails on 3 layers). phi3: mlx-lm names the fused qkv_proj / gate_up_proj, split by
// rows through the binding table.
class MlxLoraReference : public ::testing::TestWithParam<const char*> {};

TEST_P(MlxLoraReference, FusedAndUnfusedMatchMlxLm) {
  const std::string dir = test::fixture(std::string("engine_adapters/") + GetParam() + "/mlx_lora");
  const json ref = read_json(dir + "/reference.json");
  check_against_reference(test::fixture(std::string("models/") + GetParam()), {{read_adapter(dir), 1.0f}},
                          dir + "/reference.safetensors", ref["prompts"], false);
}

INSTANTIATE_TEST_SUITE_P(Families, MlxLoraReference, ::testing::Values("gemma2_f32", "gemma3_f32", "phi3_f32"));

class TwoAdaptersReference : public ::testing::TestWithParam<const char*> {};

TEST_P(TwoAdaptersReference, WeightedSumMatchesPeft) {
  const std::string root = test::fixture(std::string("engine_adapters/") + GetParam());
  const json ref = read_json(root + "/two_adapters.json");
  check_against_reference(test::fixture(std::string("models/") + GetParam()),
                          {{read_adapter(root + "/peft_lora"), 0.7f}, {read_adapter(root + "/peft_lora_b"), -1.3f}},
                          root + "/two_adapters.safetensors", ref["prompts"], true);
}

INSTANTIATE_TEST_SUITE_P(Models, TwoAdaptersReference, ::testing::Values("llama_f32", "qwen2_bf16"));

struct EmbedCase {
  const char* fixture;
  const char* model;
};

class EmbedReference : public ::testing::TestWithParam<EmbedCase> {};

// PEFT lora_embedding and mlx-lm LoRAEmbedding pairs (on tied checkpoints the head changes too:
// PEFT merge_and_unload of the shared weight, mlx-lm's as_linear), and an lm_head pair on an
// untied checkpoint.
TEST_P(EmbedReference, MatchesTheTool) {
  const std::string dir = test::fixture(std::string("engine_adapters/embed/") + GetParam().fixture);
  const json ref = read_json(dir + "/reference.json");
  check_against_reference(test::fixture(std::string("models/") + GetParam().model), {{read_adapter(dir), 1.0f}},
                          dir + "/reference.safetensors", ref["prompts"], false);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EmbedReference,
                         ::testing::Values(EmbedCase{"peft_embed_llama_f32", "llama_f32"},
                                           EmbedCase{"peft_embed_qwen2_f32", "qwen2_f32"},
                                           EmbedCase{"peft_embed_qwen3_bf16", "qwen3_bf16"},
                                           EmbedCase{"mlx_embed_llama_f32", "llama_f32"},
                                           EmbedCase{"mlx_embed_qwen2_f32", "qwen2_f32"},
                                           EmbedCase{"peft_lm_head_llama_f32", "llama_f32"}),
                         [](const auto& info) { return std::string(info.param.fixture); });

TEST(EmbedReference, LmHeadPairOnTiedCheckpointIsRefusedOnBothPaths) {
  const std::string model_dir = test::fixture("models/qwen2_f32");
  auto a = read_adapter(test::fixture("engine_adapters/embed/peft_lm_head_qwen2_f32"));
  model::LoadedModel base = model::load_model(model_dir);
  for (bool fused : {true, false}) {
    try {
      if (fused) {
        model::LoadOptions o;
        o.fused_adapters = {{a, 1.0f}};
        model::load_model(model_dir, o);
      } else {
        make_lora_set(base.config, *base.source, {{a, 1.0f}});
      }
      ADD_FAILURE() << "lm_head pair on a tied checkpoint was accepted (" << (fused ? "fused" : "unfused") << ")";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("base_model.model.lm_head"), std::string::npos) << m;
      EXPECT_NE(m.find("ties lm_head to embed_tokens"), std::string::npos) << m;
      EXPECT_NE(m.find("no weight was changed"), std::string::npos) << m;
    }
  }
}

}  // namespace
}  // namespace graft::runtime
