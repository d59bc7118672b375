// The embedding / output-head rules on every load path (fused at load, unfused terms), for tied and
// untied checkpoints of every family:
//   * embed_tokens pair: allowed; on a tied checkpoint it changes the head too, on both paths;
//   * lm_head pair: allowed on untied checkpoints, refused on tied ones (both paths);
//   * embed_tokens pair on a tied checkpoint of a family whose head is not the embedding read as a
//     linear layer: refused (no shipped family is such; checked with made-up traits).
// Adapters are built in memory (the file formats are the importers' tests).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/error.h"
#include "graft/io/safetensors.h"
#include "graft/model/loader.h"
#include "graft/model/model_adapters.h"
#include "graft/runtime/lora.h"
#include "graft/runtime/transformer.h"
#include "support/run_util.h"
#include "test_paths.h"
#include "support/errors.h"

namespace graft::runtime {
namespace {
using test::LoraSet;
using test::make_lora_set;

Tensor pattern(const Shape& shape, float amp, int seed) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = amp * std::sin(0.37f * static_cast<float>(i) + static_cast<float>(seed));
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return Tensor::owned(DType::F32, shape, std::move(bytes));
}

// A rank-4 pair on `module` with ΔW [rows, cols], ΔW = 0.5·B·A.
std::shared_ptr<const adapter::WeightAdapter> pair_adapter(const std::string& module, int64_t rows, int64_t cols,
                                                           bool embedding) {
  auto a = std::make_shared<adapter::WeightAdapter>();
  a->path = "in-memory " + module;
  adapter::AdapterTarget t;
  t.module = module;
  t.embedding = embedding;
  t.update = adapter::LowRankUpdate{pattern({4, cols}, 0.3f, 1), pattern({rows, 4}, 0.3f, 2), 0.5f};
  t.keys = {module + ".lora_a", module + ".lora_b"};
  a->targets.push_back(std::move(t));
  return a;
}

std::vector<float> run(const model::LoadedModel& m, std::shared_ptr<const LoraSet> set, std::vector<float> scales) {
  ThreadPool pool(1);
  Transformer t(m.config, m.weights);
  KVCache cache(m.config, 16);
  const std::vector<int32_t> prompt = {5, 17, 42, 99};
  const auto adapters = test::scaled(set, scales);
  SequenceInput in{&cache, prompt, true, adapters};
  return t.forward(pool, std::span(&in, 1));
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]) / std::max(1.0f, std::abs(b[i])));
  return m;
}

void expect_refused(const std::function<void()>& f, const std::string& needle) { test::expect_refused(f, {needle}); }

class HeadRules : public ::testing::TestWithParam<const char*> {};

TEST_P(HeadRules, EmbedPairAppliesOnBothPathsAndLmHeadFollowsTheTie) {
  const std::string dir = test::fixture(std::string("models/") + GetParam());
  model::LoadedModel base = model::load_model(dir);
  const auto& c = base.config;
  auto embed = pair_adapter("model.embed_tokens", c.vocab_size, c.hidden_size, true);
  auto head = pair_adapter("lm_head", c.vocab_size, c.hidden_size, false);

  // embed_tokens: fused and unfused agree, on tied checkpoints including the head's change.
  model::LoadOptions o;
  o.fused_adapters = {{embed, 1.0f}};
  o.weight_dtype = DType::F32;
  const auto fused = run(model::load_model(dir, o), nullptr, {});
  auto set = make_lora_set(c, *base.source, {{embed, 1.0f}});
  const auto unfused = run(base, set, {1.0f});
  const auto plain = run(base, nullptr, {});
  EXPECT_LE(max_diff(unfused, fused), 2e-5f);
  EXPECT_GT(max_diff(unfused, plain), 1e-3f);
  if (c.tie_word_embeddings) {
    // The head term matters: without it the unfused path would miss the fused (shared-weight)
    // result by far more than rounding.
    const model::TensorRole head_role{model::Role::LmHead};
    ASSERT_TRUE(set->adapters[0]->at(head_role));
    EXPECT_EQ(set->adapters[0]->at(head_role)->size(), 1u);
    auto lookup_only = std::make_shared<LoraAdapter>(*set->adapters[0]);
    lookup_only->terms.erase(head_role);
    auto partial = std::make_shared<LoraSet>();
    partial->adapters.push_back(lookup_only);
    EXPECT_GT(max_diff(run(base, partial, {1.0f}), fused), 1e-3f);
  } else {
    EXPECT_FALSE(set->adapters[0]->at({model::Role::LmHead}));
  }

  if (c.tie_word_embeddings) {
    expect_refused([&] { model::load_model(dir, [&] { model::LoadOptions h; h.fused_adapters = {{head, 1.0f}}; return h; }()); },
                   "adapts lm_head, but this checkpoint ties lm_head to embed_tokens");
    expect_refused([&] { make_lora_set(c, *base.source, {{head, 1.0f}}); },
                   "adapts lm_head, but this checkpoint ties lm_head to embed_tokens");
  } else {
    model::LoadOptions h;
    h.fused_adapters = {{head, 1.0f}};
    h.weight_dtype = DType::F32;
    const auto fused_head = run(model::load_model(dir, h), nullptr, {});
    const auto unfused_head = run(base, make_lora_set(c, *base.source, {{head, 1.0f}}), {1.0f});
    EXPECT_LE(max_diff(unfused_head, fused_head), 2e-5f);
    EXPECT_GT(max_diff(unfused_head, plain), 1e-3f);
  }
}

INSTANTIATE_TEST_SUITE_P(Families, HeadRules,
                         ::testing::Values("llama_f32", "llama_bf16", "mistral_f32", "qwen2_f32", "qwen2_bf16",
                                           "qwen3_f32", "qwen3_bf16"));

