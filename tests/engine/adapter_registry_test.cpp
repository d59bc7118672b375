// The dynamic adapter registry (graft serve's): add/remove under names, in-place reloads, request
// selection rules, the residency budget (LRU among idle adapters, never one in use), rebuilds after
// eviction giving the same tokens, sequences that carry their own adapters equal to the static
// scale-vector path, and SHA-256 content digests as the cache key. Tiny llama fixture, greedy.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "graft/core/error.h"
#include "graft/engine/engine.h"
#include "test_paths.h"
#include "support/errors.h"

namespace graft::engine {
namespace {

namespace fs = std::filesystem;

const std::vector<int32_t> kPrompt = {5, 17, 42, 99, 3, 250, 7, 11, 64, 8};

std::shared_ptr<const adapter::WeightAdapter> read(const std::string& fixture) {
  return std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(test::fixture(fixture)));
}

EngineOptions dynamic_options(ResidencyLimits limits = {}) {
  EngineOptions o;
  o.model = test::fixture("models/llama_f32");
  o.threads = 2;
  o.residency = limits;
  return o;
}

EngineOptions static_options() {
  EngineOptions o;
  o.model = test::fixture("models/llama_f32");
  o.threads = 2;
  o.adapters = {{read("adapters/peft_lora"), 1.0f}, {read("adapters/mlx_lora"), 0.5f}};
  return o;
}

using test::kind_of;

SequenceParams greedy(int64_t n = 12) {
  SequenceParams p;
  p.max_tokens = n;
  p.sampling.temperature = 0;
  return p;
}

// Runs sequences to the end in one batch; returns each one's tokens.
std::vector<std::vector<int32_t>> run(Engine& e, const std::vector<SequenceParams>& params,
                                      const std::vector<std::vector<int32_t>>& prompts) {
  std::vector<std::unique_ptr<runtime::KVCache>> caches;
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<Sequence*> batch;
  for (size_t i = 0; i < params.size(); ++i) {
    caches.push_back(std::make_unique<runtime::KVCache>(e.model().config, 64));
    seqs.push_back(std::make_unique<Sequence>(e.tokenizer(), *caches.back(), prompts[i], params[i]));
    batch.push_back(seqs.back().get());
  }
  while (std::any_of(seqs.begin(), seqs.end(), [](const auto& s) { return !s->finished(); })) e.step(batch, 1 << 20);
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : seqs) out.push_back(s->generated());
  return out;
}

SequenceParams with(const Selection& sel) {
  SequenceParams p = greedy();
  p.adapters = sel.adapters();
  return p;
}

std::vector<int32_t> solo(Engine& e, const Selection& sel) { return run(e, {with(sel)}, {kPrompt})[0]; }

