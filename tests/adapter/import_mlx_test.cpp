// mlx-lm native adapter import: orientation, scale rules, embeddings, refusals.
#include "graft/core/convert.h"
#include "import_test_util.h"

namespace graft::adapter {
namespace {

using test::expect_error;
using test::make_tensor;
using test::TempDir;

const char* kQ = "model.layers.0.self_attn.q_proj";

std::string mlx_config(const std::string& lora_parameters = R"({"rank": 4, "scale": 10.0, "dropout": 0.05})") {
  return R"({"fine_tune_type": "lora", "num_layers": 2, "model": "tiny", "lora_parameters": )" + lora_parameters + "}";
}

TEST(ImportMlx, LinearPairIsTransposedToNormalizedForm) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config());
  Tensor la = make_tensor({6, 4}, 0.0f, DType::BF16);  // [in, r]
  Tensor lb = make_tensor({4, 5}, 1.0f, DType::BF16);  // [r, out]
  d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", la}, {std::string(kQ) + ".lora_b", lb}});
  WeightAdapter a = read_weight_adapter(d.path());
  EXPECT_EQ(a.format, AdapterFormat::MlxLm);
  EXPECT_EQ(a.path, d.path());
  ASSERT_EQ(a.targets.size(), 1u);
  const auto& t = a.targets[0];
  EXPECT_EQ(t.module, kQ);
  EXPECT_EQ(t.param, "weight");
  EXPECT_FALSE(t.embedding);
  const auto& u = std::get<LowRankUpdate>(t.update);
  EXPECT_EQ(u.a.shape, (Shape{4, 6}));
  EXPECT_EQ(u.b.shape, (Shape{5, 4}));
  EXPECT_EQ(u.a.dtype, DType::BF16);  // transposes keep the file dtype
  EXPECT_EQ(u.b.dtype, DType::BF16);
  EXPECT_TRUE(test::is_transpose_of(u.a, la));
  EXPECT_TRUE(test::is_transpose_of(u.b, lb));
  EXPECT_FLOAT_EQ(u.scale, 10.0f);
  EXPECT_EQ(a.metadata.at("rank"), "4");
  EXPECT_EQ(a.metadata.at("num_layers"), "2");
  EXPECT_EQ(a.metadata.at("model"), "tiny");
}

TEST(ImportMlx, TransposedFactorsOwnTheirBytes) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config());
  d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", make_tensor({6, 4})},
                                           {std::string(kQ) + ".lora_b", make_tensor({4, 5})}});
  WeightAdapter a = read_weight_adapter(d.path());
  // Removing the file must not invalidate the normalized (materialized) factors.
  std::filesystem::remove(d.file("adapters.safetensors"));
  const auto& u = std::get<LowRankUpdate>(a.targets[0].update);
  EXPECT_FLOAT_EQ(test::at2(u.a, 3, 5), 0.01f * (5 * 4 + 3 + 1));
}

TEST(ImportMlx, Defaults) {
  TempDir d;
  d.write_json("adapter_config.json", R"({"fine_tune_type": "lora"})");
  d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", make_tensor({6, 8})},
                                           {std::string(kQ) + ".lora_b", make_tensor({8, 5})}});
  WeightAdapter a = read_weight_adapter(d.path());
  EXPECT_FLOAT_EQ(std::get<LowRankUpdate>(a.targets[0].update).scale, 20.0f);
  EXPECT_EQ(a.metadata.at("rank"), "8");
}

TEST(ImportMlx, LoraAlphaGivesAlphaOverRank) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config(R"({"rank": 4, "lora_alpha": 6, "scale": 20.0})"));
  d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", make_tensor({6, 4})},
                                           {std::string(kQ) + ".lora_b", make_tensor({4, 5})}});
  WeightAdapter a = read_weight_adapter(d.path());
  EXPECT_FLOAT_EQ(std::get<LowRankUpdate>(a.targets[0].update).scale, 1.5f);
}

TEST(ImportMlx, DetectedByLoraParametersAlone) {
  TempDir d;
  d.write_json("adapter_config.json", R"({"lora_parameters": {"rank": 4, "scale": 2.0}})");
  d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", make_tensor({6, 4})},
                                           {std::string(kQ) + ".lora_b", make_tensor({4, 5})}});
  EXPECT_EQ(read_weight_adapter(d.path()).format, AdapterFormat::MlxLm);
}

TEST(ImportMlx, MatrixOrientationAccepted) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config());
  Tensor la = make_tensor({4, 6});  // [r, in]
  Tensor lb = make_tensor({5, 4});  // [out, r]
  d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", la}, {std::string(kQ) + ".lora_b", lb}});
  WeightAdapter a = read_weight_adapter(d.path());
    const auto& u = std::get<LowRankUpdate>(a.targets[0].update);
  EXPECT_TRUE(test::same_values(u.a, la));
  EXPECT_TRUE(test::same_values(u.b, lb));
}

