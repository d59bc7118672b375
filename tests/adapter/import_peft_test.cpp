// PEFT LoRA / LoKr import: scales (alpha/r, rsLoRA, patterns), embeddings, modules_to_save,
// base-layer copies, config classification and refusals.
#include "import_test_util.h"

namespace graft::adapter {
namespace {

using test::expect_error;
using test::make_tensor;
using test::TempDir;
using test::TensorList;

const std::string kP = "base_model.model.";
const std::string kQ0 = kP + "model.layers.0.self_attn.q_proj";
const std::string kQ1 = kP + "model.layers.1.self_attn.q_proj";
const std::string kV0 = kP + "model.layers.0.self_attn.v_proj";

// What peft 0.21.2 LoraConfig(...).save_pretrained writes by default (every field).
const char* kPeft021Defaults = R"({
  "alora_invocation_tokens": null, "alpha_pattern": {}, "arrow_config": null,
  "auto_mapping": {"base_model_class": "LlamaForCausalLM", "parent_library": "transformers.models.llama.modeling_llama"},
  "base_model_name_or_path": "tiny-llama", "bias": "none", "corda_config": null, "ensure_weight_tying": false,
  "eva_config": null, "exclude_modules": null, "fan_in_fan_out": false, "inference_mode": true,
  "init_lora_weights": true, "kasa_config": null, "layer_replication": null, "layers_pattern": null,
  "layers_to_transform": null, "loftq_config": {}, "lora_alpha": 16, "lora_bias": false, "lora_dropout": 0.05,
  "lora_ga_config": null, "megatron_config": null, "megatron_core": "megatron.core", "modules_to_save": null,
  "monteclora_config": null, "peft_type": "LORA", "peft_version": "0.21.2", "qalora_group_size": 16, "r": 4,
  "rank_pattern": {}, "revision": null, "target_modules": ["q_proj", "v_proj"], "target_parameters": null,
  "task_type": "CAUSAL_LM", "trainable_token_indices": null, "use_bdlora": null, "use_dora": false,
  "use_qalora": false, "use_rslora": false, "velora_config": null})";

const char* kLokr021Defaults = R"({
  "alpha": 8, "alpha_pattern": {}, "auto_mapping": null, "base_model_name_or_path": null, "decompose_both": false,
  "decompose_factor": -1, "exclude_modules": null, "inference_mode": true, "init_weights": true,
  "layers_pattern": null, "layers_to_transform": null, "module_dropout": 0.0, "modules_to_save": null,
  "peft_type": "LOKR", "peft_version": "0.21.2", "r": 4, "rank_dropout": 0.0, "rank_dropout_scale": false,
  "rank_pattern": {}, "revision": null, "target_modules": ["q_proj"], "task_type": null,
  "use_effective_conv2d": false})";

// A linear LoRA pair with non-square shapes: A [r, 6], B [5, r].
void add_pair(TensorList& t, const std::string& module, int64_t r, const std::string& infix = "") {
  t.push_back({module + ".lora_A" + infix + ".weight", make_tensor({r, 6})});
  t.push_back({module + ".lora_B" + infix + ".weight", make_tensor({5, r}, 1.0f)});
}

WeightAdapter import(const TempDir& d, const std::string& cfg, const TensorList& t) {
  d.write_json("adapter_config.json", cfg);
  d.write_tensors("adapter_model.safetensors", t);
  return read_weight_adapter(d.path());
}

