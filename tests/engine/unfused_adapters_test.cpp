// The unfused adapter runtime against the fused path and against itself: scale 0 is the base bit
// for bit, fused and unfused logits agree, adapters stack by summing, a batch of sequences with
// different adapters and scales equals separate runs, and a scale changed between tokens applies
// from the next token on. Fixtures: the tiny checkpoints and the adapter-core fixtures written by
// tools/gen_model_fixtures.py and tools/gen_adapter_fixtures.py.
//
// Tolerance, fused vs unfused: 2e-5 · max(1, |logit|) absolute. Fusing rounds W + ΔW once to F32
// (per element, relative 6e-8) and sums x·W' over k <= 128 terms; unfused sums x·W and the
// rank-r term separately. Both are F32 evaluations of the same function with different
// association, so they differ by a few ulps of the partial sums (~1e-6 on logits of magnitude
// ~1-5 here); 2e-5 leaves room without hiding a wrong scale or orientation, which moves logits by
// 1e-2 or more on these fixtures (checked by AdapterChangesLogits).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/error.h"
#include "graft/model/loader.h"
#include "graft/engine/generate.h"
#include "graft/runtime/lora.h"
#include "graft/runtime/transformer.h"
#include "support/run_util.h"
#include "test_paths.h"

namespace graft::engine {
namespace {
using test::LoraSet;
using test::make_lora_set;

using adapter::AdapterUse;

std::shared_ptr<const adapter::WeightAdapter> read(const std::string& fixture) {
  return std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(test::fixture(fixture)));
}

const std::vector<int32_t> kPrompt = {5, 17, 42, 99, 3, 250, 7, 11};

std::vector<float> logits(const model::LoadedModel& m, std::shared_ptr<const LoraSet> loras,
                          std::vector<float> scales, const std::vector<int32_t>& prompt = kPrompt) {
  ThreadPool pool(2);
  runtime::Transformer t(m.config, m.weights);
  // F32 cache: these tests compare against PEFT's F32 logits and fused against unfused at 2e-5; the
  // default F16 cache amplifies the two paths' last-bit differences past that (measured 2e-4).
  runtime::KVCache cache(m.config, 64, DType::F32);
  const auto adapters = test::scaled(loras, scales);
  runtime::SequenceInput in{&cache, prompt, true, adapters};
  return t.forward(pool, std::span(&in, 1));
}

float max_scaled_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]) / std::max(1.0f, std::abs(b[i])));
  return m;
}

// Fused into F32 weights: on a BF16 base, fusing in the base dtype rounds W + ΔW to BF16 (what
// "fused weights keep the base dtype" means), a 2^-9 relative change the unfused path does not
// make; merging straight into F32 compares the two paths' arithmetic alone.
model::LoadedModel fused_model(const std::string& model, std::vector<AdapterUse> uses) {
  model::LoadOptions o;
  o.fused_adapters = std::move(uses);
  o.weight_dtype = DType::F32;
  return model::load_model(test::fixture("models/" + model), o);
}

struct Case {
  const char* model;
  const char* adapter;
};

class FusedVsUnfused : public ::testing::TestWithParam<Case> {};

TEST_P(FusedVsUnfused, LogitsAgreeAndScaleZeroIsTheBase) {
  const Case c = GetParam();
  auto a = read(c.adapter);
  model::LoadedModel base = model::load_model(test::fixture(std::string("models/") + c.model));
  auto set = make_lora_set(base.config, *base.source, {{a, 1.0f}});
  for (float s : {1.0f, 0.5f, -2.0f}) {
    const auto unfused = logits(base, set, {s});
    const auto fused = logits(fused_model(c.model, {{a, s}}), nullptr, {});
    EXPECT_LE(max_scaled_diff(unfused, fused), 2e-5f) << c.adapter << " at scale " << s;
  }
  // Scale 0 (and no scales at all) must be the base model bit for bit: the terms are skipped.
  const auto plain = logits(base, nullptr, {});
  for (const auto& zero : {logits(base, set, {0.0f}), logits(base, set, {})}) {
    ASSERT_EQ(zero.size(), plain.size());
    EXPECT_EQ(std::memcmp(zero.data(), plain.data(), plain.size() * sizeof(float)), 0);
  }
}

