// DoRA, LoHa and LoKr in the engine, fused and unfused, against the real tools' unmerged forward
// (tools/gen_dora_loha_fixtures.py: PEFT use_dora / LOHA / LOKR, LyCORIS loha / lokr) on the tiny
// llama_f32 checkpoint, at two user scales (1.0 and 0.5; PEFT: every module's scaling multiplied).
//
// Tolerance: max |logit - reference| <= 1e-4, as for LoRA (adapter_references_test): F32 on both sides,
// only the summation order differs (the DoRA norm: graft expands ‖W + σBA‖² into three per-row
// dot products in double; PEFT forms W + σBA in F32 and takes its norm). Greedy continuations of the
// fused and unfused paths must be identical (16 tokens).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/affine_quant.h"
#include "graft/core/error.h"
#include "graft/io/safetensors.h"
#include "graft/model/loader.h"
#include "graft/runtime/kernels.h"
#include "graft/runtime/lora.h"
#include "support/run_util.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {

using nlohmann::json;
using test::greedy_ids;
using test::make_lora_set;
using test::scaled;
using test::max_abs_diff;
using test::prompt_logits;
using test::read_adapter;
using test::read_json;

constexpr float kTol = 1e-4f;

const float kScales[] = {1.0f, 0.5f};

// Unfused at each user scale and fused (F32, strength = scale) against `<prefix>logits_<p>_s<k>`, on
// the prompts of `prompts_file` (the tiny llama's by default).
void check_two_scales(const std::string& adapter_path, const std::string& ref_file, const std::string& prefix,
                      bool fused_too, const std::string& model = "llama_f32",
                      const std::string& prompts_file = test::fixture("adapters/peft_dora/expected.json")) {
  const std::string model_dir = test::fixture("models/" + model);
  const json prompts = read_json(prompts_file)["prompts"];
  auto a = read_adapter(adapter_path);
  model::LoadedModel base = model::load_model(model_dir);
  auto set = make_lora_set(base.config, *base.source, {{a, 1.0f}});
  auto ref = io::SafetensorsFile::open(ref_file);
  for (int k = 0; k < 2; ++k) {
    model::LoadOptions o;
    o.fused_adapters = {{a, kScales[k]}};
    o.weight_dtype = DType::F32;
    std::optional<model::LoadedModel> fused;
    if (fused_too) fused.emplace(model::load_model(model_dir, o));
    for (size_t p = 0; p < prompts.size(); ++p) {
      const auto ids = prompts[p]["ids"].get<std::vector<int32_t>>();
      const Tensor want = ref->tensor(prefix + "logits_" + std::to_string(p) + "_s" + std::to_string(k));
      EXPECT_LE(max_abs_diff(prompt_logits(base, set, {kScales[k]}, ids), want), kTol)
          << adapter_path << " unfused, scale " << kScales[k] << ", prompt " << p;
      if (fused) {
        EXPECT_LE(max_abs_diff(prompt_logits(*fused, nullptr, {}, ids), want), kTol)
            << adapter_path << " fused, scale " << kScales[k] << ", prompt " << p;
        EXPECT_EQ(greedy_ids(base, set, {kScales[k]}, ids, 16), greedy_ids(*fused, nullptr, {}, ids, 16))
            << adapter_path << " fused vs unfused greedy, scale " << kScales[k];
      }
    }
  }
}

TEST(DoraLive, PeftDoraBothPathsTwoScales) {
  const std::string d = test::fixture("adapters/peft_dora");
  check_two_scales(d, d + "/reference.safetensors", "", true);
}

// q/k/v with biases (qwen2): PEFT adds the bias after the DoRA rescale, and graft's epilogue must too.
TEST(DoraLive, PeftDoraOnBiasedProjectionsBothPathsTwoScales) {
  const std::string d = test::fixture("adapters/peft_dora_qwen2");
  check_two_scales(d, d + "/reference.safetensors", "", true, "qwen2_f32", d + "/expected.json");
}

// Phi-3's fused qkv_proj / gate_up_proj: m and the row norms are per output row of the fused
// weight, so the binding's split by rows splits them too (fused: merged into the parts; unfused:
// each part's rows keep their magnitudes).
TEST(DoraLive, PeftDoraOnFusedProjectionsBothPathsTwoScales) {
  const std::string d = test::fixture("adapters/peft_dora_phi3");
  check_two_scales(d, d + "/reference.safetensors", "", true, "phi3_f32", d + "/expected.json");
}