void expect_refused(const std::string& cfg, const TensorList& t, std::initializer_list<std::string> parts,
                    bool names_config = false) {
  TempDir d;
  d.write_json("adapter_config.json", cfg);
  d.write_tensors("adapter_model.safetensors", t);
  std::vector<std::string> all(parts);
  all.push_back(names_config ? d.file("adapter_config.json") : d.file("adapter_model.safetensors"));
  try {
    read_weight_adapter(d.path());
    ADD_FAILURE() << "expected refusal: " << *parts.begin();
  } catch (const Error& e) {
    for (const auto& p : all) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

float scale_of(const WeightAdapter& a, const std::string& module) {
  const auto* t = test::find_target(a, module);
  if (!t) {
    ADD_FAILURE() << "no target " << module;
    return 0;
  }
  if (const auto* l = std::get_if<LowRankUpdate>(&t->update)) return l->scale;
  return std::get<KroneckerUpdate>(t->update).scale;
}

TEST(ImportPeft, DefaultConfigOfPeft021LoadsWithAlphaOverR) {
  TempDir d;
  TensorList t;
  add_pair(t, kQ0, 4);
  add_pair(t, kV0, 4);
  WeightAdapter a = import(d, kPeft021Defaults, t);
  EXPECT_EQ(a.format, AdapterFormat::Peft);
  ASSERT_EQ(a.targets.size(), 2u);
  const auto& u = test::lowrank(test::find_target(a, kQ0));  // module keeps base_model.model.
  EXPECT_EQ(u.a.shape, (Shape{4, 6}));
  EXPECT_EQ(u.b.shape, (Shape{5, 4}));
  EXPECT_FLOAT_EQ(test::at(u.b, 0), 1.01f);  // not swapped
  EXPECT_FLOAT_EQ(u.scale, 4.0f);           // 16 / 4
  EXPECT_EQ(a.metadata.at("r"), "4");
  EXPECT_EQ(a.metadata.at("lora_alpha"), "16");
  EXPECT_EQ(a.metadata.at("base_model_name_or_path"), "tiny-llama");
}

TEST(ImportPeft, DefaultsAreRAndAlphaEight) {
  TempDir d;
  TensorList t;
  add_pair(t, kQ0, 8);
  EXPECT_FLOAT_EQ(scale_of(import(d, R"({"peft_type": "LORA"})", t), kQ0), 1.0f);
}

TEST(ImportPeft, RsLora) {
  TempDir d;
  TensorList t;
  add_pair(t, kQ0, 8);
  WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 8, "lora_alpha": 16, "use_rslora": true})", t);
  EXPECT_FLOAT_EQ(scale_of(a, kQ0), static_cast<float>(16.0 / std::sqrt(8.0)));
}

TEST(ImportPeft, DefaultAdapterNameInfixAccepted) {
  TempDir d;
  TensorList t;
  add_pair(t, kQ0, 4, ".default");
  WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8})", t);
  EXPECT_EQ(a.targets.at(0).module, kQ0);
  EXPECT_FLOAT_EQ(scale_of(a, kQ0), 2.0f);
}

TEST(ImportPeft, PatternsFirstMatchWinsAndResolveIndependently) {
  TensorList t;
  add_pair(t, kQ0, 2);
  add_pair(t, kQ1, 6);
  add_pair(t, kV0, 4);
  {
    TempDir d;
    // q_proj of layer 0 matches both rank keys; the first in dict order ("model.layers.0.self_attn.q_proj") wins.
    WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
      "rank_pattern": {"model.layers.0.self_attn.q_proj": 2, "q_proj": 6},
      "alpha_pattern": {"layers.1.self_attn.q_proj": 3}})", t);
    EXPECT_FLOAT_EQ(scale_of(a, kQ0), 8.0f / 2);  // rank from pattern, alpha default
    EXPECT_FLOAT_EQ(scale_of(a, kQ1), 3.0f / 6);  // both from patterns
    EXPECT_FLOAT_EQ(scale_of(a, kV0), 8.0f / 4);  // neither
  }
  {  // reversed order: "q_proj" now wins for layer 0 too → rank 6 ≠ actual 2 → refused naming the module
    TempDir d;
    expect_error([&] {
      import(d, R"({"peft_type": "LORA", "r": 4, "rank_pattern": {"q_proj": 6, "model.layers.0.self_attn.q_proj": 2}})",
             t);
    }, {d.file("adapter_model.safetensors"), kQ0, "rank 2", "r = 6", "rank_pattern"});
  }
}

