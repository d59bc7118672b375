// Mixture-of-experts families as table rows (qwen3_moe, mixtral): config fields, the router and the
// experts read as per-expert matrices, the dense layers mlp_only_layers leaves, and what is refused
// by name. The logits against transformers are in tests/engine/reference_models_test.cpp (the
// fixtures tests/fixtures/models/{qwen3_moe,mixtral}_f32 from tools/gen_moe_fixtures.py, 1e-4: F32
// on both sides, only the summation order differs); here: routing a prefill batch by expert gives
// each row what routing it alone gives (1e-5: the same per-row arithmetic, so only the kernels'
// m-independence is tested, which they promise bit for bit), the bytes a token reads, that only
// the chosen experts run, and adapters on attention and experts against PEFT. GGUF files:
// tests/runtime/moe_gguf_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "graft/core/error.h"
#include "graft/io/safetensors.h"
#include "graft/model/family.h"
#include "graft/model/loader.h"
#include "graft/runtime/lora.h"
#include "../map_source.h"
#include "graft/io/checkpoint_writer.h"
#include "support/run_util.h"
#include "test_paths.h"
#include "support/errors.h"

namespace graft::runtime {
namespace {
using test::expect_refused;
using test::make_lora_set;

namespace fs = std::filesystem;
using nlohmann::json;

std::string qwen_dir() { return test::fixture("models/qwen3_moe_f32"); }
std::string mixtral_dir() { return test::fixture("models/mixtral_f32"); }


TEST(MoeFamily, ConfigReadsTheExpertFields) {
  const model::ModelConfig q = model::parse_hf_config(test::read_json(qwen_dir() + "/config.json"), "config.json");
  EXPECT_EQ(q.num_experts, 4);
  EXPECT_EQ(q.num_experts_per_tok, 2);
  EXPECT_EQ(q.moe_intermediate_size, 32);
  EXPECT_EQ(q.intermediate_size, 64);  // the dense layer's width
  EXPECT_FALSE(q.norm_topk_prob);
  EXPECT_EQ(q.sparse_layers, (std::vector<bool>{true, false, true}));  // mlp_only_layers [1]
  const model::ModelConfig m = model::parse_hf_config(test::read_json(mixtral_dir() + "/config.json"), "config.json");
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.moe_intermediate_size, 16);  // Mixtral's intermediate_size is the experts' width
  EXPECT_TRUE(m.norm_topk_prob);           // Mixtral always renormalizes
  EXPECT_EQ(m.sparse_layers, (std::vector<bool>{true, true}));
}

// transformers 5 writes Qwen3-MoE's count as num_local_experts; the Hub's configs say num_experts.
// decoder_sparse_step: only every step-th layer is sparse.
TEST(MoeFamily, QwenV5ExpertCountAndDecoderSparseStep) {
  json j = test::read_json(qwen_dir() + "/config.json");
  j["num_local_experts"] = j["num_experts"];
  j.erase("num_experts");
  j["mlp_only_layers"] = json::array();
  j["decoder_sparse_step"] = 2;
  const model::ModelConfig c = model::parse_hf_config(j, "config.json");
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.sparse_layers, (std::vector<bool>{false, true, false}));
}

TEST(MoeFamily, FieldsThatChangeTheMathAreRefusedByName) {
  json q = test::read_json(qwen_dir() + "/config.json");
  json j = q;
  j["num_experts_per_tok"] = 5;
  expect_refused([&] { model::parse_hf_config(j, "config.json"); }, {"num_experts_per_tok", "1..4"});
  j = q;
  j["shared_expert_intermediate_size"] = 64;  // Qwen2-MoE's shared expert
  expect_refused([&] { model::parse_hf_config(j, "config.json"); },
                 {"shared_expert_intermediate_size is not supported for qwen3_moe"});
  j = q;
  j["mlp_only_layers"] = json::array({3});
  expect_refused([&] { model::parse_hf_config(j, "config.json"); }, {"mlp_only_layers holds 3"});
  j = q;
  j.erase("moe_intermediate_size");
  expect_refused([&] { model::parse_hf_config(j, "config.json"); }, {"'moe_intermediate_size'"});
  json m = test::read_json(mixtral_dir() + "/config.json");
  j = m;
  j["mlp_only_layers"] = json::array({0});
  expect_refused([&] { model::parse_hf_config(j, "config.json"); }, {"mlp_only_layers is not supported for mixtral"});
  j = m;
  j["norm_topk_prob"] = false;
  expect_refused([&] { model::parse_hf_config(j, "config.json"); }, {"norm_topk_prob false is not supported for mixtral"});
  // A dense family with an expert count is not run as a dense model.
  json d = test::read_json(test::fixture("models/qwen3_f32/config.json"));
  d["num_experts"] = 8;
  expect_refused([&] { model::parse_hf_config(d, "config.json"); }, {"num_experts is set", "qwen3"});
}