TEST(LohaLive, PeftAndLycorisBothPathsTwoScales) {
  for (const char* f : {"peft_loha", "lycoris_loha"}) {
    const std::string d = test::fixture(std::string("adapters/") + f);
    const std::string path = std::string(f) == "lycoris_loha" ? d + "/adapter.safetensors" : d;
    check_two_scales(path, d + "/reference.safetensors", "", true);
  }
}

TEST(LokrLive, PeftAndLycorisUnfusedTwoScales) {
  const std::string ref = test::fixture("adapters/lokr_live/reference.safetensors");
  for (const char* f : {"peft_lokr", "peft_lokr_decompose_both", "lycoris_lokr", "lycoris_lokr_decompose_both"}) {
    const std::string d = test::fixture(std::string("adapters/") + f);
    const std::string path = std::string(f).rfind("lycoris", 0) == 0 ? d + "/adapter.safetensors" : d;
    check_two_scales(path, ref, std::string(f) + ".", true);
  }
}

// Two DoRA adapters on shared projections: PEFT composes them in order, each norm from the base.
TEST(DoraLive, TwoAdaptersComposeAsPeft) {
  const std::string root = test::fixture("adapters/peft_dora_pair");
  const std::string model_dir = test::fixture("models/llama_f32");
  const json prompts = read_json(root + "/reference.json")["prompts"];
  auto a = read_adapter(root + "/a"), b = read_adapter(root + "/b");
  model::LoadedModel base = model::load_model(model_dir);
  auto set = make_lora_set(base.config, *base.source, {{a, 1.0f}, {b, 1.0f}});
  model::LoadOptions o;
  o.fused_adapters = {{a, 1.0f}, {b, 1.0f}};
  o.weight_dtype = DType::F32;
  model::LoadedModel fused = model::load_model(model_dir, o);
  auto ref = io::SafetensorsFile::open(root + "/reference.safetensors");
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto ids = prompts[p]["ids"].get<std::vector<int32_t>>();
    const std::string n = "logits_" + std::to_string(p);
    EXPECT_LE(max_abs_diff(prompt_logits(base, set, {1.0f, 1.0f}, ids), ref->tensor(n)), kTol) << n;
    EXPECT_LE(max_abs_diff(prompt_logits(fused, nullptr, {}, ids), ref->tensor(n)), kTol) << n << " fused";
    EXPECT_LE(max_abs_diff(prompt_logits(base, set, {0.5f, 1.0f}, ids), ref->tensor(n + "_a_half")), kTol) << n;
  }
}

// A batch mixing a DoRA adapter at two scales and the base equals the separate runs (each row gets
// its own per-row factor), and a scale change between tokens takes effect at the next token.
TEST(DoraLive, MixedBatchAndLiveScaleChange) {
  const std::string model_dir = test::fixture("models/llama_f32");
  auto a = read_adapter(test::fixture("adapters/peft_dora"));
  model::LoadedModel m = model::load_model(model_dir);
  auto set = make_lora_set(m.config, *m.source, {{a, 1.0f}});
  const std::vector<int32_t> ids = {361, 310, 78, 70};
  ThreadPool pool(2);
  prepare_lora_adapter(*set->adapters[0], m.weights, pool);
  Transformer t(m.config, m.weights);
  const float sc[3] = {1.0f, 0.5f, 0.0f};
  std::vector<KVCache> caches;
  std::vector<std::vector<ScaledAdapter>> chosen;
  for (int i = 0; i < 3; ++i) {
    caches.emplace_back(m.config, 8, test::kReferenceCache);  // as prompt_logits
    chosen.push_back({{set->adapters[0], sc[i], 0}});
  }
  std::vector<SequenceInput> batch;
  for (int i = 0; i < 3; ++i) batch.push_back({&caches[i], ids, false, chosen[i]});
  const std::vector<float> lg = t.forward(pool, batch);
  const int64_t V = m.config.vocab_size;
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> one = prompt_logits(m, set, {sc[i]}, ids);
    for (int64_t v = 0; v < V; ++v)
      ASSERT_NEAR(lg[i * V + v], one[(ids.size() - 1) * V + v], 1e-5f) << "sequence " << i;
  }
  // Scale 0 is the base model exactly.
  const std::vector<float> base_lg = prompt_logits(m, nullptr, {}, ids);
  for (int64_t v = 0; v < V; ++v) ASSERT_EQ(lg[2 * V + v], base_lg[(ids.size() - 1) * V + v]);
  // Live change: prompt at 1.0, next token at 0.5 == a run whose last token used 0.5.
  KVCache c1(m.config, 8, test::kReferenceCache), c2(m.config, 8, test::kReferenceCache);
  const auto s1 = scaled(set, {1.0f}), s2 = scaled(set, {0.5f});
  const std::vector<int32_t> head(ids.begin(), ids.end() - 1);
  const int32_t last = ids.back();
  SequenceInput p1{&c1, head, false, s1};
  t.forward(pool, std::span(&p1, 1));
  SequenceInput n1{&c1, std::span(&last, 1), false, s2};
  const std::vector<float> changed = t.forward(pool, std::span(&n1, 1));
  EXPECT_GT(std::abs(changed[0] - lg[0]) + std::abs(changed[1] - lg[1]), 0.0f);
  SequenceInput p2{&c2, head, false, s1};
  t.forward(pool, std::span(&p2, 1));
  SequenceInput n2{&c2, std::span(&last, 1), false, s2};
  EXPECT_EQ(t.forward(pool, std::span(&n2, 1)), changed);
}