TEST(HeadRules, TiedEmbeddingOnAFamilyWithoutTheRuleIsRefused) {
  model::LoadedModel base = model::load_model(test::fixture("models/qwen2_f32"));
  ASSERT_TRUE(base.config.tie_word_embeddings);
  auto embed = pair_adapter("model.embed_tokens", base.config.vocab_size, base.config.hidden_size, true);
  model::FamilyTraits other = model::family("qwen2");
  other.tied_embedding_adapters = false;
  const auto bindings = model::bindings_for_model(base.config, *base.source);
  for (auto path : {model::AdapterPath::Fused, model::AdapterPath::Unfused})
    expect_refused([&] { model::check_tied_head_rules(base.config, other, {{embed, 1.0f}}, bindings, path); },
                   "adapts embed_tokens of a tied qwen2 checkpoint");
  // The shipped families allow it except Gemma's, whose lookup is scaled (and head capped).
  for (const auto& f : model::families()) EXPECT_EQ(f.tied_embedding_adapters, !f.scale_embeddings) << f.model_type;
}

// Gemma is tied: an embed_tokens pair is refused (the scaled lookup is not the head), and so is an
// lm_head pair, on both paths, naming the family.
TEST(HeadRules, GemmaTiedEmbeddingAndHeadPairsAreRefused) {
  for (const char* m : {"gemma2_f32", "gemma3_f32"}) {
    const std::string dir = test::fixture(std::string("models/") + m);
    model::LoadedModel base = model::load_model(dir);
    const auto& c = base.config;
    ASSERT_TRUE(c.tie_word_embeddings) << m;
    auto embed = pair_adapter("model.embed_tokens", c.vocab_size, c.hidden_size, true);
    auto head = pair_adapter("lm_head", c.vocab_size, c.hidden_size, false);
    const std::string fam = c.model_type;
    model::LoadOptions o;
    o.fused_adapters = {{embed, 1.0f}};
    expect_refused([&] { model::load_model(dir, o); }, "adapts embed_tokens of a tied " + fam + " checkpoint");
    expect_refused([&] { make_lora_set(c, *base.source, {{embed, 1.0f}}); },
                   "adapts embed_tokens of a tied " + fam + " checkpoint");
    o.fused_adapters = {{head, 1.0f}};
    expect_refused([&] { model::load_model(dir, o); }, "adapts lm_head, but this checkpoint ties lm_head");
    expect_refused([&] { make_lora_set(c, *base.source, {{head, 1.0f}}); }, "adapts lm_head, but this checkpoint ties");
  }
}

Tensor transposed(const Tensor& t) {
  const int64_t r = t.shape[0], c = t.shape[1];
  std::vector<uint8_t> bytes(static_cast<size_t>(t.nbytes()));
  float* out = reinterpret_cast<float*>(bytes.data());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) out[j * r + i] = t.as<float>()[i * c + j];
  return Tensor::owned(DType::F32, {c, r}, std::move(bytes));
}

// One ΔE written in the three mlx-style layouts an embed_tokens pair may come in; the binding
// matches the Linear-shaped ones against the vocabulary, so all three give the same model.
TEST(HeadRules, EmbeddingPairLayoutsAreMatchedAgainstTheVocabulary) {
  const std::string dir = test::fixture("models/qwen2_f32");
  model::LoadedModel base = model::load_model(dir);
  const int64_t V = base.config.vocab_size, H = base.config.hidden_size;
  const Tensor emb_a = pattern({V, 4}, 0.3f, 3), emb_b = pattern({4, H}, 0.3f, 4);  // Δ = a·b
  const std::vector<std::pair<Tensor, Tensor>> layouts = {
      {emb_a, emb_b},                          // LoRAEmbedding: lora_a [V, r], lora_b [r, H]
      {transposed(emb_b), transposed(emb_a)},  // Linear, mlx orientation: lora_a [H, r], lora_b [r, V]
      {transposed(emb_a) /*unused*/, emb_a},   // placeholder, replaced below
  };
  std::vector<std::vector<float>> results;
  for (int layout = 0; layout < 3; ++layout) {
    const std::string adir = ::testing::TempDir() + "/graft_embed_layout_" + std::to_string(layout);
    std::filesystem::create_directories(adir);
    Tensor la = layouts[static_cast<size_t>(layout)].first, lb = layouts[static_cast<size_t>(layout)].second;
    if (layout == 2) {  // matrix orientation: lora_a [r, H], lora_b [V, r], Δ = lora_b·lora_a
      la = emb_b;
      lb = emb_a;
    }
    io::write_safetensors(adir + "/adapters.safetensors", {{"model.embed_tokens.lora_a", la}, {"model.embed_tokens.lora_b", lb}});
    std::ofstream(adir + "/adapter_config.json")
        << R"({"fine_tune_type": "lora", "num_layers": 2, "lora_parameters": {"rank": 4, "scale": 2.0, "dropout": 0.0}})";
    auto adapter = std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(adir));
    model::LoadOptions o;
    o.fused_adapters = {{adapter, 1.0f}};
    results.push_back(run(model::load_model(dir, o), nullptr, {}));
    // The unfused path binds the same way.
    EXPECT_LE(max_diff(run(base, make_lora_set(base.config, *base.source, {{adapter, 1.0f}}), {1.0f}), results.back()),
              2e-5f);
    std::filesystem::remove_all(adir);
  }
  // Same ΔE up to the summation order of a rank-4 product: identical here (k ascending in both).
  EXPECT_LE(max_diff(results[1], results[0]), 1e-6f);
  EXPECT_LE(max_diff(results[2], results[0]), 1e-6f);
  EXPECT_GT(max_diff(results[0], run(base, nullptr, {})), 1e-3f);
}

}  // namespace
}  // namespace graft::runtime
