// Graft's forward pass against transformers on tiny random-weight checkpoints of every supported
// family (fixtures written by tools/gen_model_fixtures.py with torch + transformers).
//
// Tolerances:
// - F32 checkpoints: max |logit difference| <= 1e-4. Both sides compute in F32; only the summation
//   order differs (k <= 128 terms of magnitude ~1), which moves logits by ~1e-6.
// - BF16 checkpoints: graft keeps BF16 weights and computes in F32, which is exactly transformers
//   with the same BF16 weights upcast to F32 ("logits_i", 1e-4 as above). transformers' native
//   BF16 run ("logits_bf16_i") rounds every activation to BF16 (8 significant bits, relative error
//   2^-9 per op, compounding over ~20 ops per layer), so there we only require max difference
//   <= 0.1 * (logit range): a sanity check that the BF16 path is the same model, not a precision claim.
// - The comparisons with transformers pin the F32 KV cache: graft's default F16 cache alone moves
//   these logits by up to ~1e-2 (test::kReferenceCache in tests/support/run_util.h says why). The
//   batch test keeps the default (F16) cache: batching must not change a sequence's bits there either.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/io/safetensors.h"
#include "graft/model/loader.h"
#include "graft/engine/generate.h"
#include "graft/runtime/transformer.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {

using engine::generate;
using engine::GenerateOptions;
using engine::GenerateResult;

namespace fs = std::filesystem;
using nlohmann::json;

const char* kModels[] = {"llama_f32",  "llama_bf16",  "llama3rope_f32", "mistral_f32", "mistral_bf16",
                         "qwen2_f32",  "qwen2_bf16",  "qwen3_f32",      "qwen3_bf16",  "gemma2_f32",
                         "gemma3_f32", "phi3_f32",    "qwen3_moe_f32",  "mixtral_f32"};

class ReferenceModel : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = test::fixture(std::string("models/") + GetParam());
    if (!fs::exists(dir_ + "/reference.json")) GTEST_FAIL() << "missing fixture " << dir_;
    std::ifstream in(dir_ + "/reference.json");
    ref_ = json::parse(in);
    model_ = std::make_unique<model::LoadedModel>(model::load_model(dir_));
    logits_ = io::SafetensorsFile::open(dir_ + "/reference.safetensors");
  }
  std::string dir_;
  json ref_;
  std::unique_ptr<model::LoadedModel> model_;
  std::shared_ptr<io::SafetensorsFile> logits_;
};

float max_abs_diff(const std::vector<float>& a, const Tensor& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b.as<float>()[i]));
  return m;
}

TEST_P(ReferenceModel, PromptLogitsMatchTransformers) {
  ThreadPool pool(2);
  Transformer t(model_->config, model_->weights);
  const auto& prompts = ref_["prompts"];
  ASSERT_GE(prompts.size(), 3u);
  for (size_t p = 0; p < prompts.size(); ++p) {
    std::vector<int32_t> ids = prompts[p]["ids"].get<std::vector<int32_t>>();
    // The tokenizer must produce the same ids transformers used.
    EXPECT_EQ(model_->tokenizer.encode(prompts[p]["text"].get<std::string>()), ids) << "prompt " << p;
    KVCache cache(model_->config, 256, DType::F32);
    SequenceInput in{&cache, ids, true, {}};
    std::vector<float> logits = t.forward(pool, std::span(&in, 1));
    Tensor ref = logits_->tensor("logits_" + std::to_string(p));
    ASSERT_EQ(static_cast<int64_t>(logits.size()), ref.numel());
    EXPECT_LE(max_abs_diff(logits, ref), 1e-4f) << GetParam() << " prompt " << p;
    if (const auto* native = logits_->find("logits_bf16_" + std::to_string(p))) {
      Tensor nb = logits_->tensor(native->name);
      float lo = 1e30f, hi = -1e30f;
      for (float v : logits) lo = std::min(lo, v), hi = std::max(hi, v);
      EXPECT_LE(max_abs_diff(logits, nb), 0.1f * (hi - lo)) << GetParam() << " prompt " << p << " vs native BF16";
    }
  }
}