// More distinct DoRA scales in one batch than the factor cache holds (8): each row still gets the
// factor of its own scale (formed on the fly when evicted), equal to its run alone.
TEST(DoraLive, ManyScalesInOneBatch) {
  auto a = read_adapter(test::fixture("adapters/peft_dora"));
  model::LoadedModel m = model::load_model(test::fixture("models/llama_f32"));
  auto set = make_lora_set(m.config, *m.source, {{a, 1.0f}});
  const std::vector<int32_t> ids = {361, 310, 78, 70};
  ThreadPool pool(2);
  Transformer t(m.config, m.weights);
  constexpr int kSeqs = 11;
  float sc[kSeqs];
  std::vector<KVCache> caches;
  std::vector<std::vector<ScaledAdapter>> chosen;
  std::vector<SequenceInput> batch;
  for (int i = 0; i < kSeqs; ++i) {
    sc[i] = 0.25f + 0.125f * i;
    caches.emplace_back(m.config, 8, test::kReferenceCache);  // as prompt_logits
    chosen.push_back(scaled(set, {sc[i]}));
  }
  for (int i = 0; i < kSeqs; ++i) batch.push_back({&caches[i], ids, false, chosen[i]});
  const std::vector<float> lg = t.forward(pool, batch);
  const int64_t V = m.config.vocab_size;
  for (int i = 0; i < kSeqs; ++i) {
    const std::vector<float> one = prompt_logits(m, set, {sc[i]}, ids);
    for (int64_t v = 0; v < V; ++v)
      ASSERT_NEAR(lg[i * V + v], one[(ids.size() - 1) * V + v], 1e-5f) << "sequence " << i;
  }
}

// On a quantized weight the DoRA row norms come from the dequantized rows: the term on an
// mlx-affine matrix equals the same term on that matrix dequantized (to F32 rounding).
TEST(DoraLive, QuantizedWeightUsesDequantizedRows) {
  const int64_t out = 24, in = 64, r = 3;
  std::vector<float> wv(out * in), av(r * in), bv(out * r), mv(out);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::sin(0.37f * i) * 0.2f;
  for (size_t i = 0; i < av.size(); ++i) av[i] = std::cos(0.11f * i) * 0.1f;
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = std::sin(0.23f * i + 1) * 0.1f;
  for (size_t i = 0; i < mv.size(); ++i) mv[i] = 1.0f + 0.05f * i;
  auto owned = [](const Shape& s, const std::vector<float>& v) {
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return Tensor::owned(DType::F32, s, std::move(bytes));
  };
  const Tensor w = owned({out, in}, wv);
  const model::Matrix q = model::Matrix::of(quantize_affine(w, 4, 32, DType::F32));
  const model::Matrix dq = model::Matrix::of(dequantize_affine(q.quant));
  auto make_term = [&] {
    LoraTerm t;
    t.a = owned({r, in}, av);
    t.b = owned({out, r}, bv);
    std::vector<float> bt(r * out);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t k = 0; k < r; ++k) bt[k * out + o] = bv[o * r + k];
    t.bt = owned({r, out}, bt);
    t.scale = 2.0f;
    auto d = std::make_shared<DoraRows>();
    d->magnitude = mv;
    t.dora = d;
    return t;
  };
  const LoraTerm tq = make_term(), td = make_term();
  ThreadPool pool(2);
  std::vector<float> x(in);
  for (int64_t i = 0; i < in; ++i) x[i] = std::cos(0.5f * i);
  std::vector<float> yq(out), yd(out), lq(r), ld(r);
  compute::matmul_affine(pool, x.data(), 1, in, q.quant, yq.data());
  compute::matmul(pool, x.data(), 1, in, dq.dense, yd.data());
  lora_term_down(pool, tq, x.data(), 1, in, q, lq.data(), {0.5f});
  lora_term_down(pool, td, x.data(), 1, in, dq, ld.data(), {0.5f});
  lora_term_up(tq, lq.data(), 0.5f, 0, out, yq.data());
  lora_term_up(td, ld.data(), 0.5f, 0, out, yd.data());
  for (int64_t o = 0; o < out; ++o) {
    EXPECT_NEAR(tq.dora->w2[o], td.dora->w2[o], 1e-9 * td.dora->w2[o]) << o;
    EXPECT_NEAR(yq[o], yd[o], 1e-5f * (1 + std::abs(yd[o]))) << o;
  }
  // and the norms are not those of the unquantized weight
  double diff = 0;
  for (int64_t o = 0; o < out; ++o) {
    double s = 0;
    for (int64_t i = 0; i < in; ++i) s += double(wv[o * in + i]) * wv[o * in + i];
    diff = std::max(diff, std::abs(s - tq.dora->w2[o]));
  }
  EXPECT_GT(diff, 0.0);
}

