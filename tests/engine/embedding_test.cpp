// Embeddings: the forward pass's hidden states (SequenceInput::hidden) against transformers, on the
// tiny checkpoints of every family (tests/fixtures/models/*/reference_hidden.safetensors, written
// by tools/gen_model_fixtures.py: output_hidden_states' last entry, after the final norm); the
// same rows through the engine's step when the prompt is chunked and shares its passes with a
// generation; pooling and normalization against hand-computed values.
//
// Tolerances: 1e-4 absolute against transformers, as for the logits (reference_models_test.cpp):
// both sides compute in F32 (BF16 checkpoints: transformers on the BF16 weights upcast, graft's
// arithmetic) and only summation order differs; the hidden states are RMS-normalized (|x| ~ 1),
// so the difference is small: measured at most 7.3e-6 over the 27 prompts. Chunked or batched
// against one pass: 1e-5 (the same arithmetic on
// differently shaped matrices).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/core/error.h"
#include "graft/engine/embedding.h"
#include "graft/engine/step.h"
#include "graft/io/safetensors.h"
#include "graft/model/loader.h"
#include "graft/runtime/transformer.h"
#include "test_paths.h"

namespace graft::engine {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const char* kModels[] = {"llama_f32",  "llama_bf16",  "llama3rope_f32", "mistral_f32", "mistral_bf16",
                         "qwen2_f32",  "qwen2_bf16",  "qwen3_f32",      "qwen3_bf16"};

class HiddenReference : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    dir_ = test::fixture(std::string("models/") + GetParam());
    if (!fs::exists(dir_ + "/reference_hidden.safetensors")) GTEST_FAIL() << "missing fixture " << dir_;
    std::ifstream in(dir_ + "/reference.json");
    ref_ = json::parse(in);
    model_ = std::make_unique<model::LoadedModel>(model::load_model(dir_));
    hidden_ = io::SafetensorsFile::open(dir_ + "/reference_hidden.safetensors");
  }
  std::vector<int32_t> ids(size_t p) const { return ref_["prompts"][p]["ids"].get<std::vector<int32_t>>(); }
  // One pass over the prompt with an F32 cache: its hidden rows.
  std::vector<float> one_pass(ThreadPool& pool, const std::vector<int32_t>& prompt) const {
    runtime::Transformer t(model_->config, model_->weights);
    runtime::KVCache cache(model_->config, 256, DType::F32);
    std::vector<float> rows;
    runtime::SequenceInput in;
    in.cache = &cache;
    in.tokens = prompt;
    in.hidden = &rows;
    const std::vector<float> logits = t.forward(pool, std::span(&in, 1));
    EXPECT_TRUE(logits.empty()) << "a hidden-state sequence gets no logits row";
    EXPECT_EQ(cache.size(), static_cast<int64_t>(prompt.size()));
    return rows;
  }
  std::string dir_;
  json ref_;
  std::unique_ptr<model::LoadedModel> model_;
  std::shared_ptr<io::SafetensorsFile> hidden_;
};

TEST_P(HiddenReference, HiddenStatesMatchTransformers) {
  ThreadPool pool(2);
  const int64_t H = model_->config.hidden_size;
  for (size_t p = 0; p < ref_["prompts"].size(); ++p) {
    const std::vector<int32_t> prompt = ids(p);
    const std::vector<float> rows = one_pass(pool, prompt);
    const Tensor ref = hidden_->tensor("hidden_" + std::to_string(p));
    ASSERT_EQ(ref.shape, (std::vector<int64_t>{static_cast<int64_t>(prompt.size()), H}));
    ASSERT_EQ(static_cast<int64_t>(rows.size()), ref.numel());
    float worst = 0;
    for (size_t i = 0; i < rows.size(); ++i) worst = std::max(worst, std::abs(rows[i] - ref.as<float>()[i]));
    EXPECT_LE(worst, 1e-4f) << GetParam() << " prompt " << p;
    // Pooled the way the server pools, against the same pooling of the reference rows.
    const std::span<const float> want(ref.as<float>(), static_cast<size_t>(ref.numel()));
    for (Pooling pl : {Pooling::Mean, Pooling::Cls, Pooling::Last}) {
      const std::vector<float> a = pool_rows(rows, H, pl), b = pool_rows(want, H, pl);
      ASSERT_EQ(a.size(), static_cast<size_t>(H));
      for (int64_t c = 0; c < H; ++c) EXPECT_NEAR(a[c], b[c], 1e-4f) << pooling_name(pl) << " column " << c;
    }
  }
}