TEST(MoeFamily, ExpertsLoadAsPerExpertMatrices) {
  model::LoadedModel lm = model::load_model(mixtral_dir());
  ASSERT_EQ(lm.weights.layers.size(), 2u);
  const model::LayerWeights& L = lm.weights.layers[1];
  ASSERT_EQ(L.experts.size(), 8u);
  EXPECT_EQ(L.router.rows, 8);
  EXPECT_EQ(L.router.cols, 64);
  EXPECT_EQ(L.experts[7].gate.rows, 16);  // w1
  EXPECT_EQ(L.experts[7].down.cols, 16);  // w2
  EXPECT_EQ(L.gate.rows, 0);              // no dense MLP in a sparse layer
  // Zero-copy views of the file's own per-expert tensors.
  auto raw = io::SafetensorsFile::open(mixtral_dir() + "/model.safetensors");
  const Tensor w3 = raw->tensor("model.layers.1.block_sparse_moe.experts.7.w3.weight");
  EXPECT_EQ(std::memcmp(L.experts[7].up.dense.data, w3.data, static_cast<size_t>(w3.nbytes())), 0);
  // A token reads attention, the router and 2 of the 8 experts.
  const int64_t expert = L.experts[0].gate.nbytes() * 3;
  const int64_t attn = L.q.nbytes() + L.k.nbytes() + L.v.nbytes() + L.o.nbytes();
  EXPECT_EQ(L.bytes_per_token(2), attn + L.router.nbytes() + 2 * expert);

  model::LoadedModel q = model::load_model(qwen_dir());
  EXPECT_EQ(q.weights.layers[1].experts.size(), 0u);  // mlp_only_layers [1]: dense
  EXPECT_EQ(q.weights.layers[1].gate.rows, 64);
  EXPECT_EQ(q.weights.layers[2].experts.size(), 4u);
}

TEST(MoeFamily, MissingOrExtraExpertTensorsAreNamed) {
  const fs::path d = fs::temp_directory_path() / ("graft_moe_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(qwen_dir())) fs::copy(e.path(), d / e.path().filename());
  json j = test::read_json((d / "config.json").string());
  j["num_experts"] = 3;  // the file holds 4 experts per sparse layer
  j["num_experts_per_tok"] = 2;
  std::ofstream(d / "config.json") << j.dump(2);
  expect_refused([&] { model::load_model(d.string()); },
                 {"model.layers.0.mlp.gate.weight' has shape [4, 64], expected [3, 64]",
                  "unexpected tensor 'model.layers.0.mlp.experts.3.down_proj.weight'"});
  j["num_experts"] = 4;
  j["mlp_only_layers"] = json::array();  // layer 1 then needs experts, and holds a dense MLP
  std::ofstream(d / "config.json") << j.dump(2);
  expect_refused([&] { model::load_model(d.string()); },
                 {"missing tensor 'model.layers.1.mlp.experts.0.gate_proj.weight'",
                  "unexpected tensor 'model.layers.1.mlp.gate_proj.weight'"});
  fs::remove_all(d);
}

// A prefill batch groups its rows by expert; each row must get what it gets routed alone, and
// two sequences in one pass what each gets alone.
TEST(MoeFamily, GroupedPrefillEqualsTokenByToken) {
  for (const std::string& dir : {qwen_dir(), mixtral_dir()}) {
    model::LoadedModel lm = model::load_model(dir);
    const json ref = test::read_json(dir + "/reference.json");
    const auto ids = ref["prompts"][1]["ids"].get<std::vector<int32_t>>();
    const std::vector<float> whole = test::prompt_logits(lm, nullptr, {}, ids);
    ThreadPool pool(2);
    Transformer t(lm.config, lm.weights);
    KVCache cache(lm.config, static_cast<int64_t>(ids.size()) + 1, test::kReferenceCache);
    const int64_t V = lm.config.vocab_size;
    float worst = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      SequenceInput in{&cache, std::span(&ids[i], 1), true, {}};
      const auto row = t.forward(pool, std::span(&in, 1));
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::abs(row[v] - whole[i * V + v]));
    }
    EXPECT_LE(worst, 1e-5f) << dir;
  }
}