// mlx-lm DoRA with the embedding among its keys (DoRAEmbedding, per-row norm over [vocab, hidden]),
// made, run and fused by mlx-lm (tools/gen_dora_loha_fixtures.py): graft's fused logits equal mlx-lm's
// unfused forward within kTol (F32 on both sides; the embedding row's norm and factor are the only
// added roundings), on an untied llama (lookup only) and a tied qwen2 (lookup and head: mlx-lm's
// DoRAEmbedding.as_linear); the unfused path refuses the embedding DoRA, naming it.
TEST(DoraLive, MlxEmbeddingDoraFusedMatchesMlxLm) {
  for (const char* f : {"mlx_dora_embed", "mlx_dora_embed_tied"}) {
    const std::string d = test::fixture(std::string("adapters/") + f);
    const json ex = read_json(d + "/expected.json");
    const std::string model_dir = test::source_dir() + "/" + ex["base_model"].get<std::string>();
    auto a = read_adapter(d);
    model::LoadOptions o;
    o.fused_adapters = {{a, 1.0f}};
    o.weight_dtype = DType::F32;
    model::LoadedModel fused = model::load_model(model_dir, o);
    model::LoadedModel base = model::load_model(model_dir);
    auto ref = io::SafetensorsFile::open(d + "/reference.safetensors");
    for (size_t p = 0; p < ex["prompts"].size(); ++p) {
      const auto ids = ex["prompts"][p]["ids"].get<std::vector<int32_t>>();
      const Tensor want = ref->tensor("logits_" + std::to_string(p));
      const float d = max_abs_diff(prompt_logits(fused, nullptr, {}, ids), want);
      const float d_base = max_abs_diff(prompt_logits(base, nullptr, {}, ids), want);
      std::printf("%s prompt %zu: max |fused - mlx-lm| %.3g (base model: %.3g)\n", f, p, d, d_base);
      EXPECT_LE(d, kTol) << f << " fused, prompt " << p;
      EXPECT_GT(d_base, 100 * kTol) << f << ", prompt " << p << ": the adapter must matter";
    }
    try {
      make_lora_set(base.config, *base.source, {{a, 1.0f}});
      ADD_FAILURE() << f << ": DoRA on the embedding was accepted unfused";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("model.embed_tokens"), std::string::npos) << e.what();
    }
  }
}

// What the unfused path cannot do exactly is refused by name, before anything changes: DoRA (and
// LoKr, LoHa) on the embedding run fused only.
TEST(DoraLive, EmbeddingDoraRefusedUnfused) {
  model::LoadedModel m = model::load_model(test::fixture("models/llama_f32"));
  auto zeros = [](const Shape& s) {
    return Tensor::owned(DType::F32, s, std::vector<uint8_t>(static_cast<size_t>(shape_numel(s) * 4), 0));
  };
  auto a = std::make_shared<adapter::WeightAdapter>();
  a->path = "in-memory";
  adapter::AdapterTarget t;
  t.module = "model.embed_tokens";
  t.embedding = true;
  t.update = adapter::DoraUpdate{adapter::LowRankUpdate{zeros({2, m.config.hidden_size}),
                                                        zeros({m.config.vocab_size, 2}), 1.0f},
                                 zeros({m.config.vocab_size})};
  a->targets.push_back(t);
  try {
    make_lora_set(m.config, *m.source, {{a, 1.0f}});
    ADD_FAILURE() << "DoRA on the embedding was accepted unfused";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model.embed_tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dora"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--adapter"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no weight was changed"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace graft::runtime