TEST_P(HiddenReference, ChunkedPromptSharingStepsWithAGenerationGivesTheSameRows) {
  // The long prompt as an embedding, 5 tokens a step, while prompt 0 is decoded greedily in the
  // same passes: the rows equal one pass's, and the generation still matches transformers.
  ThreadPool pool(2);
  runtime::Transformer t(model_->config, model_->weights);
  const std::vector<int32_t> long_prompt = ids(1);
  runtime::KVCache ce(model_->config, static_cast<int64_t>(long_prompt.size()), DType::F32);
  runtime::KVCache cg(model_->config, 256, DType::F32);
  SequenceParams ep;
  ep.embedding = true;
  ep.max_tokens = 0;
  Sequence emb(model_->tokenizer, ce, long_prompt, ep);  // fills its context exactly: allowed
  SequenceParams gp;
  gp.max_tokens = 16;
  gp.sampling.temperature = 0;
  Sequence gen(model_->tokenizer, cg, ids(0), gp);
  Sequence* seqs[] = {&gen, &emb};
  int steps = 0;
  while ((!emb.finished() || !gen.finished()) && steps < 100) {
    run_step(pool, t, seqs, 6);  // decode row first, then 5 prompt tokens
    ++steps;
  }
  ASSERT_TRUE(emb.finished() && gen.finished());
  EXPECT_GE(steps, static_cast<int>(long_prompt.size() / 5));
  EXPECT_TRUE(emb.generated().empty());
  EXPECT_EQ(gen.generated(), ref_["prompts"][0]["greedy"].get<std::vector<int32_t>>());
  const std::vector<float> alone = one_pass(pool, long_prompt);
  ASSERT_EQ(emb.hidden_rows().size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) ASSERT_NEAR(emb.hidden_rows()[i], alone[i], 1e-5f) << "value " << i;
}

INSTANTIATE_TEST_SUITE_P(Families, HiddenReference, ::testing::ValuesIn(kModels),
                         [](const auto& info) { return std::string(info.param); });

TEST(Embedding, PoolingByHand) {
  const std::vector<float> rows = {1, 2, 3, 4, 5, 7};  // 3 tokens, dim 2
  EXPECT_EQ(pool_rows(rows, 2, Pooling::Cls), (std::vector<float>{1, 2}));
  EXPECT_EQ(pool_rows(rows, 2, Pooling::Last), (std::vector<float>{5, 7}));
  EXPECT_EQ(pool_rows(rows, 2, Pooling::None), rows);
  const std::vector<float> mean = pool_rows(rows, 2, Pooling::Mean);
  EXPECT_FLOAT_EQ(mean[0], 3.0f);
  EXPECT_FLOAT_EQ(mean[1], 13.0f / 3.0f);
  EXPECT_THROW(pool_rows(rows, 4, Pooling::Mean), Error);  // not whole rows
}

TEST(Embedding, NormalizationFollowsLlamaCpp) {
  auto norm = [](std::vector<float> v, int mode) {
    normalize_embedding(v, mode);
    return v;
  };
  const std::vector<float> v = {3, -4};
  EXPECT_EQ(norm(v, -1), v);
  const auto l2 = norm(v, 2);
  EXPECT_FLOAT_EQ(l2[0], 0.6f);
  EXPECT_FLOAT_EQ(l2[1], -0.8f);
  const auto l1 = norm(v, 1);
  EXPECT_FLOAT_EQ(l1[0], 3.0f / 7.0f);
  EXPECT_FLOAT_EQ(l1[1], -4.0f / 7.0f);
  const auto i16 = norm(v, 0);  // the largest |x| becomes 32760
  EXPECT_FLOAT_EQ(i16[0], 3.0f * 32760.0f / 4.0f);
  EXPECT_FLOAT_EQ(i16[1], -32760.0f);
  const auto p3 = norm(v, 3);
  const float n3 = static_cast<float>(std::cbrt(27.0 + 64.0));
  EXPECT_NEAR(p3[0], 3.0f / n3, 1e-6f);
  EXPECT_NEAR(p3[1], -4.0f / n3, 1e-6f);
  EXPECT_EQ(norm({0, 0}, 2), (std::vector<float>{0, 0}));  // a zero vector stays zero
  EXPECT_THROW(norm(v, -2), Error);
}

TEST(Embedding, PoolingNamesAndModelDefault) {
  EXPECT_EQ(parse_pooling("mean"), Pooling::Mean);
  EXPECT_EQ(parse_pooling("last"), Pooling::Last);
  EXPECT_EQ(parse_pooling("rank"), std::nullopt);
  model::ModelConfig c;
  EXPECT_EQ(default_pooling(c), Pooling::Last);  // a decoder without a declared pooling
  c.pooling_type = 1;
  EXPECT_EQ(default_pooling(c), Pooling::Mean);
  c.pooling_type = 2;
  EXPECT_EQ(default_pooling(c), Pooling::Cls);
  c.pooling_type = 0;
  EXPECT_EQ(default_pooling(c), Pooling::None);
  c.pooling_type = 4;
  EXPECT_THROW(default_pooling(c), Error);  // rank: a reranker
}

}  // namespace
}  // namespace graft::engine