// A large pass runs its experts in several batches (Transformer::experts_grouped, each about 1.5
// MiB of rows: 2,048 rows at this width), each adding into y: 8 sequences of 200 tokens route 3,200
// rows to experts (2 of 4 a token), so every expert's rows cross batches. Each sequence's logits
// equal its own pass's (400 expert rows: one batch) bit for bit: no kernel depends on the other
// rows, and each y element sums its experts in the same order. With an expert adapter (PEFT's, and
// mlx-lm's with the router) on every sequence, its terms run inside the batch's calls; on every
// other one, a projection whose rows mix both gets them after the call, gathered (add_terms):
// the same bits either way.
TEST(MoeFamily, ExpertBatchesOfALargePassEqualEachSequenceAlone) {
  struct Case {
    std::string model, adapter;  // no adapter when empty
    int64_t every;               // the adapter on sequences s % every == 0
  };
  const std::string peft = "engine_adapters/qwen3_moe_f32/peft_experts", mlx = "engine_adapters/mixtral_f32/mlx_switch";
  const std::vector<Case> cases = {{qwen_dir(), "", 1},
                                   {mixtral_dir(), "", 1},
                                   {qwen_dir(), test::fixture(peft), 1},
                                   {qwen_dir(), test::fixture(peft), 2},
                                   {mixtral_dir(), test::fixture(mlx), 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model + " " + c.adapter + " every " + std::to_string(c.every));
    model::LoadedModel lm = model::load_model(c.model);
    std::shared_ptr<const test::LoraSet> set;
    if (!c.adapter.empty()) set = make_lora_set(lm.config, *lm.source, {{test::read_adapter(c.adapter), 1.0f}});
    const int64_t S = 8, n = 200, V = lm.config.vocab_size;
    ASSERT_GT(S * n * lm.config.num_experts_per_tok, Transformer::expert_batch_rows(lm.config))
        << "the pass must span more than one batch";
    std::vector<std::vector<int32_t>> ids(S);
    for (int64_t s = 0; s < S; ++s)
      for (int64_t i = 0; i < n; ++i) ids[s].push_back(static_cast<int32_t>((s * 37 + i * 11 + i * i) % V));
    const auto on = test::scaled(set, {1.0f});
    auto adapters = [&](int64_t s) {
      return set && s % c.every == 0 ? std::span<const ScaledAdapter>(on) : std::span<const ScaledAdapter>();
    };
    ThreadPool pool(2);
    Transformer t(lm.config, lm.weights);
    std::vector<std::unique_ptr<KVCache>> caches;
    std::vector<SequenceInput> batch;
    for (int64_t s = 0; s < S; ++s) {
      caches.push_back(std::make_unique<KVCache>(lm.config, n + 1, test::kReferenceCache));
      batch.push_back({caches.back().get(), ids[s], false, adapters(s)});
    }
    const std::vector<float> together = t.forward(pool, batch);
    ASSERT_EQ(together.size(), static_cast<size_t>(S * V));
    for (int64_t s = 0; s < S; ++s) {
      KVCache cache(lm.config, n + 1, test::kReferenceCache);
      SequenceInput in{&cache, ids[s], false, adapters(s)};
      const std::vector<float> alone = t.forward(pool, std::span(&in, 1));
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), together.begin() + s * V)) << "sequence " << s;
    }
  }
}

// PEFT LoRA on the attention projections of a MoE model (tests/fixtures/engine_adapters/<m>/peft_lora,
// tools/gen_moe_fixtures.py --peft): unfused and fused against PEFT's unmerged forward, 1e-4 (F32).
TEST(MoeFamily, AttentionLoraMatchesPeftFusedAndUnfused) {
  for (const char* m : {"qwen3_moe_f32", "mixtral_f32"}) {
    const std::string base_dir = test::fixture(std::string("models/") + m);
    const std::string dir = test::fixture(std::string("engine_adapters/") + m + "/peft_lora");
    model::LoadedModel base = model::load_model(base_dir);
    const std::vector<adapter::AdapterUse> uses = {{test::read_adapter(dir), 1.0f}};
    auto set = make_lora_set(base.config, *base.source, uses);
    model::LoadOptions o;
    o.fused_adapters = uses;
    model::LoadedModel fused = model::load_model(base_dir, o);
    const json ref = test::read_json(dir + "/reference.json");
    auto want = io::SafetensorsFile::open(dir + "/reference.safetensors");
    for (size_t p = 0; p < ref["prompts"].size(); ++p) {
      const auto ids = ref["prompts"][p]["ids"].get<std::vector<int32_t>>();
      const Tensor w = want->tensor("logits_" + std::to_string(p));
      EXPECT_LE(test::max_abs_diff(test::prompt_logits(base, set, {1.0f}, ids), w), 1e-4f) << m << " unfused " << p;
      EXPECT_LE(test::max_abs_diff(test::prompt_logits(fused, nullptr, {}, ids), w), 1e-4f) << m << " fused " << p;
    }
  }
}