TEST_P(ReferenceModel, GreedyContinuationMatchesTransformers) {
  ThreadPool pool(2);
  Transformer t(model_->config, model_->weights);
  for (const auto& p : ref_["prompts"]) {
    std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> expect = p["greedy"].get<std::vector<int32_t>>();
    KVCache cache(model_->config, 256, DType::F32);
    GenerateOptions g;
    g.max_tokens = static_cast<int64_t>(expect.size());
    g.sampling.temperature = 0;
    GenerateResult r = generate(pool, t, model_->tokenizer, cache, ids, g);
    EXPECT_EQ(r.tokens, expect) << GetParam() << ": " << p["text"];
  }
}

TEST_P(ReferenceModel, BatchedSequencesEqualSeparateRuns) {
  // Two prompts decoded together in one batch give the same logits as each alone.
  ThreadPool pool(2);
  Transformer t(model_->config, model_->weights);
  const auto& prompts = ref_["prompts"];
  std::vector<int32_t> a = prompts[0]["ids"].get<std::vector<int32_t>>();
  std::vector<int32_t> b = prompts[1]["ids"].get<std::vector<int32_t>>();
  KVCache ca(model_->config, 256), cb(model_->config, 256), cab_a(model_->config, 256), cab_b(model_->config, 256);
  SequenceInput ia{&ca, a, false, {}}, ib{&cb, b, false, {}};
  std::vector<float> la = t.forward(pool, std::span(&ia, 1));
  std::vector<float> lb = t.forward(pool, std::span(&ib, 1));
  SequenceInput both[2] = {{&cab_a, a, false, {}}, {&cab_b, b, false, {}}};
  std::vector<float> lab = t.forward(pool, both);
  const size_t V = la.size();
  ASSERT_EQ(lab.size(), 2 * V);
  for (size_t i = 0; i < V; ++i) {
    ASSERT_NEAR(lab[i], la[i], 1e-5f);
    ASSERT_NEAR(lab[V + i], lb[i], 1e-5f);
  }
}

// Gemma from GGUF: the tiny checkpoints converted by llama.cpp's convert_hf_to_gguf.py (norms
// stored as 1 + w, llama.cpp's tensor names and metadata keys) against transformers' logits for the
// same weights with query_pre_attn_scalar = head_dim, llama.cpp's rule for files that carry none,
// and (Gemma 3) every 6th layer global, the layer pattern llama.cpp assumes
// (tools/gen_family_gguf_fixtures.py). Same 1e-4 tolerance as above (F32 both sides).
TEST(ReferenceModelGemma, GgufMatchesTransformers) {
  ThreadPool pool(2);
  for (const char* m : {"gemma2_f32", "gemma3_f32"}) {
    const std::string gguf = test::fixture(std::string("models_gguf/") + m + ".gguf");
    model::LoadedModel lm = model::load_model(gguf);
    EXPECT_EQ(lm.format, "gguf");
    std::ifstream in(test::fixture(std::string("models/") + m + "/reference.json"));
    const json ref = json::parse(in);
    auto logits = io::SafetensorsFile::open(test::fixture(std::string("models_gguf/") + m + ".reference.safetensors"));
    Transformer t(lm.config, lm.weights);
    for (size_t p = 0; p < ref["prompts"].size(); ++p) {
      std::vector<int32_t> ids = ref["prompts"][p]["ids"].get<std::vector<int32_t>>();
      KVCache cache(lm.config, 256, DType::F32);
      SequenceInput sin{&cache, ids, true, {}};
      std::vector<float> out = t.forward(pool, std::span(&sin, 1));
      EXPECT_LE(max_abs_diff(out, logits->tensor("logits_" + std::to_string(p))), 1e-4f) << m << " prompt " << p;
    }
  }
}

// The Gemma fixtures ship transformers 5's separate chat_template.jinja (Gemma's turn markup).
TEST(ReferenceModelGemma, ChatTemplateComesFromChatTemplateJinja) {
  for (const char* m : {"gemma2_f32", "gemma3_f32"}) {
    model::LoadedModel lm = model::load_model(test::fixture(std::string("models/") + m));
    ASSERT_TRUE(lm.chat_template.has_value()) << m;
    EXPECT_NE(lm.chat_template->find("<start_of_turn>"), std::string::npos) << m;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, ReferenceModel, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace graft::runtime
