// The engine's own rules, on the tiny llama fixture with two real adapters (PEFT and mlx-lm):
// the adapter registry (POST and per-request semantics, fused acceptance, cache digests), the
// stop matcher, and the batching step — chunked prefill, reused caches and mixed-adapter batches
// must give exactly the tokens of one sequence run alone (greedy, so equality is exact: each row's
// arithmetic does not depend on the other rows of the pass).
#include <gtest/gtest.h>

#include <cmath>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/error.h"
#include "graft/engine/engine.h"
#include "graft/engine/generate.h"
#include "test_paths.h"
#include "support/errors.h"

namespace graft::engine {
namespace {

std::vector<adapter::AdapterUse> two_adapters(float s0, float s1) {
  auto read = [](const char* f) {
    return std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(test::fixture(f)));
  };
  return {{read("adapters/peft_lora"), s0}, {read("adapters/mlx_lora"), s1}};
}

EngineOptions options(bool fuse = false, bool init_zero = false) {
  EngineOptions o;
  o.model = test::fixture("models/llama_f32");
  o.threads = 2;
  o.adapters = two_adapters(1.0f, 0.5f);
  o.fuse = fuse;
  o.init_without_apply = init_zero;
  return o;
}

using test::kind_of;

const std::vector<int32_t> kPrompt = {5, 17, 42, 99, 3, 250, 7, 11, 64, 8};

// The engine's startup adapters at these scales by id (unlisted: 0), as a request's `lora` list
// selects them; none listed: the base model (or, fused, the adapters in the weights).
Selection at(Engine& e, const std::vector<float>& scales) {
  if (scales.empty()) return {};
  std::vector<ScaleEntry> list;
  for (size_t i = 0; i < scales.size(); ++i) list.push_back({static_cast<int64_t>(i), scales[i]});
  Selection sel = e.adapters().select(std::nullopt, list);
  e.adapters().make_resident(sel);
  return sel;
}

// A selection's scales by id (ids it does not pick: 0), for `n` ids.
std::vector<float> by_id(const Selection& sel, size_t n) {
  std::vector<float> out(n, 0.0f);
  for (const auto& p : sel.picks) out.at(static_cast<size_t>(p.id)) = p.scale;
  return out;
}

// The default scales by id, as GET /lora-adapters lists them.
std::vector<float> defaults(const AdapterRegistry& r) {
  std::vector<float> out;
  for (const auto& a : r.list()) out.push_back(a.scale);
  return out;
}

SequenceParams greedy(Engine& e, const std::vector<float>& scales, int64_t n = 12) {
  SequenceParams p;
  p.max_tokens = n;
  p.sampling.temperature = 0;
  p.adapters = at(e, scales).adapters();
  return p;
}

std::vector<int32_t> alone(Engine& e, const std::vector<int32_t>& prompt, std::vector<float> scales) {
  runtime::KVCache cache(e.model().config, 64);
  Sequence s(e.tokenizer(), cache, prompt, greedy(e, scales));
  Sequence* b[] = {&s};
  while (!s.finished()) e.step(b, 1 << 20);
  return s.generated();
}

TEST(AdapterRegistry, PostSemanticsAndRefusalsChangeNothing) {
  Engine e(options());
  AdapterRegistry& r = e.adapters();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(defaults(r), (std::vector<float>{1.0f, 0.5f}));
  r.set_defaults({{1, 0.25}});
  EXPECT_EQ(defaults(r), (std::vector<float>{0.0f, 0.25f})) << "unlisted ids become 0";
  for (const auto& bad : std::vector<std::vector<ScaleEntry>>{
           {{2, 1.0}}, {{-1, 1.0}}, {{0, NAN}}, {{0, INFINITY}}, {{0, 1e300}}, {{0, 1.0}, {0, 2.0}}}) {
    EXPECT_EQ(kind_of([&] { r.set_defaults(bad); }), ErrorKind::kBadRequest);
    EXPECT_EQ(kind_of([&] { r.select(std::nullopt, bad); }), ErrorKind::kBadRequest);
    EXPECT_EQ(defaults(r), (std::vector<float>{0.0f, 0.25f})) << "a refused POST changed the defaults";
  }
  EXPECT_EQ(by_id(r.select(std::nullopt, std::nullopt), 2), (std::vector<float>{0.0f, 0.25f}));
  EXPECT_TRUE(r.select(std::nullopt, std::vector<ScaleEntry>{}).picks.empty()) << "\"lora\": [] is all off";
  EXPECT_EQ(by_id(r.select(std::nullopt, std::vector<ScaleEntry>{{0, 2.0}}), 2), (std::vector<float>{2.0f, 0.0f}));
}

TEST(AdapterRegistry, InitWithoutApplyStoresZero) {
  Engine e(options(false, true));
  EXPECT_EQ(defaults(e.adapters()), (std::vector<float>{0.0f, 0.0f}));
  EXPECT_TRUE(e.adapters().select(std::nullopt, std::nullopt).picks.empty());
}

TEST(AdapterRegistry, DigestKeysByContentAndNonZeroScales) {
  Engine e(options());
  const AdapterRegistry& r = e.adapters();
  auto digest = [&](std::vector<float> s) { return at(e, s).digest; };
  EXPECT_EQ(digest({0, 0}), digest({0, 0}));
  EXPECT_NE(digest({1, 0}), digest({0, 0}));
  EXPECT_NE(digest({1, 0}), digest({0, 1}));
  EXPECT_NE(digest({1, 0}), digest({0.5f, 0}));
  EXPECT_EQ(digest({-0.0f, 0}), digest({0, 0})) << "scale 0 is the base model whatever its sign";
  EXPECT_NE(r.list()[0].content_digest, r.list()[1].content_digest);
  EXPECT_EQ(content_digest(test::fixture("adapters/peft_lora")), r.list()[0].content_digest);
}

TEST(AdapterRegistry, FusedAcceptsOnlyTheConfigurationInForce) {
  Engine e(options(true));
  AdapterRegistry& r = e.adapters();
  EXPECT_TRUE(r.fused());
  r.set_defaults({{0, 1.0}, {1, 0.5}});
  const Selection in_force = r.select(std::nullopt, std::nullopt);
  EXPECT_TRUE(in_force.picks.empty()) << "fused adapters have no unfused terms: the pass runs none";
  EXPECT_EQ(in_force.digest, r.select(std::nullopt, std::vector<ScaleEntry>{{0, 1.0}, {1, 0.5}}).digest);
  EXPECT_EQ(kind_of([&] { r.set_defaults({{0, 1.0}}); }), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of([&] { r.select(std::nullopt, std::vector<ScaleEntry>{}); }), ErrorKind::kUnsupported);
  EXPECT_EQ(kind_of([&] { r.add("x", test::fixture("adapters/peft_lora"), 1.0f); }), ErrorKind::kUnsupported);
  EXPECT_EQ(defaults(r), (std::vector<float>{1.0f, 0.5f}));
}

TEST(AdapterRegistry, FusedEqualsUnfusedTokens) {
  Engine fused(options(true)), unfused(options());
  EXPECT_EQ(alone(fused, kPrompt, {}), alone(unfused, kPrompt, {1.0f, 0.5f}));
}

TEST(Engine, RefusesBadAdapterCombinationsBeforeLoading) {
  EXPECT_EQ(kind_of([] { Engine::check(options(true, true)); }), ErrorKind::kBadRequest);
  EngineOptions wrong = options();
  wrong.model = test::fixture("models/qwen3_f32");  // other shapes: the adapters do not fit
  EXPECT_THROW(Engine::check(wrong), Error);
}

// Engine::check refuses what the terms' build would refuse, from the bind plan alone (the engine
// builds each startup adapter once, in its constructor), and accepts the same adapter fused.
TEST(Engine, CheckRefusesWhatHasNoUnfusedFormBeforeBuilding) {
  EngineOptions o = options();
  const model::ModelConfig c = model::open_model_source(o.model).config;
  auto diff = std::make_shared<adapter::WeightAdapter>();
  diff->path = "in-memory diff";
  adapter::AdapterTarget t;
  t.module = "model.layers.0.self_attn.q_proj";
  const int64_t q = c.q_dim(), h = c.hidden_size;
  t.update = adapter::DiffUpdate{Tensor::owned(DType::F32, {q, h}, std::vector<uint8_t>(q * h * 4, 0)), 1.0f};
  diff->targets.push_back(t);
  o.adapters = {{diff, 1.0f}};
  try {
    Engine::check(o);
    ADD_FAILURE() << "a diff was accepted unfused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("diff update, which has no unfused form"), std::string::npos) << e.what();
  }
  o.fuse = true;
  EXPECT_NO_THROW(Engine::check(o));
}

TEST(StopMatcher, HoldsBackPrefixesAndCutsAtTheEarliestStop) {
  StopMatcher m({"</s>", "END"});
  const std::string* hit = nullptr;
  EXPECT_EQ(m.push("Hello <", &hit), "Hello ");
  EXPECT_EQ(m.push("/s", &hit), "");
  EXPECT_EQ(hit, nullptr);
  EXPECT_EQ(m.push("x E", &hit), "</sx ");
  EXPECT_EQ(m.push("ND more", &hit), "");
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(*hit, "END");
}

TEST(Step, ChunkedPrefillAndMixedAdapterBatchEqualSoloRuns) {
  Engine e(options());
  const std::vector<std::vector<float>> settings = {{0, 0}, {1, 0}, {0, 1}, {1, 0.5f}, {0.5f, 0}};
  std::vector<std::vector<int32_t>> prompts, expected;
  for (size_t i = 0; i < settings.size(); ++i) {
    std::vector<int32_t> p = kPrompt;
    p.push_back(static_cast<int32_t>(100 + i));
    prompts.push_back(p);
    expected.push_back(alone(e, p, settings[i]));
  }
  EXPECT_NE(expected[0], expected[1]);
  // All five together, prefilled in chunks of 3 rows per step (decoding rows always run).
  std::vector<std::unique_ptr<runtime::KVCache>> caches;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> batch;
  for (size_t i = 0; i < settings.size(); ++i) {
    caches.push_back(std::make_unique<runtime::KVCache>(e.model().config, 64));
    seqs.push_back(std::make_unique<Sequence>(e.tokenizer(), *caches.back(), prompts[i], greedy(e, settings[i])));
    batch.push_back(seqs.back().get());
  }
  int64_t steps = 0;
  while (std::any_of(batch.begin(), batch.end(), [](Sequence* s) { return !s->finished(); })) {
    const StepResult r = e.step(batch, 3);
    EXPECT_LE(r.prompt_tokens, 3);
    ++steps;
  }
  for (size_t i = 0; i < settings.size(); ++i) EXPECT_EQ(seqs[i]->generated(), expected[i]) << "setting " << i;
  EXPECT_GT(steps, 12);
}

TEST(Step, ReusedCachePrefixGivesTheSameTokens) {
  Engine e(options());
  const auto expected = alone(e, kPrompt, {1, 0});
  runtime::KVCache cache(e.model().config, 64);
  {
    Sequence first(e.tokenizer(), cache, kPrompt, greedy(e, {1, 0}, 2));
    Sequence* b[] = {&first};
    while (!first.finished()) e.step(b, 64);
  }
  cache.truncate(static_cast<int64_t>(kPrompt.size()) - 3);  // keep a prefix, as the server's prompt cache does
  Sequence again(e.tokenizer(), cache, kPrompt, greedy(e, {1, 0}));
  EXPECT_EQ(again.cached_at_start(), static_cast<int64_t>(kPrompt.size()) - 3);
  Sequence* b[] = {&again};
  while (!again.finished()) e.step(b, 64);
  EXPECT_EQ(again.generated(), expected);
}

TEST(Sequence, RefusesPromptsThatDoNotFitAndZeroMaxTokensOnlyEvaluates) {
  Engine e(options());
  runtime::KVCache small(e.model().config, static_cast<int64_t>(kPrompt.size()));
  EXPECT_EQ(kind_of([&] { Sequence s(e.tokenizer(), small, kPrompt, greedy(e, {})); }), ErrorKind::kLimit);
  runtime::KVCache cache(e.model().config, 64);
  Sequence s(e.tokenizer(), cache, kPrompt, greedy(e, {}, 0));
  Sequence* b[] = {&s};
  e.step(b, 64);
  EXPECT_TRUE(s.finished());
  EXPECT_EQ(s.reason(), StopReason::MaxTokens);
  EXPECT_TRUE(s.generated().empty());
  EXPECT_EQ(cache.size(), static_cast<int64_t>(kPrompt.size()));
}

}  // namespace
}  // namespace graft::engine