TEST(ImportPeft, PatternKeyMatchingNoModuleIsAnError) {
  TensorList t;
  add_pair(t, kQ0, 4);
  // Python's re.match(r"(.*\.)?(^layers.0...)$") never matches "model.layers.0..." (peft#3582).
  for (const char* key : {"^layers.0.self_attn.q_proj", "k_proj", "base_model.model.model.layers.0.self_attn.q_proj"}) {
    TempDir d;
    std::string cfg = std::string(R"({"peft_type": "LORA", "r": 4, "alpha_pattern": {")") + key + R"(": 2}})";
    expect_error([&] { import(d, cfg, t); }, {d.file("adapter_config.json"), "alpha_pattern", key, "matches no module"});
  }
  TempDir d;
  expect_error([&] { import(d, R"({"peft_type": "LORA", "r": 4, "rank_pattern": {"q_proj[": 4}})", t); },
               {d.file("adapter_config.json"), "rank_pattern", "q_proj["});
}

TEST(ImportPeft, AnchoredFullNameKeyMatchesAsInPython) {
  // re.match(r"(.*\.)?(^model.layers.0.self_attn.q_proj)$", "model.layers.0.self_attn.q_proj") matches.
  TempDir d;
  TensorList t;
  add_pair(t, kQ0, 4);
  WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 4, "alpha_pattern": {"^model.layers.0.self_attn.q_proj": 2}})", t);
  EXPECT_FLOAT_EQ(scale_of(a, kQ0), 0.5f);
}

TEST(ImportPeft, RankMismatchNamesModule) {
  TensorList t;
  add_pair(t, kQ0, 4);
  expect_refused(R"({"peft_type": "LORA", "r": 8})", t, {kQ0, "rank 4", "r = 8"});
}

TEST(ImportPeft, EmbeddingNormalized) {
  TempDir d;
  const std::string emb = kP + "model.embed_tokens";
  Tensor ea = make_tensor({2, 10});       // [r, num_emb]
  Tensor eb = make_tensor({6, 2}, 1.0f);  // [dim, r]
  TensorList t = {{emb + ".lora_embedding_A", ea}, {emb + ".lora_embedding_B", eb}};
  WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "use_rslora": true})", t);
  const auto* tg = test::find_target(a, emb);
  ASSERT_NE(tg, nullptr);
  EXPECT_TRUE(tg->embedding);
  const auto& u = std::get<LowRankUpdate>(tg->update);
  EXPECT_EQ(u.b.shape, (Shape{10, 2}));
  EXPECT_EQ(u.a.shape, (Shape{2, 6}));
  EXPECT_TRUE(test::is_transpose_of(u.b, ea));
  EXPECT_TRUE(test::is_transpose_of(u.a, eb));
  EXPECT_FLOAT_EQ(u.scale, static_cast<float>(4 / std::sqrt(2.0)));
}

TEST(ImportPeft, BaseLayerCopyKeptAndShapeChecked) {
  const std::string emb = kP + "model.embed_tokens";
  TensorList t = {{emb + ".base_layer.weight", make_tensor({10, 6})},
                  {emb + ".lora_embedding_A", make_tensor({2, 10})},
                  {emb + ".lora_embedding_B", make_tensor({6, 2})}};
  TempDir d;
  WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 2})", t);
  ASSERT_EQ(a.targets.size(), 1u);
  ASSERT_EQ(a.base_copies.size(), 1u);
  EXPECT_EQ(a.base_copies[0].module, emb);
  EXPECT_EQ(a.base_copies[0].value.shape, (Shape{10, 6}));
  t[0].second = make_tensor({11, 6});
  expect_refused(R"({"peft_type": "LORA", "r": 2})", t, {emb + ".base_layer.weight", "[11, 6]", "[10, 6]"});
}

TEST(ImportPeft, ModulesToSaveBecomeReplacements) {
  TempDir d;
  TensorList t;
  add_pair(t, kQ0, 4);
  t.push_back({kP + "lm_head.weight", make_tensor({12, 6})});
  t.push_back({kP + "lm_head.bias", make_tensor({12})});
  WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 4, "modules_to_save": ["lm_head"]})", t);
  ASSERT_EQ(a.targets.size(), 3u);
  const auto* w = test::find_target(a, kP + "lm_head", "weight");
  const auto* b = test::find_target(a, kP + "lm_head", "bias");
  ASSERT_TRUE(w && b);
  EXPECT_EQ(std::get<Replacement>(w->update).value.shape, (Shape{12, 6}));
  EXPECT_EQ(std::get<Replacement>(b->update).value.shape, (Shape{12}));
  EXPECT_STREQ(update_kind(w->update), "replace");
  // A full tensor of a module not listed in modules_to_save is refused.
  expect_refused(R"({"peft_type": "LORA", "r": 4})", t, {kP + "lm_head", "modules_to_save"});
}