TEST_P(FusedVsUnfused, AdapterChangesLogits) {
  const Case c = GetParam();
  model::LoadedModel base = model::load_model(test::fixture(std::string("models/") + c.model));
  auto set = make_lora_set(base.config, *base.source, {{read(c.adapter), 1.0f}});
  EXPECT_GT(max_scaled_diff(logits(base, set, {1.0f}), logits(base, nullptr, {})), 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(Adapters, FusedVsUnfused,
                         ::testing::Values(Case{"llama_f32", "adapters/peft_lora"}, Case{"llama_f32", "adapters/peft_rslora"},
                                           Case{"llama_f32", "adapters/peft_patterns"},
                                           Case{"llama_f32", "adapters/mlx_lora"}, Case{"llama_f32", "adapters/kohya_lora/adapter.safetensors"},
                                           Case{"llama_f32", "adapters/peft_embed"},
                                           Case{"llama_bf16", "adapters/peft_bf16"}),
                         [](const auto& info) {
                           std::string n = std::string(info.param.model) + "_" + info.param.adapter;
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(LoraRuntime, TwoAdaptersSumLikeFusingBoth) {
  auto a = read("adapters/peft_lora"), b = read("adapters/mlx_lora");
  model::LoadedModel base = model::load_model(test::fixture("models/llama_f32"));
  auto set = make_lora_set(base.config, *base.source, {{a, 1.0f}, {b, 1.0f}});
  const auto unfused = logits(base, set, {0.7f, -1.3f});
  const auto fused = logits(fused_model("llama_f32", {{a, 0.7f}, {b, -1.3f}}), nullptr, {});
  EXPECT_LE(max_scaled_diff(unfused, fused), 2e-5f);
  // Order does not matter beyond rounding.
  auto swapped = make_lora_set(base.config, *base.source, {{b, 1.0f}, {a, 1.0f}});
  EXPECT_LE(max_scaled_diff(logits(base, swapped, {-1.3f, 0.7f}), unfused), 2e-5f);
}

TEST(LoraRuntime, BatchWithDifferentAdaptersPerSequenceEqualsSeparateRuns) {
  auto a = read("adapters/peft_lora"), b = read("adapters/mlx_lora");
  model::LoadedModel base = model::load_model(test::fixture("models/llama_f32"));
  auto set = make_lora_set(base.config, *base.source, {{a, 1.0f}, {b, 1.0f}});
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 42}, {99, 3}, {250, 7, 11, 12}, {8}};
  const std::vector<std::vector<float>> scales = {{1.0f, 0.0f}, {0.0f, 0.0f}, {0.5f, -1.0f}, {0.0f, 2.0f}};
  ThreadPool pool(2);
  runtime::Transformer t(base.config, base.weights);
  std::vector<runtime::KVCache> caches;
  std::vector<std::vector<runtime::ScaledAdapter>> chosen;
  for (size_t i = 0; i < prompts.size(); ++i) {
    caches.emplace_back(base.config, 16, DType::F32);  // as logits()
    chosen.push_back(test::scaled(set, scales[i]));
  }
  std::vector<runtime::SequenceInput> batch;
  for (size_t i = 0; i < prompts.size(); ++i) batch.push_back({&caches[i], prompts[i], true, chosen[i]});
  const auto together = t.forward(pool, batch);
  size_t off = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto alone = logits(base, set, scales[i], prompts[i]);
    // Kernels sum every output in a fixed order whatever the rows around it: identical bits.
    ASSERT_EQ(std::memcmp(alone.data(), together.data() + off, alone.size() * sizeof(float)), 0) << "sequence " << i;
    off += alone.size();
  }
  EXPECT_EQ(off, together.size());
}

TEST(LoraRuntime, LiveScaleChangeAppliesFromTheNextToken) {
  auto a = read("adapters/peft_lora");
  model::LoadedModel base = model::load_model(test::fixture("models/llama_f32"));
  auto set = make_lora_set(base.config, *base.source, {{a, 1.0f}});
  ThreadPool pool(2);
  runtime::Transformer t(base.config, base.weights);
  GenerateOptions g;
  g.max_tokens = 10;
  g.sampling.temperature = 0;
  g.adapters = test::scaled(set, {1.0f});
  g.update_scales = [](int64_t generated, std::vector<runtime::ScaledAdapter>& s) {
    if (generated == 4) s[0].scale = 0.0f;
  };
  runtime::KVCache cache(base.config, 64);
  const auto live = generate(pool, t, base.tokenizer, cache, kPrompt, g);
  ASSERT_EQ(live.tokens.size(), 10u);

  // The same by hand: prompt and the first 3 decode steps at scale 1, the rest at 0. Token i is
  // sampled from the logits of the step that consumed token i-1, so the change made before the
  // step that feeds token 4 shows from token 5 on.
  runtime::KVCache c2(base.config, 64);
  std::vector<runtime::ScaledAdapter> s = test::scaled(set, {1.0f});
  runtime::SequenceInput in{&c2, kPrompt, false, s};
  auto lg = t.forward(pool, std::span(&in, 1));
  std::vector<int32_t> manual;
  for (int i = 0; i < 10; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin());
    manual.push_back(next);
    if (i == 3) s[0].scale = 0.0f;
    runtime::SequenceInput step{&c2, std::span(&manual.back(), 1), false, s};
    lg = t.forward(pool, std::span(&step, 1));
  }
  EXPECT_EQ(live.tokens, manual);

  // And the change is visible: all-on and all-off runs differ from the switched one.
  g.update_scales = nullptr;
  runtime::KVCache c3(base.config, 64);
  const auto always = generate(pool, t, base.tokenizer, c3, kPrompt, g);
  EXPECT_EQ(std::vector<int32_t>(always.tokens.begin(), always.tokens.begin() + 5),
            std::vector<int32_t>(live.tokens.begin(), live.tokens.begin() + 5));
  EXPECT_NE(always.tokens, live.tokens);
}