// Only the chosen experts are computed: with one expert of one layer poisoned (NaN weights), a
// one-token pass gives NaN logits exactly when the router chose that expert, so exactly
// num_experts_per_tok experts of each layer poison it. Computing every expert and weighting the
// unchosen ones by 0 would poison all of them (NaN * 0 is NaN).
TEST(MoeFamily, OnlyTheChosenExpertsAreComputed) {
  for (const std::string& dir : {qwen_dir(), mixtral_dir()}) {
    model::LoadedModel lm = model::load_model(dir);
    const int32_t id = test::read_json(dir + "/reference.json")["prompts"][0]["ids"][0].get<int32_t>();
    for (int64_t l = 0; l < lm.config.num_layers; ++l) {
      if (!lm.config.layer_is_sparse(l)) continue;
      int64_t poisoning = 0;
      for (int64_t e = 0; e < lm.config.num_experts; ++e) {
        model::Matrix& gate = lm.weights.layers[static_cast<size_t>(l)].experts[static_cast<size_t>(e)].gate;
        const model::Matrix kept = gate;
        Tensor nan = Tensor::zeros_f32({gate.rows, gate.cols});
        std::fill(nan.mutable_as<float>(), nan.mutable_as<float>() + nan.numel(), std::nanf(""));
        gate = model::Matrix::of(nan);
        const auto logits = test::prompt_logits(lm, nullptr, {}, {id});
        poisoning += std::any_of(logits.begin(), logits.end(), [](float v) { return std::isnan(v); });
        gate = kept;
      }
      EXPECT_EQ(poisoning, lm.config.num_experts_per_tok) << dir << " layer " << l;
    }
  }
}