TEST(ImportPeft, ConfigFieldRefusals) {
  TensorList t;
  add_pair(t, kQ0, 4);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"use_dora", R"("yes")"}, {"fan_in_fan_out", "true"}, {"use_qalora", "true"},
      {"use_bdlora", R"({"nblocks": 2})"}, {"layer_replication", "[[0, 2], [1, 2]]"},
      {"trainable_token_indices", "[1, 2]"}, {"target_parameters", R"(["experts.down_proj"])"},
      {"alora_invocation_tokens", "[5, 6]"}, {"arrow_config", R"({"top_k": 2})"},
      {"megatron_config", R"({"tp": 2})"}, {"lora_bias", "true"}, {"bias", R"("all")"},
      {"bias", R"("lora_only")"}, {"loftq_config", R"({"loftq_bits": 4})"}, {"corda_config", R"({"x": 1})"},
      {"kasa_config", R"({"beta": 0.1})"}, {"monteclora_config", R"({"num_samples": 2})"},
      {"init_lora_weights", R"("pissa")"}, {"init_lora_weights", R"("pissa_niter_4")"},
      {"init_lora_weights", R"("olora")"}, {"init_lora_weights", R"("corda")"},
      {"init_lora_weights", R"("loftq")"}, {"init_lora_weights", R"("lora_ga")"},
      {"init_lora_weights", R"("mystery")"}, {"some_new_field", "3"}, {"use_magic", "true"},
  };
  for (const auto& [field, value] : cases) {
    std::string cfg = R"({"peft_type": "LORA", "r": 4, ")" + field + "\": " + value + "}";
    expect_refused(cfg, t, {"'" + field + "'"}, /*names_config=*/true);
  }
  expect_refused(R"({"peft_type": "LORA", "some_new_field": 3})", t,
                 {"semantics-changing or unknown PEFT config field"}, true);
  // LoHa factors under a LOHA config are read; LoRA pairs are not LoHa factors.
  expect_refused(R"({"peft_type": "LOHA"})", t, {"lora_A.weight", "LoRA factor", "peft_type LOHA"}, false);
  // use_dora without a magnitude beside a pair.
  expect_refused(R"({"peft_type": "LORA", "r": 4, "use_dora": true})", t, {kQ0, "no DoRA magnitude"}, false);
  expect_refused(R"({"peft_type": "IA3"})", t, {"peft_type", "IA3"}, true);
}

TEST(ImportPeft, HarmlessFieldsAccepted) {
  TempDir d;
  TensorList t;
  add_pair(t, kQ0, 4);
  WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 4, "lora_alpha": 4, "init_lora_weights": "gaussian",
    "layers_to_transform": [0], "layers_pattern": "layers", "exclude_modules": ["k_proj"], "unknown_but_unset": null,
    "another_unset": false, "empty_list": [], "runtime_config": {"ephemeral_gpu_offload": false},
    "eva_config": {"rho": 2.0}, "ensure_weight_tying": true, "megatron_core": "megatron.core"})", t);
  EXPECT_FLOAT_EQ(scale_of(a, kQ0), 1.0f);
}

