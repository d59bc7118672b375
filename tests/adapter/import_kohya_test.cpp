// Single-file ComfyUI / kohya / A1111 / LyCORIS import, and format detection.
#include "import_test_util.h"

namespace graft::adapter {
namespace {

using test::expect_error;
using test::make_tensor;
using test::scalar;
using test::TempDir;
using test::TensorList;

const std::string kM = "lora_unet_model_layers_0_self_attn_q_proj";
const std::string kL = "lycoris_model_layers_0_mlp_down_proj";

WeightAdapter import_file(const TempDir& d, const TensorList& t, const std::string& name = "adapter.safetensors") {
  return read_weight_adapter(d.write_tensors(name, t));
}

void expect_refused(const TensorList& t, std::initializer_list<std::string> parts) {
  TempDir d;
  std::string f = d.write_tensors("adapter.safetensors", t);
  std::vector<std::string> all(parts);
  all.push_back(f);
  try {
    read_weight_adapter(f);
    ADD_FAILURE() << "expected refusal: " << *parts.begin();
  } catch (const Error& e) {
    for (const auto& p : all) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TensorList updown(const std::string& m, int64_t r) {
  return {{m + ".lora_down.weight", make_tensor({r, 6})}, {m + ".lora_up.weight", make_tensor({5, r}, 1.0f)}};
}

TEST(ImportKohya, UpDownWithAlpha) {
  TempDir d;
  TensorList t = updown(kM, 4);
  t.push_back({kM + ".alpha", scalar(2.0f, DType::BF16)});
  WeightAdapter a = import_file(d, t);
  EXPECT_EQ(a.format, AdapterFormat::Kohya);
  ASSERT_EQ(a.targets.size(), 1u);
  EXPECT_EQ(a.targets[0].module, kM);  // prefix kept
  const auto& u = std::get<LowRankUpdate>(a.targets[0].update);
  EXPECT_EQ(u.a.shape, (Shape{4, 6}));  // A = lora_down
  EXPECT_EQ(u.b.shape, (Shape{5, 4}));  // B = lora_up
  EXPECT_FLOAT_EQ(test::at(u.b, 0), 1.01f);
  EXPECT_FLOAT_EQ(u.scale, 0.5f);
  EXPECT_EQ(a.targets[0].keys.size(), 3u);
}

TEST(ImportKohya, MissingAlphaMeansScaleOne) {
  TempDir d;
  WeightAdapter a = import_file(d, updown(kM, 4));
  EXPECT_FLOAT_EQ(std::get<LowRankUpdate>(a.targets[0].update).scale, 1.0f);
}

TEST(ImportKohya, MixedRanksEachUseTheirOwnAlpha) {
  TempDir d;
  TensorList t = updown(kM, 4);
  TensorList t2 = updown("lora_te_text_model_encoder_layers_0_mlp_fc1", 2);
  t.insert(t.end(), t2.begin(), t2.end());
  t.push_back({kM + ".alpha", scalar(8.0f)});
  t.push_back({"lora_te_text_model_encoder_layers_0_mlp_fc1.alpha", scalar(8.0f)});
  WeightAdapter a = import_file(d, t);
  EXPECT_FLOAT_EQ(std::get<LowRankUpdate>(test::find_target(a, kM)->update).scale, 2.0f);
  EXPECT_FLOAT_EQ(
      std::get<LowRankUpdate>(test::find_target(a, "lora_te_text_model_encoder_layers_0_mlp_fc1")->update).scale, 4.0f);
}

TEST(ImportKohya, DiffAndSetWeight) {
  TempDir d;
  WeightAdapter a = import_file(d, {{kM + ".diff", make_tensor({5, 6})},
                                    {kM + ".diff_b", make_tensor({5})},
                                    {"lora_unet_model_norm.set_weight", make_tensor({6})},
                                    {"lora_unet_lm_head.set_weight", make_tensor({9, 6})}});
  ASSERT_EQ(a.targets.size(), 4u);
  const auto* dw = test::find_target(a, kM, "weight");
  const auto* db = test::find_target(a, kM, "bias");
  ASSERT_TRUE(dw && db);
  EXPECT_EQ(std::get<DiffUpdate>(dw->update).diff.shape, (Shape{5, 6}));
  EXPECT_FLOAT_EQ(std::get<DiffUpdate>(dw->update).scale, 1.0f);
  EXPECT_EQ(std::get<DiffUpdate>(db->update).diff.shape, (Shape{5}));
  EXPECT_STREQ(update_kind(dw->update), "diff");
  const auto* s = test::find_target(a, "lora_unet_lm_head");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(std::get<Replacement>(s->update).value.shape, (Shape{9, 6}));
}

TEST(ImportKohya, PeftConfigBesideFileIsIgnored) {
  TempDir d;
  d.write_json("adapter_config.json", R"({"peft_type": "LORA", "r": 1, "lora_alpha": 100, "use_dora": true})");
  TensorList t = updown(kM, 4);
  t.push_back({kM + ".alpha", scalar(2.0f)});
  WeightAdapter a = import_file(d, t, "adapter_model.safetensors");
  EXPECT_EQ(a.format, AdapterFormat::Kohya);
  EXPECT_FLOAT_EQ(std::get<LowRankUpdate>(a.targets[0].update).scale, 0.5f);
}

TEST(ImportKohya, Refusals) {
  auto plus = [](const std::string& key, Tensor v) {
    TensorList t = updown(kM, 4);
    t.push_back({key, v});
    return t;
  };
  expect_refused(plus(kM + ".lora_mid.weight", make_tensor({4, 4, 3, 3})), {kM + ".lora_mid.weight", "mid"});
  expect_refused(plus(kM + ".dora_scale", make_tensor({5, 1})), {kM + ".dora_scale", "DoRA"});
  expect_refused(plus(kM + ".hada_w1_a", make_tensor({5, 2})), {kM, "more than one kind"});
  expect_refused(plus(kM + ".hada_t1", make_tensor({2, 2, 3, 3})), {kM + ".hada_t1"});
  expect_refused(plus(kM + ".oft_blocks", make_tensor({2, 3, 3})), {kM + ".oft_blocks", "OFT"});
  expect_refused(plus(kM + ".on_input", make_tensor({1})), {kM + ".on_input", "IA3"});
  expect_refused(plus(kM + ".w_norm", make_tensor({6})), {kM + ".w_norm", "norm"});
  expect_refused(plus(kM + ".b_norm", make_tensor({6})), {kM + ".b_norm", "norm"});
  expect_refused(plus(kM + ".a1.weight", make_tensor({2, 6})), {kM + ".a1.weight", "GLoRA"});
  expect_refused(plus(kM + ".scale", scalar(1.0f)), {kM + ".scale", "scale override"});
  expect_refused(plus(kM + ".weight", make_tensor({5, 6})), {kM + ".weight", "not a key graft reads"});
  expect_refused(plus(kM + ".lora_up.weight.bak", make_tensor({5, 6})), {kM + ".lora_up.weight.bak"});
  expect_refused({{"base_model.model.q.lora_A.weight", make_tensor({4, 6})}, {"base_model.model.q.lora_B.weight", make_tensor({5, 4})}},
                 {"base_model.model.q.lora_A.weight", "PEFT", "directory"});
  expect_refused({{"model.q.lora_a", make_tensor({6, 4})}, {"model.q.lora_b", make_tensor({4, 5})}},
                 {"model.q.lora_a", "mlx-lm", "directory"});
  expect_refused({{"unet.q.lora.up.weight", make_tensor({5, 4})}}, {"unet.q.lora.up.weight", "diffusers"});
  // pairing, shapes, alpha
  expect_refused({{kM + ".lora_up.weight", make_tensor({5, 4})}}, {kM + ".lora_up.weight", "lora_down.weight"});
  expect_refused({{kM + ".lora_up.weight", make_tensor({5, 4})}, {kM + ".lora_down.weight", make_tensor({3, 6})}},
                 {kM + ".lora_up.weight", "do not pair"});
  expect_refused({{kM + ".lora_up.weight", make_tensor({5, 4, 1, 1})}, {kM + ".lora_down.weight", make_tensor({4, 6, 3, 3})}},
                 {"convolution"});
  expect_refused(plus(kM + ".alpha", scalar(0.0f)), {kM + ".alpha", "non-zero alpha"});
  expect_refused(plus(kM + ".alpha", make_tensor({2})), {kM + ".alpha", "scalar"});
  expect_refused(plus(kM + ".alpha", scalar(NAN)), {kM + ".alpha", "non-finite"});
  expect_refused({{kM + ".alpha", scalar(4.0f)}}, {kM + ".alpha", "no lora_up/lora_down"});
  expect_refused(plus(kM + ".diff", make_tensor({5, 6})), {kM, "two updates", "lora", "diff"});
  expect_refused(plus(kM + ".set_weight", make_tensor({5, 6})), {kM, "two updates"});
  expect_refused({{kM + ".diff", test::with_value(make_tensor({5, 6}), 29, -INFINITY)}}, {kM + ".diff", "non-finite"});
  expect_refused({{kM + ".diff_b", make_tensor({5, 6})}}, {kM + ".diff_b", "1-D bias"});
}

// ---- LyCORIS LoKr ------------------------------------------------------------------------------

float lokr_scale(const TensorList& t) {
  TempDir d;
  WeightAdapter a = import_file(d, t);
  EXPECT_EQ(a.format, AdapterFormat::Lycoris);
  return std::get<KroneckerUpdate>(a.targets.at(0).update).scale;
}

TEST(ImportLycoris, BothFactorsFullScaleOneWhateverAlpha) {
  EXPECT_FLOAT_EQ(lokr_scale({{kL + ".lokr_w1", make_tensor({2, 3})},
                              {kL + ".lokr_w2", make_tensor({4, 2})},
                              {kL + ".alpha", scalar(4.0f)}}),
                  1.0f);
}

TEST(ImportLycoris, FactoredW2UsesAlphaOverDim) {
  TensorList t = {{kL + ".lokr_w1", make_tensor({2, 3})},
                  {kL + ".lokr_w2_a", make_tensor({4, 2})},
                  {kL + ".lokr_w2_b", make_tensor({2, 5})}};
  EXPECT_FLOAT_EQ(lokr_scale(t), 1.0f);  // no alpha → alpha = dim
  t.push_back({kL + ".alpha", scalar(4.0f)});
  EXPECT_FLOAT_EQ(lokr_scale(t), 2.0f);  // 4 / dim 2
  t.back().second = scalar(0.0f);
  EXPECT_FLOAT_EQ(lokr_scale(t), 1.0f);  // alpha 0 → alpha = dim
}

TEST(ImportLycoris, DimFromW2bOverridesW1b) {
  TempDir d;
  TensorList t = {{kL + ".lokr_w1_a", make_tensor({2, 3})}, {kL + ".lokr_w1_b", make_tensor({3, 2})},
                  {kL + ".lokr_w2_a", make_tensor({4, 8})}, {kL + ".lokr_w2_b", make_tensor({8, 5})},
                  {kL + ".alpha", scalar(4.0f)}};
  WeightAdapter a = import_file(d, t);
  const auto& u = std::get<KroneckerUpdate>(a.targets.at(0).update);
  EXPECT_FLOAT_EQ(u.scale, 0.5f);  // 4 / 8 (w2_b rows), not 4 / 3
  EXPECT_EQ(u.w1_a.shape, (Shape{2, 3}));
  EXPECT_EQ(u.w2_b.shape, (Shape{8, 5}));
  t.pop_back();
  t.erase(t.begin() + 2, t.begin() + 4);
  t.push_back({kL + ".lokr_w2", make_tensor({4, 5})});
  t.push_back({kL + ".alpha", scalar(6.0f)});
  EXPECT_FLOAT_EQ(lokr_scale(t), 2.0f);  // only w1 factored: 6 / 3
}

TEST(ImportLycoris, KohyaPrefixedLokrAndMixedFile) {
  TempDir d;
  TensorList t = updown(kM, 4);
  t.push_back({"lora_unet_x.lokr_w1", make_tensor({2, 2})});
  t.push_back({"lora_unet_x.lokr_w2", make_tensor({2, 2})});
  WeightAdapter a = import_file(d, t);
  EXPECT_EQ(a.format, AdapterFormat::Lycoris);
  EXPECT_EQ(a.targets.size(), 2u);
}

TEST(ImportLycoris, Refusals) {
  TensorList ok = {{kL + ".lokr_w1", make_tensor({2, 3})}, {kL + ".lokr_w2", make_tensor({4, 2})}};
  auto plus = [&](const std::string& key, Tensor v) {
    TensorList t = ok;
    t.push_back({key, v});
    return t;
  };
  expect_refused(plus(kL + ".lokr_t1", make_tensor({2, 2, 3, 3})), {kL + ".lokr_t1", "Tucker"});
  expect_refused(plus(kL + ".lokr_t2", make_tensor({2, 2, 3, 3})), {kL + ".lokr_t2", "Tucker"});
  expect_refused(plus(kL + ".lora_up.weight", make_tensor({5, 4})), {kL, "LoKr"});
  expect_refused({{kL + ".lokr_w1", make_tensor({2, 3})}, {kL + ".lokr_w2_b", make_tensor({2, 5})}},
                 {kL + ".lokr_w2_b", "lokr_w2_a"});
  expect_refused({{kL + ".lokr_w1", make_tensor({2, 3})}, {kL + ".lokr_w2_a", make_tensor({4, 2})},
                  {kL + ".lokr_w2_b", make_tensor({3, 5})}},
                 {kL + ".lokr_w2_a", "do not chain"});
  expect_refused({{kL + ".lokr_w1", make_tensor({2, 3})}, {kL + ".lokr_w2", make_tensor({4, 2, 3, 3})}},
                 {kL + ".lokr_w2", "convolution"});
}

// ---- detection ---------------------------------------------------------------------------------

TEST(ImportDetect, DirectoryWithoutConfig) {
  TempDir d;
  d.write_tensors("adapter.safetensors", updown(kM, 2));
  expect_error([&] { read_weight_adapter(d.path()); }, {d.path(), "adapter_config.json", "graft reads"});
}

TEST(ImportDetect, ConfigOfUnknownLayout) {
  TempDir d;
  std::string cfg = d.write_json("adapter_config.json", R"({"rank": 4})");
  expect_error([&] { read_weight_adapter(d.path()); }, {cfg, "peft_type", "fine_tune_type", "graft reads"});
  d.write_json("adapter_config.json", "[1, 2]");
  expect_error([&] { read_weight_adapter(d.path()); }, {cfg, "JSON object"});
  d.write_json("adapter_config.json", "{oops");
  expect_error([&] { read_weight_adapter(d.path()); }, {cfg, "not valid JSON"});
}

TEST(ImportDetect, MissingPathAndOtherFiles) {
  TempDir d;
  expect_error([&] { read_weight_adapter(d.file("nope")); }, {d.file("nope"), "no such file"});
  std::string gguf = d.write_json("adapter.gguf", "x");  // read as a llama.cpp GGUF adapter, which it is not
  expect_error([&] { read_weight_adapter(gguf); }, {gguf, "not a GGUF file"});
  std::string other = d.write_json("adapter.onnx", "x");
  expect_error([&] { read_weight_adapter(other); }, {other, "unrecognized"});
  std::string ckpt = d.write_json("adapter.ckpt", "x");
  expect_error([&] { read_weight_adapter(ckpt); }, {ckpt, "pickle checkpoints are not read; convert to safetensors"});
  std::string empty = d.write_tensors("empty.safetensors", {});
  expect_error([&] { read_weight_adapter(empty); }, {empty, "no tensors"});
}

TEST(ImportDetect, FormatNames) {
  EXPECT_STREQ(format_name(AdapterFormat::MlxLm), "mlx-lm");
  EXPECT_STREQ(format_name(AdapterFormat::Peft), "peft");
  EXPECT_STREQ(format_name(AdapterFormat::Kohya), "kohya");
  EXPECT_STREQ(format_name(AdapterFormat::Lycoris), "lycoris");
}

}  // namespace
}  // namespace graft::adapter