// Expert adapters against PEFT and mlx-lm: engine_adapters/<model>/peft_experts are what PEFT 0.21 writes on
// transformers 5 (which holds the experts as 3-D parameters): q_proj pairs plus target_parameters
// LoRA on experts.gate_up_proj and experts.down_proj, nested (lora_A [E·r, in], lora_B [out, E·r]).
// qwen3_moe: PEFT's own conversion of target_modules naming the MLP (gate_up_proj at twice the
// rank, so the ranks say which level is which; the dense layer 1 gets none); mixtral:
// target_parameters written out at one rank, so binding tells the levels apart by shape.
// engine_adapters/<model>/mlx_switch are mlx-lm 0.32's own LoRA over every layer: LoRASwitchLinear
// (lora_a [E, r, in], lora_b [E, out, r]) on the SwitchGLU experts, LoRALinear on attention, the
// router and the dense MLP. Logits within 1e-4 of the tool's own (F32; the references sum the same
// products in another order; mlx-lm's unfused), fused and
// unfused; scale 0 is the base bit for bit; a batch mixing adapter and base gives each sequence
// what it gets alone (1e-5: batched and single-sequence kernels group sums differently).
TEST(MoeFamily, ExpertLoraMatchesPeftAndMlxLm) {
  struct Case {
    std::string model, adapter;
    size_t expert_terms;
  };
  // expert_terms: (sparse layer, expert, part) entries, plus the router of each sparse layer for
  // mlx-lm, whose default LoRA keys include it.
  const std::vector<Case> cases = {
      {qwen_dir(), test::fixture("engine_adapters/qwen3_moe_f32/peft_experts"), 2u * 4u * 3u},  // 2 sparse layers
      {mixtral_dir(), test::fixture("engine_adapters/mixtral_f32/peft_experts"), 2u * 8u * 3u},
      {qwen_dir(), test::fixture("engine_adapters/qwen3_moe_f32/mlx_switch"), 2u * (4u * 3u + 1u)},
      {mixtral_dir(), test::fixture("engine_adapters/mixtral_f32/mlx_switch"), 2u * (8u * 3u + 1u)}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.adapter);
    const std::vector<adapter::AdapterUse> uses = {{test::read_adapter(c.adapter), 1.0f}};
    model::LoadOptions o;
    o.fused_adapters = uses;
    model::LoadedModel fused = model::load_model(c.model, o);
    const json ref = test::read_json(c.adapter + "/reference.json");
    auto want = io::SafetensorsFile::open(c.adapter + "/reference.safetensors");
    model::LoadedModel base = model::load_model(c.model);
    auto set = make_lora_set(base.config, *base.source, uses);
    size_t expert_terms = 0;  // on experts' projections and routers
    for (const auto& [role, terms] : set->adapters[0]->terms)
      expert_terms += role.expert >= 0 || role.role == model::Role::Router;
    EXPECT_EQ(expert_terms, c.expert_terms);
    std::vector<std::vector<float>> alone;
    for (size_t p = 0; p < ref["prompts"].size(); ++p) {
      const auto ids = ref["prompts"][p]["ids"].get<std::vector<int32_t>>();
      const Tensor w = want->tensor("logits_" + std::to_string(p));
      EXPECT_LE(test::max_abs_diff(test::prompt_logits(fused, nullptr, {}, ids), w), 1e-4f) << "fused " << p;
      alone.push_back(test::prompt_logits(base, set, {1.0f}, ids));
      EXPECT_LE(test::max_abs_diff(alone.back(), w), 1e-4f) << "unfused " << p;
      EXPECT_EQ(test::prompt_logits(base, set, {0.0f}, ids), test::prompt_logits(base, nullptr, {}, ids)) << p;
    }
    ThreadPool pool(2);
    Transformer t(base.config, base.weights);
    const auto a = ref["prompts"][1]["ids"].get<std::vector<int32_t>>(), b = ref["prompts"][2]["ids"].get<std::vector<int32_t>>();
    KVCache ca(base.config, 64, test::kReferenceCache), cb(base.config, 64, test::kReferenceCache);
    const auto on = test::scaled(set, {1.0f}), off = test::scaled(set, {0.0f});
    SequenceInput both[2] = {{&ca, a, true, on}, {&cb, b, true, off}};
    const auto mixed = t.forward(pool, both);
    const auto base_b = test::prompt_logits(base, nullptr, {}, b);
    const size_t na = alone[1].size();
    ASSERT_EQ(mixed.size(), na + base_b.size());
    float da = 0, db = 0;
    for (size_t i = 0; i < na; ++i) da = std::max(da, std::abs(mixed[i] - alone[1][i]));
    for (size_t i = 0; i < base_b.size(); ++i) db = std::max(db, std::abs(mixed[na + i] - base_b[i]));
    EXPECT_LE(da, 1e-5f);
    EXPECT_LE(db, 1e-5f);
    // Token by token (a decode step: every chosen expert's gate and up in one dispatch, the terms
    // inside it) what the prompt pass gives.
    KVCache cd(base.config, 64, test::kReferenceCache);
    const int64_t V = base.config.vocab_size;
    float dd = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      SequenceInput in{&cd, std::span(&a[i], 1), true, on};
      const auto row = t.forward(pool, std::span(&in, 1));
      for (int64_t v = 0; v < V; ++v) dd = std::max(dd, std::abs(row[v] - alone[1][i * V + v]));
    }
    EXPECT_LE(dd, 1e-5f);
  }
}

// An expert adapter against a model whose experts have other shapes is refused by name, with
// nothing changed: the Mixtral adapter (8 experts of width 16) on the Qwen3-MoE checkpoint.
TEST(MoeFamily, PeftExpertLoraOnTheWrongModelRefused) {
  const auto use = test::read_adapter(test::fixture("engine_adapters/mixtral_f32/peft_experts"));
  model::LoadOptions o;
  o.fused_adapters = {{use, 1.0f}};
  expect_refused([&] { model::load_model(qwen_dir(), o); }, {"mlp.experts.4.", "no weight was changed"});
}

TEST(MoeFamily, FamilyRowsAndGgufArchs) {
  EXPECT_TRUE(model::family("qwen3_moe").moe.present());
  EXPECT_FALSE(model::family("qwen3").moe.present());
  EXPECT_EQ(std::string(model::family_for_gguf_arch("llama", true).model_type), "mixtral");
  EXPECT_EQ(std::string(model::family_for_gguf_arch("llama", false).model_type), "llama");
  EXPECT_EQ(std::string(model::family_for_gguf_arch("qwen3moe", true).model_type), "qwen3_moe");
  expect_refused([] { model::family_for_gguf_arch("qwen3moe", false); }, {"qwen3moe", "without", "expert_count"});
  expect_refused([] { model::family_for_gguf_arch("qwen3", true); }, {"qwen3", "with", "expert_count"});
}

}  // namespace
}  // namespace graft::runtime