TEST(ImportPeft, TensorRefusals) {
  const std::string cfg = R"({"peft_type": "LORA", "r": 4})";
  TensorList base;
  add_pair(base, kQ0, 4);
  auto plus = [&](const std::string& key, Tensor v) {
    TensorList t = base;
    t.push_back({key, v});
    return t;
  };
  expect_refused(cfg, plus(kQ0 + ".lora_magnitude_vector", make_tensor({5})),
                 {"lora_magnitude_vector", "DoRA", "use_dora"});
  expect_refused(cfg, plus(kQ0 + ".lora_B.bias", make_tensor({5})), {kQ0 + ".lora_B.bias", "lora_bias"});
  expect_refused(cfg, plus(kQ0 + ".hada_w1_a", make_tensor({5, 2})), {kQ0 + ".hada_w1_a"});
  expect_refused(cfg, plus(kQ0 + ".lora_A.other.weight", make_tensor({4, 6})), {kQ0 + ".lora_A.other.weight"});
  expect_refused(cfg, plus(kQ0 + ".lokr_w1", make_tensor({2, 2})), {kQ0 + ".lokr_w1", "peft_type LORA"});
  expect_refused(cfg, {{kQ0 + ".lora_A.weight", make_tensor({4, 6})}}, {kQ0 + ".lora_A.weight", "lora_B.weight"});
  expect_refused(cfg, {{kQ0 + ".lora_A.weight", make_tensor({4, 6, 3, 3})}, {kQ0 + ".lora_B.weight", make_tensor({5, 4, 1, 1})}},
                 {kQ0 + ".lora_A.weight", "convolution"});
  expect_refused(cfg, {{kQ0 + ".lora_A.weight", make_tensor({4, 6})}, {kQ0 + ".lora_B.weight", make_tensor({5, 3})}},
                 {kQ0 + ".lora_A.weight", "do not pair"});
  expect_refused(cfg, {{kQ0 + ".lora_A.weight", test::with_value(make_tensor({4, 6}), 3, NAN)},
                       {kQ0 + ".lora_B.weight", make_tensor({5, 4})}},
                 {kQ0 + ".lora_A.weight", "non-finite"});
  TensorList both = base;
  add_pair(both, kQ0, 4, ".default");
  expect_refused(cfg, both, {kQ0, "one spelling"});
}

// target_parameters (PEFT ParamWrapper on 3-D expert weights): lora_A [E·r, in] expert-major,
// lora_B [out, E·r] expert-minor (peft/tuners/lora/layer.py get_delta_weight reshapes A to
// [E, r, in] and B to [out, r, E]); a second parameter of the module nests under .base_layer.
const std::string kExperts = kP + "model.layers.0.mlp.experts";

TensorList expert_levels(int64_t experts, int64_t r_down, int64_t r_gate_up) {
  return {{kExperts + ".lora_A.weight", make_tensor({experts * r_down, 5})},  // down_proj: in = width 5
          {kExperts + ".lora_B.weight", make_tensor({7, experts * r_down}, 1.0f)},  // out = hidden 7
          {kExperts + ".base_layer.lora_A.weight", make_tensor({experts * r_gate_up, 7}, 2.0f)},
          {kExperts + ".base_layer.lora_B.weight", make_tensor({10, experts * r_gate_up}, 3.0f)}};
}

float at(const Tensor& t, int64_t i, int64_t j) { return t.as<float>()[i * t.shape[1] + j]; }

TEST(ImportPeft, TargetParametersCutPerExpert) {
  TempDir d;
  TensorList t = expert_levels(3, 2, 4);
  add_pair(t, kQ0, 2);
  const WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"],
    "target_parameters": ["gate_up_proj", "down_proj"], "rank_pattern": {".*\\.gate_up_proj": 4},
    "alpha_pattern": {".*\\.gate_up_proj": 12}})", t);
  ASSERT_EQ(a.targets.size(), 1u + 3u * 2u);
  EXPECT_NE(test::find_target(a, kQ0), nullptr);
  const Tensor A = make_tensor({6, 5}), B = make_tensor({7, 6}, 1.0f);
  const Tensor GA = make_tensor({12, 7}, 2.0f), GB = make_tensor({10, 12}, 3.0f);
  for (int64_t e = 0; e < 3; ++e) {
    const auto* down = test::find_target(a, kExperts + "." + std::to_string(e) + ".down_proj");
    const auto* gate_up = test::find_target(a, kExperts + "." + std::to_string(e) + ".gate_up_proj");
    ASSERT_TRUE(down && gate_up) << e;
    EXPECT_TRUE(down->alt_modules.empty());  // the ranks tell the two levels apart
    const auto& ld = std::get<LowRankUpdate>(down->update);
    const auto& lg = std::get<LowRankUpdate>(gate_up->update);
    EXPECT_FLOAT_EQ(ld.scale, 2.0f);  // 4 / 2
    EXPECT_FLOAT_EQ(lg.scale, 3.0f);  // 12 / 4 (alpha_pattern, rank_pattern)
    ASSERT_EQ(ld.a.shape, (Shape{2, 5}));
    ASSERT_EQ(ld.b.shape, (Shape{7, 2}));
    ASSERT_EQ(lg.a.shape, (Shape{4, 7}));
    ASSERT_EQ(lg.b.shape, (Shape{10, 4}));
    for (int64_t k = 0; k < 2; ++k) {
      for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(at(ld.a, k, j), at(A, e * 2 + k, j));
      for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(at(ld.b, i, k), at(B, i, k * 3 + e));
    }
    for (int64_t k = 0; k < 4; ++k) {
      for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(at(lg.a, k, j), at(GA, e * 4 + k, j));
      for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(at(lg.b, i, k), at(GB, i, k * 3 + e));
    }
  }
}