TEST(ImportMlx, SquareProjectionsResolvedByRank) {
  {  // mlx-lm layout on an 8×8 projection: lora_a [8, 2], lora_b [2, 8] also fits the matrix reading (r = 8)
    TempDir d;
    d.write_json("adapter_config.json", mlx_config(R"({"scale": 1.0})"));  // no rank given
    Tensor la = make_tensor({8, 2}), lb = make_tensor({2, 8});
    d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", la}, {std::string(kQ) + ".lora_b", lb}});
    WeightAdapter a = read_weight_adapter(d.path());
    const auto& u = std::get<LowRankUpdate>(a.targets[0].update);
    EXPECT_EQ(u.a.shape, (Shape{2, 8}));
    EXPECT_TRUE(test::is_transpose_of(u.a, la));
  }
  {  // matrix layout on an 8×8 projection
    TempDir d;
    d.write_json("adapter_config.json", mlx_config(R"({"rank": 2, "scale": 1.0})"));
    Tensor la = make_tensor({2, 8}), lb = make_tensor({8, 2});
    d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", la}, {std::string(kQ) + ".lora_b", lb}});
    WeightAdapter a = read_weight_adapter(d.path());
    const auto& u = std::get<LowRankUpdate>(a.targets[0].update);
    EXPECT_TRUE(test::same_values(u.a, la));
    EXPECT_TRUE(test::same_values(u.b, lb));
  }
  {  // config rank decides against the smaller-rank guess: rank 8 means lora_a [2, 8] is mlx-lm [in=2, r=8]
    TempDir d;
    d.write_json("adapter_config.json", mlx_config(R"({"rank": 8, "scale": 1.0})"));
    Tensor la = make_tensor({2, 8}), lb = make_tensor({8, 2});
    d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", la}, {std::string(kQ) + ".lora_b", lb}});
    WeightAdapter a = read_weight_adapter(d.path());
    const auto& u = std::get<LowRankUpdate>(a.targets[0].update);
    EXPECT_EQ(u.a.shape, (Shape{8, 2}));
    EXPECT_TRUE(test::is_transpose_of(u.a, la));
  }
}

TEST(ImportMlx, AmbiguousSquarePairRefused) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config());
  d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", make_tensor({4, 4})},
                                           {std::string(kQ) + ".lora_b", make_tensor({4, 4})}});
  expect_error([&] { read_weight_adapter(d.path()); },
               {d.file("adapters.safetensors"), std::string(kQ) + ".lora_a' [4, 4]", std::string(kQ) + ".lora_b' [4, 4]",
                "ambiguous"});
}

TEST(ImportMlx, EmbeddingLayoutByModuleName) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config());
  Tensor la = make_tensor({10, 4});  // [vocab, r]
  Tensor lb = make_tensor({4, 6});   // [r, hidden]
  d.write_tensors("adapters.safetensors", {{"model.embed_tokens.lora_a", la},
                                           {"model.embed_tokens.lora_b", lb},
                                           {std::string(kQ) + ".lora_a", make_tensor({6, 4})},
                                           {std::string(kQ) + ".lora_b", make_tensor({4, 6})}});
  WeightAdapter a = read_weight_adapter(d.path());
  ASSERT_EQ(a.targets.size(), 2u);
  const auto* e = test::find_target(a, "model.embed_tokens");
  ASSERT_NE(e, nullptr);
  EXPECT_TRUE(e->embedding);
  const auto& u = std::get<LowRankUpdate>(e->update);
  EXPECT_TRUE(test::same_values(u.b, la));  // B = lora_a [vocab, r]
  EXPECT_TRUE(test::same_values(u.a, lb));  // A = lora_b [r, hidden]
  EXPECT_FLOAT_EQ(u.scale, 10.0f);
  EXPECT_FALSE(test::find_target(a, kQ)->embedding);
}

