// Bindings, bind-time validation and the adapted overlay source, on in-memory adapters and bases.
#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "graft/adapter/adapted_source.h"
#include "graft/adapter/bind.h"
#include "graft/adapter/bindings.h"
#include "graft/core/error.h"
#include "map_source.h"

namespace graft::adapter {
namespace {

using test::MapSource;

Tensor filled(const Shape& s, float start, float step) {
  Tensor t = Tensor::zeros_f32(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.mutable_as<float>()[i] = start + step * static_cast<float>(i % 17);
  return t;
}

std::shared_ptr<MapSource> base_model() {
  auto s = std::make_shared<MapSource>();
  s->t["model.layers.0.self_attn.q_proj.weight"] = filled({6, 5}, 0.1f, 0.01f);
  s->t["model.layers.0.self_attn.k_proj.weight"] = filled({2, 5}, -0.2f, 0.02f);
  s->t["model.layers.0.self_attn.v_proj.weight"] = filled({2, 5}, 0.3f, -0.01f);
  s->t["model.layers.0.self_attn.q_proj.bias"] = filled({6}, 0.0f, 0.1f);
  s->t["model.norm.weight"] = filled({5}, 1.0f, 0.0f);
  return s;
}

std::shared_ptr<WeightAdapter> lora(const std::string& module, int64_t out, int64_t in, int64_t r, float scale) {
  auto a = std::make_shared<WeightAdapter>();
  a->path = "mem-adapter";
  AdapterTarget t;
  t.module = module;
  t.update = LowRankUpdate{filled({r, in}, 0.5f, -0.03f), filled({out, r}, 0.2f, 0.05f), scale};
  t.keys = {module + ".lora_A.weight", module + ".lora_B.weight"};
  a->targets.push_back(t);
  return a;
}

TEST(Bindings, GeneratesAliasesForwardFromTensorNames) {
  auto base = base_model();
  WeightAdapterBindings b = bindings_for_source(*base);
  for (const char* alias : {"model.layers.0.self_attn.q_proj", "base_model.model.model.layers.0.self_attn.q_proj",
                            "lora_unet_model_layers_0_self_attn_q_proj", "lycoris_model_layers_0_self_attn_q_proj"}) {
    const Binding* r = b.resolve(alias, "weight");
    ASSERT_NE(r, nullptr) << alias;
    EXPECT_EQ(r->slices[0].tensor, "model.layers.0.self_attn.q_proj.weight");
  }
  EXPECT_EQ(b.resolve("model.layers.0.self_attn.q_proj", "bias")->slices[0].tensor, "model.layers.0.self_attn.q_proj.bias");
  EXPECT_EQ(b.resolve("model.layers.0.self_attn.o_proj", "weight"), nullptr);
}

TEST(Bindings, TwoTensorsClaimingOneAliasIsAnError) {
  WeightAdapterBindings b;
  b.add_tensor("a.b.weight", {2, 2});
  try {
    b.add_tensor("a_b.weight", {2, 2});  // flattens to the same kohya alias "lora_unet_a_b"
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'a.b.weight'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'a_b.weight'"), std::string::npos) << e.what();
  }
}

TEST(Bind, SplitsFusedProjectionByOutputRows) {
  auto base = base_model();
  WeightAdapterBindings b = bindings_for_source(*base);
  b.add_fused_split("model.layers.0.self_attn.qkv_proj",
                    {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                     "model.layers.0.self_attn.v_proj.weight"});
  auto a = lora("base_model.model.model.layers.0.self_attn.qkv_proj", 10, 5, 2, 0.5f);
  auto plan = bind_weight_adapter({{a, 1.0f}}, b, *base);
  ASSERT_EQ(plan->updates.size(), 3u);
  const auto& k = plan->updates.at("model.layers.0.self_attn.k_proj.weight")[0];
  EXPECT_EQ(k.src_row, 6);
  EXPECT_EQ(k.dst_row, 0);
  EXPECT_EQ(k.rows, 2);
}

TEST(Bind, PlacesSeparateProjectionsIntoFusedTensor) {
  MapSource base;
  base.t["layer.qkv.weight"] = filled({10, 5}, 0.1f, 0.01f);
  WeightAdapterBindings b = bindings_for_source(base);
  b.add_fused_part("layer.k_proj", "layer.qkv.weight", 6, 2);
  auto plan = bind_weight_adapter({{lora("layer.k_proj", 2, 5, 1, 1.0f), 1.0f}}, b, base);
  const auto& u = plan->updates.at("layer.qkv.weight")[0];
  EXPECT_EQ(u.dst_row, 6);
  EXPECT_EQ(u.rows, 2);
}

TEST(Bind, ListsEveryProblemBeforeTouchingAnything) {
  auto base = base_model();
  // Packed integer codes (mlx's U32): fusing would have to requantize. (GGUF block bases such as
  // Q4_0 do fuse: they are dequantized and the merged weight stays F32.)
  base->t["model.layers.0.mlp.gate_proj.weight"] = Tensor::owned(DType::U32, {2, 32}, std::vector<uint8_t>(256));
  WeightAdapterBindings b = bindings_for_source(*base);
  auto a = std::make_shared<WeightAdapter>();
  a->path = "bad-adapter";
  auto add = [&](const std::string& m, Update u) {
    AdapterTarget t;
    t.module = m;
    t.update = std::move(u);
    t.keys = {m + ".lora_A.weight"};
    a->targets.push_back(t);
  };
  add("model.layers.0.self_attn.q_proj", LowRankUpdate{filled({2, 5}, 0, 1), filled({6, 2}, 0, 1), 1});  // fine
  add("model.layers.0.self_attn.o_proj", LowRankUpdate{filled({2, 5}, 0, 1), filled({5, 2}, 0, 1), 1});  // no base
  add("model.layers.0.self_attn.k_proj", LowRankUpdate{filled({2, 4}, 0, 1), filled({2, 2}, 0, 1), 1});  // shape
  add("model.layers.0.self_attn.v_proj", LowRankUpdate{filled({2, 2, 5}, 0, 1), filled({2, 2, 2}, 0, 1), 1});  // 3-D
  add("model.layers.0.mlp.gate_proj", LowRankUpdate{filled({1, 32}, 0, 1), filled({2, 1}, 0, 1), 1});  // quantized
  add("lora_unet_model_layers_0_self_attn_q_proj", LowRankUpdate{filled({2, 5}, 0, 1), filled({6, 2}, 0, 1), 1});  // dup
  const int reads_before = base->reads;
  try {
    bind_weight_adapter({{a, 1.0f}}, b, *base);
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("5 problems"), std::string::npos) << m;
    EXPECT_NE(m.find("o_proj' (weight; keys"), std::string::npos) << m;
    EXPECT_NE(m.find("no matching base weight"), std::string::npos) << m;
    EXPECT_NE(m.find("update shape [2, 4] does not match the base weight [2, 5]"), std::string::npos) << m;
    EXPECT_NE(m.find("3-D update"), std::string::npos) << m;
    EXPECT_NE(m.find("--lora"), std::string::npos) << m;
    EXPECT_NE(m.find("both resolve to base weight"), std::string::npos) << m;
    EXPECT_NE(m.find("bad-adapter"), std::string::npos) << m;
  }
  EXPECT_EQ(base->reads, reads_before) << "validation must not read weights";
}

TEST(Bind, AdapterMatchingNothingIsRefused) {
  auto base = base_model();
  EXPECT_THROW(bind_weight_adapter({{std::make_shared<WeightAdapter>(), 1.0f}}, bindings_for_source(*base), *base), Error);
}

TEST(Bind, NonFiniteStrengthIsRefused) {
  auto base = base_model();
  auto a = lora("model.layers.0.self_attn.q_proj", 6, 5, 2, 1.0f);
  EXPECT_THROW(bind_weight_adapter({{a, std::numeric_limits<float>::infinity()}}, bindings_for_source(*base), *base), Error);
}

TEST(AdaptedSource, MaterializesOnReadAndNeverTouchesTheBase) {
  auto base = base_model();
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  std::vector<float> before(base->t[q].as<float>(), base->t[q].as<float>() + 30);
  auto plan = bind_weight_adapter({{lora("model.layers.0.self_attn.q_proj", 6, 5, 2, 0.5f), 2.0f}},
                                  bindings_for_source(*base), *base);
  AdaptedSourceOptions opt;
  opt.cache = false;
  auto src = make_weight_adapter_source(base, plan, opt);
  Tensor once = src->read(q);
  Tensor twice = src->read(q);
  ASSERT_EQ(std::memcmp(once.data, twice.data, 30 * 4), 0) << "a second read must not apply the update twice";
  EXPECT_EQ(std::memcmp(before.data(), base->t[q].data, 30 * 4), 0) << "the base must stay untouched";
  EXPECT_NE(std::memcmp(before.data(), once.data, 30 * 4), 0) << "the adapted tensor must differ";
  // Untouched tensors pass through zero-copy.
  EXPECT_EQ(src->read("model.norm.weight").data, base->t["model.norm.weight"].data);
  // Expected value of one element: W + strength * scale * Σ_k B[o,k] A[k,i].
  const auto& lr = std::get<LowRankUpdate>(plan->adapters[0].adapter->targets[0].update);
  float p = 0;
  for (int k = 0; k < 2; ++k) p += lr.b.as<float>()[3 * 2 + k] * lr.a.as<float>()[k * 5 + 4];
  EXPECT_NEAR(once.as<float>()[3 * 5 + 4], before[3 * 5 + 4] + 1.0f * p, 1e-6f);
}

TEST(AdaptedSource, CacheKeepsOneDtypePerTensor) {
  auto base = base_model();
  const std::string q = "model.layers.0.self_attn.q_proj.weight";
  auto plan = bind_weight_adapter({{lora("model.layers.0.self_attn.q_proj", 6, 5, 2, 1.0f), 1.0f}},
                                  bindings_for_source(*base), *base);
  AdaptedSourceOptions opt;
  opt.cache = true;
  WeightAdapterSource src(base, plan, opt);
  Tensor a = src.read_as(q, DType::BF16);
  Tensor b = src.read_as(q, DType::BF16);
  EXPECT_EQ(a.data, b.data) << "second read served from the cache";
  Tensor c = src.read_as(q, DType::F32);
  EXPECT_EQ(c.dtype, DType::F32);
  EXPECT_EQ(src.cached_tensors(), 1u) << "a read in another dtype replaces the cached one";
}

TEST(AdaptedSource, EmptyPlanIsTheBaseItself) {
  auto base = base_model();
  auto plan = std::make_shared<WeightAdapterPlan>();
  EXPECT_EQ(make_weight_adapter_source(base, plan).get(), base.get());
}

}  // namespace
}  // namespace graft::adapter