TEST(ImportPeft, TargetParametersOfEqualRankKeepBothNames) {
  // PEFT nests in the model's parameter order, which the file does not record: at equal ranks
  // either level may be either parameter, and binding picks the name whose weight has ΔW's shape.
  TempDir d;
  const WeightAdapter a = import(d, R"({"peft_type": "LORA", "r": 2, "lora_alpha": 2,
    "target_parameters": ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]})", expert_levels(3, 2, 2));
  ASSERT_EQ(a.targets.size(), 6u);
  for (const auto& t : a.targets) {
    ASSERT_EQ(t.alt_modules.size(), 1u) << t.module;
    EXPECT_NE(t.module, t.alt_modules[0]);
  }
}

TEST(ImportPeft, TargetParametersRefusals) {
  const std::string cfg = R"({"peft_type": "LORA", "r": 2, "target_parameters": ["gate_up_proj", "down_proj"]})";
  TensorList three = expert_levels(3, 2, 2);
  three.push_back({kExperts + ".base_layer.base_layer.lora_A.weight", make_tensor({6, 7})});
  three.push_back({kExperts + ".base_layer.base_layer.lora_B.weight", make_tensor({7, 6})});
  expect_refused(cfg, three, {kExperts, "3 nested LoRA levels", "selects 2"});
  TensorList odd = expert_levels(3, 2, 2);
  odd[0].second = make_tensor({7, 5});
  odd[1].second = make_tensor({7, 7});
  expect_refused(cfg, odd, {kExperts, "no reading", "experts * r"});
  TensorList no_b = expert_levels(3, 2, 2);
  no_b.pop_back();
  expect_refused(cfg, no_b, {kExperts + ".base_layer.lora_A.weight", "no partner"});
  TensorList gap = expert_levels(3, 2, 2);
  gap.erase(gap.begin(), gap.begin() + 2);
  expect_refused(cfg, gap, {kExperts, "none at depth 0"});
  const std::string qualified = R"({"peft_type": "LORA", "r": 2, "target_parameters": ["mlp.experts.down_proj"]})";
  TensorList stray;
  add_pair(stray, kQ0 + ".base_layer", 2);
  expect_refused(qualified, stray, {kQ0 + ".base_layer", "names none of its parameters"});
  TensorList linear_only;
  add_pair(linear_only, kQ0, 2);
  expect_refused(qualified, linear_only, {"'target_parameters'", "no tensor"}, /*names_config=*/true);
  expect_refused(R"({"peft_type": "LORA", "r": 2, "use_dora": true, "target_parameters": ["down_proj"]})",
                 expert_levels(3, 2, 2), {"use_dora", "target_parameters", "ParamWrapper"}, /*names_config=*/true);
}

TEST(ImportPeft, PickleCheckpointRefused) {
  TempDir d;
  d.write_json("adapter_config.json", R"({"peft_type": "LORA"})");
  d.write_json("adapter_model.bin", "not really a pickle");
  expect_error([&] { read_weight_adapter(d.path()); },
               {d.file("adapter_model.bin"), "pickle checkpoints are not read; convert to safetensors"});
  expect_error([&] { read_weight_adapter(d.file("adapter_model.bin")); },
               {d.file("adapter_model.bin"), "pickle checkpoints are not read"});
}