// The matrix orientation lora_a [r, hidden], lora_b [vocab, r] reads directly (Δ = lora_b·lora_a);
// a pair that fits no layout is refused naming both tensors.
TEST(ImportMlx, EmbeddingLinearShapedLayouts) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config());
  const Tensor a = make_tensor({4, 10}), b = make_tensor({6, 4});
  d.write_tensors("adapters.safetensors", {{"model.embed_tokens.lora_a", a}, {"model.embed_tokens.lora_b", b}});
  WeightAdapter w = read_weight_adapter(d.path());
  ASSERT_EQ(w.targets.size(), 1u);
  const auto& u = std::get<LowRankUpdate>(w.targets[0].update);
  EXPECT_TRUE(test::same_values(u.a, a));
  EXPECT_TRUE(test::same_values(u.b, b));
  EXPECT_FALSE(w.targets[0].transposed.has_value());

  // LoRAEmbedding shape pattern: both it and the Linear-shaped mlx reading are kept.
  TempDir e;
  e.write_json("adapter_config.json", mlx_config());
  const Tensor ea = make_tensor({10, 4}), eb = make_tensor({4, 6});
  e.write_tensors("adapters.safetensors", {{"model.embed_tokens.lora_a", ea}, {"model.embed_tokens.lora_b", eb}});
  WeightAdapter we = read_weight_adapter(e.path());
  const auto& primary = std::get<LowRankUpdate>(we.targets[0].update);
  EXPECT_TRUE(test::same_values(primary.b, ea));  // Δ [10, 6] = lora_a·lora_b
  EXPECT_TRUE(test::same_values(primary.a, eb));
  ASSERT_TRUE(we.targets[0].transposed.has_value());
  const auto& alt = std::get<LowRankUpdate>(*we.targets[0].transposed);
  EXPECT_TRUE(test::is_transpose_of(alt.b, eb));  // Δ [6, 10] = (lora_a·lora_b)ᵀ
  EXPECT_TRUE(test::is_transpose_of(alt.a, ea));

  TempDir f;
  f.write_json("adapter_config.json", mlx_config());
  f.write_tensors("adapters.safetensors", {{"model.embed_tokens.lora_a", make_tensor({4, 10})},
                                           {"model.embed_tokens.lora_b", make_tensor({6, 3})}});
  expect_error([&] { read_weight_adapter(f.path()); },
               {f.file("adapters.safetensors"), "model.embed_tokens.lora_a", "LoRAEmbedding"});
}

TEST(ImportMlx, FallbackFileName) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config());
  std::string f = d.write_tensors("adapter_model.safetensors", {{std::string(kQ) + ".lora_a", make_tensor({6, 4})},
                                                                {std::string(kQ) + ".lora_b", make_tensor({4, 5})}});
  WeightAdapter a = read_weight_adapter(d.path());
  EXPECT_EQ(a.metadata.at("file"), f);
}

TEST(ImportMlx, MissingFileRefused) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config());
  d.write_tensors("adapters-00001-of-00002.safetensors", {{"x.lora_a", make_tensor({2, 2})}});
  expect_error([&] { read_weight_adapter(d.path()); }, {d.path(), "adapters.safetensors", "sharded"});
}