TEST(ContentDigest, IsSha256OfTheFileBytes) {
  const fs::path p = fs::temp_directory_path() / ("graft_digest_" + std::to_string(::getpid()));
  std::ofstream(p) << "abc";
  EXPECT_EQ(digest_hex(content_digest(p.string())),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2 example
  fs::remove(p);
  EXPECT_NE(content_digest(test::fixture("adapters/peft_lora")), content_digest(test::fixture("adapters/mlx_lora")));
  EXPECT_EQ(content_digest(test::fixture("adapters/peft_lora")), content_digest(test::fixture("adapters/peft_lora")));
}

TEST(DynamicRegistry, AddSelectRemoveAndNames) {
  Engine e(dynamic_options());
  AdapterRegistry& r = e.adapters();
  ASSERT_FALSE(r.fused());
  const int64_t a = r.add("a", test::fixture("adapters/peft_lora"), 0.0f);
  const int64_t b = r.add("b", test::fixture("adapters/mlx_lora"), 0.0f);
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(r.find("b"), b);
  EXPECT_FALSE(r.find("c"));
  EXPECT_EQ(kind_of([&] { r.add("a", test::fixture("adapters/mlx_lora"), 0.0f); }), ErrorKind::kBadRequest);
  EXPECT_EQ(kind_of([&] { r.add("x,y", test::fixture("adapters/mlx_lora"), 0.0f); }), ErrorKind::kBadRequest);
  EXPECT_EQ(kind_of([&] { r.add("", test::fixture("adapters/mlx_lora"), 0.0f); }), ErrorKind::kBadRequest);
  // A bad adapter registers nothing.
  EXPECT_THROW(r.add("bad", test::fixture("models/llama_f32"), 0.0f), Error);
  EXPECT_EQ(r.size(), 2u);

  const std::vector<int32_t> base = solo(e, r.select(std::nullopt, std::nullopt));
  std::vector<int32_t> with_a;
  {  // every Selection here holds a's terms; they are gone by the unload below
    const Selection by_model = r.select(a, std::nullopt);
    ASSERT_EQ(by_model.picks.size(), 1u);
    EXPECT_EQ(by_model.picks[0].scale, 1.0f);
    with_a = solo(e, by_model);
    EXPECT_NE(with_a, base) << "the adapter changes nothing: the test cannot tell selections apart";
    // model = adapter equals lora by id; lora overrides the named adapter's scale and adds others.
    EXPECT_EQ(with_a, solo(e, r.select(std::nullopt, std::vector<ScaleEntry>{{a, 1.0}})));
    const Selection both = r.select(a, std::vector<ScaleEntry>{{b, 0.5}});
    ASSERT_EQ(both.picks.size(), 2u);
    EXPECT_EQ(both.picks[0].scale, 1.0f);
    EXPECT_EQ(both.picks[1].scale, 0.5f);
    const Selection half = r.select(a, std::vector<ScaleEntry>{{a, 0.5}});
    ASSERT_EQ(half.picks.size(), 1u);
    EXPECT_EQ(half.picks[0].scale, 0.5f);
    EXPECT_TRUE(r.select(a, std::vector<ScaleEntry>{{a, 0.0}}).picks.empty()) << "lora sets the named one to 0";
    EXPECT_EQ(kind_of([&] { r.select(std::nullopt, std::vector<ScaleEntry>{{7, 1.0}}); }), ErrorKind::kBadRequest);
    EXPECT_EQ(kind_of([&] { r.select(a, std::vector<ScaleEntry>{{b, NAN}}); }), ErrorKind::kBadRequest);
  }

  // Unloading while a request holds the adapter: it keeps running with the same weights, and the
  // terms are freed when the last holder lets go.
  auto held = std::make_unique<Selection>(r.select(a, std::nullopt));
  const std::weak_ptr<const runtime::LoraAdapter> terms = held->picks.at(0).terms;
  EXPECT_TRUE(r.remove("a"));
  EXPECT_FALSE(r.remove("a"));
  EXPECT_FALSE(r.find("a"));
  EXPECT_EQ(solo(e, *held), with_a);
  EXPECT_FALSE(terms.expired());
  held.reset();
  EXPECT_TRUE(terms.expired()) << "an unloaded adapter's terms outlived their last user";
  EXPECT_EQ(kind_of([&] { r.select(a, std::nullopt); }), ErrorKind::kBadRequest);
  // Ids are never reused.
  EXPECT_EQ(r.add("a", test::fixture("adapters/peft_lora"), 0.0f), 2);
}

TEST(DynamicRegistry, InPlaceReloadBumpsTheGenerationAndTheDigest) {
  Engine e(dynamic_options());
  AdapterRegistry& r = e.adapters();
  const int64_t id = r.add("x", test::fixture("adapters/peft_lora"), 0.0f);
  const Selection before = r.select(id, std::nullopt);
  const std::vector<int32_t> old_tokens = solo(e, before);
  EXPECT_EQ(r.add("x", test::fixture("adapters/mlx_lora"), 0.0f, true), id);
  const auto infos = r.list();
  ASSERT_EQ(infos.size(), 1u);
  EXPECT_EQ(infos[0].generation, 2);
  EXPECT_EQ(infos[0].content_digest, content_digest(test::fixture("adapters/mlx_lora")));
  const Selection after = r.select(id, std::nullopt);
  EXPECT_NE(after.digest, before.digest) << "a reload with other files must change the cache key";
  EXPECT_EQ(solo(e, before), old_tokens) << "a request admitted before the reload keeps the old weights";
  EXPECT_NE(solo(e, after), old_tokens);
  // The same files under another name compute the same thing: the same key.
  const int64_t twin = r.add("twin", test::fixture("adapters/mlx_lora"), 0.0f);
  EXPECT_EQ(r.select(twin, std::nullopt).digest, after.digest);
  EXPECT_NE(r.select(std::nullopt, std::nullopt).digest, after.digest);
  EXPECT_NE(r.select(twin, std::vector<ScaleEntry>{{twin, 0.5}}).digest, after.digest);
}

TEST(DynamicRegistry, BudgetEvictsTheLeastRecentlyUsedIdleAdapterAndRebuildsOnUse) {
  Engine e(dynamic_options({.max_adapters = 2}));
  AdapterRegistry& r = e.adapters();
  const int64_t a = r.add("a", test::fixture("adapters/peft_lora"), 0.0f);
  const int64_t b = r.add("b", test::fixture("adapters/mlx_lora"), 0.0f);
  const std::vector<int32_t> tokens_a = solo(e, r.select(a, std::nullopt));  // a is now the more recent
  const int64_t c = r.add("c", test::fixture("adapters/peft_rslora"), 0.0f);
  auto resident = [&] {
    std::vector<std::string> out;
    for (const auto& i : r.list())
      if (i.resident) out.push_back(i.name);
    return out;
  };
  EXPECT_EQ(resident(), (std::vector<std::string>{"a", "c"})) << "b was the least recently used";
  EXPECT_EQ(r.stats().evictions, 1);
  EXPECT_EQ(r.size(), 3u) << "an evicted adapter stays registered";

  // b again: not ready until rebuilt, then the same tokens as a fresh build.
  Selection sel_b = r.select(b, std::nullopt);
  EXPECT_FALSE(sel_b.ready());
  const int64_t loads = r.stats().loads;
  r.make_resident(sel_b);
  EXPECT_TRUE(sel_b.ready());
  EXPECT_EQ(r.stats().loads, loads + 1);
  EXPECT_EQ(resident().size(), 2u);

  // An adapter in use is never dropped, whatever the budget says; the budget applies again after.
  Selection hold_a = r.select(a, std::nullopt), hold_b = r.select(b, std::nullopt);
  r.make_resident(hold_a);
  r.make_resident(hold_b);
  Selection sel_c = r.select(c, std::nullopt);
  r.make_resident(sel_c);
  EXPECT_TRUE(hold_a.ready() && hold_b.ready() && sel_c.ready());
  EXPECT_EQ(solo(e, hold_a), tokens_a) << "a rebuilt adapter computes what the first build did";
  sel_b = Selection{};
  hold_a = Selection{};
  hold_b = Selection{};
  sel_c = Selection{};
  r.trim();
  EXPECT_EQ(resident().size(), 2u);
  // A non-zero default scale pins an adapter: it is applied to every default request.
  r.set_defaults({{a, 1.0}, {b, 1.0}, {c, 1.0}});
  r.trim();
  r.make_resident(*std::make_unique<Selection>(r.select(std::nullopt, std::nullopt)));
  r.trim();
  EXPECT_EQ(resident().size(), 3u);
}

TEST(DynamicRegistry, ByteBudget) {
  Engine probe(dynamic_options());
  probe.adapters().add("a", test::fixture("adapters/peft_lora"), 0.0f);
  const int64_t bytes = probe.adapters().list()[0].bytes;
  ASSERT_GT(bytes, 0);
  Engine e(dynamic_options({.max_bytes = bytes + bytes / 2}));
  e.adapters().add("a", test::fixture("adapters/peft_lora"), 0.0f);
  e.adapters().add("b", test::fixture("adapters/peft_lora"), 0.0f);
  EXPECT_EQ(e.adapters().stats().evictions, 1);
  EXPECT_LE(e.adapters().stats().resident_bytes, bytes + bytes / 2);
}

TEST(DynamicRegistry, RuntimeAddedAdaptersEqualStartupOnesInMixedBatches) {
  Engine st(static_options());
  Engine dy(dynamic_options());
  AdapterRegistry& r = dy.adapters();
  const int64_t a = r.add("a", test::fixture("adapters/peft_lora"), 0.0f);
  const int64_t b = r.add("b", test::fixture("adapters/mlx_lora"), 0.0f);
  const std::vector<std::vector<float>> settings = {{0, 0}, {1, 0}, {0, 0.5f}, {1, 0.5f}, {0.25f, 1}};
  std::vector<SequenceParams> statics, dynamics;
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < settings.size(); ++i) {
    Selection startup = st.adapters().select(std::nullopt, std::vector<ScaleEntry>{{0, settings[i][0]}, {1, settings[i][1]}});
    statics.push_back(with(startup));
    std::vector<ScaleEntry> list = {{a, settings[i][0]}, {b, settings[i][1]}};
    dynamics.push_back(with(r.select(std::nullopt, list)));
    std::vector<int32_t> pr = kPrompt;
    pr[0] = static_cast<int32_t>(5 + i);
    prompts.push_back(pr);
  }
  const auto expected = run(st, statics, prompts);
  for (size_t i = 0; i < settings.size(); ++i)
    EXPECT_EQ(run(dy, {dynamics[i]}, {prompts[i]})[0], expected[i]) << "setting " << i << " alone";
  EXPECT_EQ(run(dy, dynamics, prompts), expected) << "all settings in one batch";
  // A batch whose rows list adapters in another order still applies each row's in id order.
  std::vector<SequenceParams> reversed = dynamics;
  for (auto& p : reversed) std::reverse(p.adapters.begin(), p.adapters.end());
  EXPECT_EQ(run(dy, reversed, prompts), expected);
}

TEST(DynamicRegistry, StartupAdaptersAreRegisteredWithinTheBudget) {
  EngineOptions o = dynamic_options({.max_adapters = 1});
  o.adapters = {{read("adapters/peft_lora"), 0.0f}, {read("adapters/mlx_lora"), 0.0f}, {read("adapters/peft_rslora"), 1.0f}};
  o.adapter_names = {"first", "", ""};
  Engine e(o);
  const auto infos = e.adapters().list();
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_EQ(infos[0].name, "first");
  EXPECT_EQ(infos[1].name, "mlx_lora");
  EXPECT_EQ(infos[2].name, "peft_rslora");
  EXPECT_EQ(std::count_if(infos.begin(), infos.end(), [](const AdapterInfo& i) { return i.resident; }), 1);
  EXPECT_TRUE(infos[2].resident && infos[2].pinned) << "the adapter applied by default stays";
  EngineOptions dup = o;
  dup.adapter_names = {"same", "same", ""};
  EXPECT_EQ(kind_of([&] { Engine::check(dup); }), ErrorKind::kBadRequest);
}

}  // namespace
}  // namespace graft::engine