// ---- PEFT LoKr --------------------------------------------------------------------------------

TEST(ImportPeftLokr, BothFullStillScalesAlphaOverR) {
  TempDir d;
  const std::string m = kQ0;
  Tensor w1 = make_tensor({2, 3}), w2 = make_tensor({3, 2}, 1.0f);
  WeightAdapter a = import(d, kLokr021Defaults, {{m + ".lokr_w1", w1}, {m + ".lokr_w2", w2}});
  const auto& u = std::get<KroneckerUpdate>(test::find_target(a, m)->update);
  EXPECT_FLOAT_EQ(u.scale, 2.0f);  // alpha 8 / r 4, even though both factors are full (PEFT semantics)
  EXPECT_TRUE(test::same_values(u.w1, w1));
  EXPECT_TRUE(test::same_values(u.w2, w2));
  EXPECT_FALSE(u.w2_a.data);
  EXPECT_STREQ(update_kind(test::find_target(a, m)->update), "lokr");
}

TEST(ImportPeftLokr, FactoredW2AndPatterns) {
  TempDir d;
  TensorList t = {{kQ0 + ".lokr_w1", make_tensor({2, 2})},
                  {kQ0 + ".lokr_w2_a", make_tensor({3, 2})},
                  {kQ0 + ".lokr_w2_b", make_tensor({2, 5})}};
  WeightAdapter a = import(d, R"({"peft_type": "LOKR", "r": 4, "alpha": 4, "rank_pattern": {"q_proj": 2},
                                  "decompose_both": true, "decompose_factor": 4})", t);
  const auto& u = std::get<KroneckerUpdate>(a.targets.at(0).update);
  EXPECT_FLOAT_EQ(u.scale, 2.0f);  // alpha 4 / r 2 (rank_pattern)
  EXPECT_EQ(u.w2_a.shape, (Shape{3, 2}));
  EXPECT_EQ(u.w2_b.shape, (Shape{2, 5}));
  // rank of w2_a disagreeing with r is refused naming the module
  expect_refused(R"({"peft_type": "LOKR", "r": 4})", t, {kQ0, "rank 2", "r = 4"});
}

TEST(ImportPeftLokr, Refusals) {
  TensorList ok = {{kQ0 + ".lokr_w1", make_tensor({2, 2})}, {kQ0 + ".lokr_w2", make_tensor({3, 2})}};
  auto plus = [&](const std::string& key, Tensor v) {
    TensorList t = ok;
    t.push_back({key, v});
    return t;
  };
  const std::string cfg = R"({"peft_type": "LOKR", "r": 4})";
  expect_refused(cfg, plus(kQ0 + ".lokr_t2", make_tensor({2, 2, 3, 3})), {kQ0 + ".lokr_t2", "Tucker"});
  expect_refused(R"({"peft_type": "LOKR", "use_effective_conv2d": true})", ok, {"use_effective_conv2d"}, true);
  expect_refused(R"({"peft_type": "LOKR", "use_rslora": true})", ok, {"use_rslora", "unknown"}, true);
  expect_refused(cfg, plus(kQ0 + ".lora_A.weight", make_tensor({4, 6})), {kQ0 + ".lora_A.weight", "peft_type LOKR"});
  expect_refused(cfg, {{kQ0 + ".lokr_w1", make_tensor({2, 2})}}, {kQ0, "w2"});
  expect_refused(cfg, {{kQ0 + ".lokr_w1", make_tensor({2, 2})}, {kQ0 + ".lokr_w2_a", make_tensor({3, 4})}},
                 {kQ0 + ".lokr_w2_a", "lokr_w2_b"});
  expect_refused(cfg, plus(kQ0 + ".lokr_w1_a", make_tensor({2, 4})), {kQ0 + ".lokr_w1", kQ0 + ".lokr_w1_a"});
  expect_refused(cfg, {{kQ0 + ".lokr_w1", make_tensor({2, 2})}, {kQ0 + ".lokr_w2", make_tensor({3, 2, 3, 3})}},
                 {kQ0 + ".lokr_w2", "convolution"});
}

}  // namespace
}  // namespace graft::adapter