TEST(ImportMlx, ConfigRefusals) {
  auto check = [](const std::string& cfg, std::initializer_list<std::string> parts) {
    TempDir d;
    std::string cfg_path = d.write_json("adapter_config.json", cfg);
    d.write_tensors("adapters.safetensors", {{std::string(kQ) + ".lora_a", make_tensor({6, 4})},
                                             {std::string(kQ) + ".lora_b", make_tensor({4, 5})}});
    std::vector<std::string> all(parts);
    all.push_back(cfg_path);
    try {
      read_weight_adapter(d.path());
      ADD_FAILURE() << "expected refusal of " << cfg;
    } catch (const Error& e) {
      for (const auto& p : all) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  };
  check(R"({"fine_tune_type": "full"})", {"fine_tune_type", "full"});
  check(R"({"fine_tune_type": "lokr"})", {"fine_tune_type", "expected \"lora\" or \"dora\""});
  check(R"({"fine_tune_type": "lora", "use_dora": true})", {"use_dora", "dora"});
  check(R"({"lora_parameters": {"rank": 0}})", {"lora_parameters.rank", "positive integer"});
  check(R"({"lora_parameters": {"scale": "big"}})", {"lora_parameters.scale", "number"});
  check(R"({"lora_parameters": [1]})", {"lora_parameters", "object"});
}

// mlx-lm LoRASwitchLinear (SwitchGLU experts): lora_a [E, r, in], lora_b [E, out, r]; expert e's
// update is scale · lora_b[e] · lora_a[e], emitted as <parent>.<e>.<name>.
TEST(ImportMlx, SwitchPairsCutPerExpert) {
  TempDir d;
  d.write_json("adapter_config.json", mlx_config());
  const std::string m = "model.layers.0.mlp.switch_mlp.down_proj";
  const Tensor la = make_tensor({3, 4, 6}, 0.0f, DType::BF16), lb = make_tensor({3, 5, 4}, 1.0f);
  d.write_tensors("adapters.safetensors", {{m + ".lora_a", la}, {m + ".lora_b", lb}});
  const WeightAdapter a = read_weight_adapter(d.path());
  ASSERT_EQ(a.targets.size(), 3u);
  const Tensor fa = convert_tensor(la, DType::F32), fb = convert_tensor(lb, DType::F32);
  for (int64_t e = 0; e < 3; ++e) {
    const auto* t = test::find_target(a, "model.layers.0.mlp.switch_mlp." + std::to_string(e) + ".down_proj");
    ASSERT_NE(t, nullptr) << e;
    const auto& u = std::get<LowRankUpdate>(t->update);
    ASSERT_EQ(u.a.shape, (Shape{4, 6}));
    ASSERT_EQ(u.b.shape, (Shape{5, 4}));
    EXPECT_FLOAT_EQ(u.scale, 10.0f);
    for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(u.a.as<float>()[i], fa.as<float>()[e * 24 + i]);
    for (int64_t i = 0; i < 20; ++i) EXPECT_EQ(u.b.as<float>()[i], fb.as<float>()[e * 20 + i]);
  }
  // No DoRA for switch layers in mlx-lm.
  TempDir dd;
  dd.write_json("adapter_config.json", R"({"fine_tune_type": "dora", "lora_parameters": {"rank": 4, "scale": 1}})");
  const std::string f = dd.write_tensors("adapters.safetensors", {{m + ".lora_a", la}, {m + ".lora_b", lb},
                                                                 {m + ".m", make_tensor({5})}});
  expect_error([&] { read_weight_adapter(dd.path()); }, {f, m, "LoRASwitchLinear", "dora"});
}

TEST(ImportMlx, TensorRefusals) {
  struct Case {
    test::TensorList tensors;
    std::vector<std::string> parts;
  };
  const std::string q = kQ;
  std::vector<Case> cases = {
      {{{q + ".lora_a", make_tensor({6, 4})}, {q + ".lora_b", make_tensor({4, 5})}, {q + ".m", make_tensor({5})}},
       {q + ".m", "DoRA magnitude", "fine_tune_type"}},
      {{{q + ".lora_a", make_tensor({6, 4})}, {q + ".lora_b", make_tensor({4, 5})}, {q + ".weight", make_tensor({5, 6})}},
       {q + ".weight", "not part of the mlx-lm native contract", ".lora_a / .lora_b"}},
      {{{q + ".lora_A.weight", make_tensor({4, 6})}, {q + ".lora_B.weight", make_tensor({5, 4})}},
       {q + ".lora_A.weight", "PEFT key names are not part of the mlx-lm native contract"}},
      {{{q + ".lora_a", make_tensor({6, 4})}}, {q + ".lora_a", "no partner", ".lora_b"}},
      {{{q + ".lora_b", make_tensor({4, 5})}}, {q + ".lora_b", "no partner", ".lora_a"}},
      {{{q + ".lora_a", make_tensor({2, 6, 4})}, {q + ".lora_b", make_tensor({2, 5, 4})}},
       {q + ".lora_a", "do not pair", "LoRASwitchLinear", "[experts, r, in]"}},
      {{{q + ".lora_a", make_tensor({2, 4, 6})}, {q + ".lora_b", make_tensor({3, 5, 4})}},
       {q + ".lora_a", "do not pair", "LoRASwitchLinear"}},
      {{{q + ".lora_a", make_tensor({2, 4, 6})}, {q + ".lora_b", make_tensor({5, 4})}},
       {q + ".lora_a", "do not pair", "LoRASwitchLinear"}},
      {{{"switch_mlp.lora_a", make_tensor({2, 4, 6})}, {"switch_mlp.lora_b", make_tensor({2, 5, 4})}},
       {"switch_mlp", "no parent module"}},
      {{{q + ".lora_a", make_tensor({6, 4})}, {q + ".lora_b", make_tensor({3, 5})}}, {q + ".lora_a", "do not pair"}},
      {{{q + ".lora_a", test::with_value(make_tensor({6, 4}), 7, NAN)}, {q + ".lora_b", make_tensor({4, 5})}},
       {q + ".lora_a", "non-finite"}},
      {{{q + ".lora_a", make_tensor({6, 4})}, {q + ".lora_b", test::with_value(make_tensor({4, 5}), 0, INFINITY)}},
       {q + ".lora_b", "non-finite"}},
      {{{q + ".lora_a", make_tensor({6, 4}, 0, DType::F16)},
        {q + ".lora_b", Tensor::owned(DType::I32, {4, 5}, std::vector<uint8_t>(80))}},
       {q + ".lora_b", "dtype I32", "F32, F16 or BF16"}},
  };
  for (const auto& c : cases) {
    TempDir d;
    d.write_json("adapter_config.json", mlx_config());
    std::string f = d.write_tensors("adapters.safetensors", c.tensors);
    try {
      read_weight_adapter(d.path());
      ADD_FAILURE() << "expected refusal: " << c.parts[0];
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
      for (const auto& p : c.parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace graft::adapter