TEST(LoraRuntime, RefusesWhatHasNoLowRankFormAndBadScales) {
  model::LoadedModel base = model::load_model(test::fixture("models/llama_f32"));
  try {
    // A full diff has no unfused form (LoKr, LoHa and DoRA do: dora_live_test.cpp).
    auto diff = std::make_shared<adapter::WeightAdapter>();
    diff->path = "in-memory diff";
    adapter::AdapterTarget t;
    t.module = "model.layers.0.self_attn.q_proj";
    const int64_t q = base.config.q_dim(), h = base.config.hidden_size;
    t.update = adapter::DiffUpdate{Tensor::owned(DType::F32, {q, h}, std::vector<uint8_t>(q * h * 4, 0)), 1.0f};
    diff->targets.push_back(t);
    make_lora_set(base.config, *base.source, {{diff, 1.0f}});
    FAIL() << "a diff applied unfused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("diff update, which has no unfused form"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--adapter"), std::string::npos) << e.what();
  }
  auto set = make_lora_set(base.config, *base.source, {{read("adapters/peft_lora"), 1.0f}});
  ThreadPool pool(1);
  runtime::Transformer t(base.config, base.weights);
  runtime::KVCache cache(base.config, 16);
  const auto& a = set->adapters[0];
  const std::vector<std::vector<runtime::ScaledAdapter>> bads = {
      {{a, NAN, 0}}, {{a, INFINITY, 0}}, {{a, 1.0f, 0}, {a, 1.0f, 0}} /* listed twice */, {{nullptr, 1.0f, 0}}};
  for (const auto& bad : bads) {
    runtime::SequenceInput in{&cache, kPrompt, false, bad};
    EXPECT_THROW(t.forward(pool, std::span(&in, 1)), Error);
    EXPECT_EQ(cache.size(), 0);  // refused before the cache changed
  }
}

// --no-mmap (LoadOptions::copy_weights) moves the weights, never changes them: dense, fused and
// quantized models give the same bits as from the mapping.
TEST(LoraRuntime, CopiedWeightsGiveIdenticalLogits) {
  for (const char* dir : {"models/llama_bf16", "models/qwen2_f32", "mlx_quant/models/qwen3_f32_q4g64"}) {
    model::LoadOptions copy;
    copy.copy_weights = true;
    model::LoadedModel mapped = model::load_model(test::fixture(dir)), owned = model::load_model(test::fixture(dir), copy);
    EXPECT_NE(owned.weights.layers[0].o.nbytes(), 0);
    const auto a = logits(mapped, nullptr, {}), b = logits(owned, nullptr, {});
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << dir;
  }
  auto a = read("adapters/peft_lora");
  model::LoadOptions o;
  o.copy_weights = true;
  o.fused_adapters = {{a, 1.0f}};
  const auto copied = logits(model::load_model(test::fixture("models/llama_f32"), o), nullptr, {});
  o.copy_weights = false;
  const auto mapped = logits(model::load_model(test::fixture("models/llama_f32"), o), nullptr, {});
  EXPECT_EQ(std::memcmp(copied.data(), mapped.data(), copied.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace graft::engine
