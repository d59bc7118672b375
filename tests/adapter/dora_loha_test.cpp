// DoRA and LoHa in the adapter core: import (PEFT use_dora / LOHA, mlx-lm dora, LyCORIS hada_*), the
// refusals with their names, and the merge formulas against a float64 transcription of them.
//
// Tolerance (merge vs float64): |graft - ref| <= 16·2⁻²⁴·(|ref| + |W| + Σ|s·Δ|) per element: graft
// forms P and the norm in F32/double with a handful of roundings per element (P: r products and
// sums; the DoRA factor: one division and one square root, each ≤ 1 ulp), so a few F32 ulps of the
// operands' magnitude; a wrong norm axis, scale or order changes elements by orders of magnitude more.
#include <gtest/gtest.h>

#include <cmath>

#include "graft/adapter/bind.h"
#include "graft/adapter/merge.h"
#include "graft/adapter/weight_adapter.h"
#include "import_test_util.h"

namespace graft::adapter {
namespace {

using test::make_tensor;
using test::TempDir;
using test::TensorList;

const std::string kP = "base_model.model.";
const std::string kQ = kP + "model.layers.0.self_attn.q_proj";

std::vector<double> f64(const Tensor& t) {
  std::vector<float> f(static_cast<size_t>(t.numel()));
  convert_to_f32(t.dtype, t.data, f.data(), t.numel());
  return {f.begin(), f.end()};
}

Tensor values(const Shape& shape, uint32_t seed, float scale) {
  std::vector<float> v(static_cast<size_t>(shape_numel(shape)));
  uint32_t x = seed;
  for (auto& e : v) {
    x = x * 1664525u + 1013904223u;
    e = scale * (static_cast<float>(x >> 8) / 16777216.0f * 2.0f - 1.0f);
  }
  std::vector<uint8_t> bytes(v.size() * 4);
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return Tensor::owned(DType::F32, shape, std::move(bytes));
}

TEST(ImportDora, PeftMagnitudeRequiredAndShaped) {
  TempDir d;
  const std::string cfg = R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "use_dora": true})";
  TensorList t = {{kQ + ".lora_A.weight", make_tensor({2, 6})}, {kQ + ".lora_B.weight", make_tensor({5, 2})},
                  {kQ + ".lora_magnitude_vector", make_tensor({5}, 1.0f)}};
  d.write_json("adapter_config.json", cfg);
  d.write_tensors("adapter_model.safetensors", t);
  WeightAdapter a = read_weight_adapter(d.path());
  ASSERT_EQ(a.targets.size(), 1u);
  const auto& u = std::get<DoraUpdate>(a.targets[0].update);
  EXPECT_FLOAT_EQ(u.lora.scale, 2.0f);
  EXPECT_EQ(u.magnitude.shape, (Shape{5}));
  EXPECT_STREQ(update_kind(a.targets[0].update), "dora");

  TempDir bad;
  bad.write_json("adapter_config.json", cfg);
  t[2].second = make_tensor({4});
  bad.write_tensors("adapter_model.safetensors", t);
  test::expect_error([&] { read_weight_adapter(bad.path()); }, {"lora_magnitude_vector", "[5]"});

  TempDir emb;
  emb.write_json("adapter_config.json", cfg);
  const std::string e = kP + "model.embed_tokens";
  emb.write_tensors("adapter_model.safetensors", {{e + ".lora_embedding_A", make_tensor({2, 9})},
                                                   {e + ".lora_embedding_B", make_tensor({6, 2})},
                                                   {e + ".lora_magnitude_vector", make_tensor({6})}});
  test::expect_error([&] { read_weight_adapter(emb.path()); }, {"embed_tokens", "DoRA embedding", "per hidden column"});
}

TEST(ImportDora, MlxDora) {
  TempDir d;
  const std::string q = "model.layers.0.self_attn.q_proj";
  d.write_json("adapter_config.json", R"({"fine_tune_type": "dora", "lora_parameters": {"rank": 2, "scale": 3.0}})");
  d.write_tensors("adapters.safetensors", {{q + ".lora_a", make_tensor({6, 2})}, {q + ".lora_b", make_tensor({2, 5})},
                                            {q + ".m", make_tensor({5}, 1.0f)}});
  WeightAdapter a = read_weight_adapter(d.path());
  const auto& u = std::get<DoraUpdate>(a.targets[0].update);
  EXPECT_EQ(u.lora.a.shape, (Shape{2, 6}));
  EXPECT_EQ(u.lora.b.shape, (Shape{5, 2}));
  EXPECT_FLOAT_EQ(u.lora.scale, 3.0f);

  TempDir missing;
  missing.write_json("adapter_config.json", R"({"fine_tune_type": "dora"})");
  missing.write_tensors("adapters.safetensors", {{q + ".lora_a", make_tensor({6, 2})}, {q + ".lora_b", make_tensor({2, 5})}});
  test::expect_error([&] { read_weight_adapter(missing.path()); }, {q, "no DoRA magnitude", ".m"});
}

TEST(ImportLoha, PeftAndLycoris) {
  TempDir d;
  d.write_json("adapter_config.json", R"({"peft_type": "LOHA", "r": 2, "alpha": 6})");
  d.write_tensors("adapter_model.safetensors",
                  {{kQ + ".hada_w1_a", make_tensor({5, 2})}, {kQ + ".hada_w1_b", make_tensor({2, 6})},
                   {kQ + ".hada_w2_a", make_tensor({5, 2})}, {kQ + ".hada_w2_b", make_tensor({2, 6})}});
  WeightAdapter a = read_weight_adapter(d.path());
  EXPECT_FLOAT_EQ(std::get<HadamardUpdate>(a.targets[0].update).scale, 3.0f);
  EXPECT_EQ(update_delta_shape(a.targets[0].update), (Shape{5, 6}));

  const std::string m = "lycoris_model_layers_0_self_attn_q_proj";
  TempDir l;
  const std::string file = l.write_tensors(
      "a.safetensors", {{m + ".hada_w1_a", make_tensor({5, 4})}, {m + ".hada_w1_b", make_tensor({4, 6})},
                        {m + ".hada_w2_a", make_tensor({5, 4})}, {m + ".hada_w2_b", make_tensor({4, 6})},
                        {m + ".alpha", test::scalar(2.0f)}});
  WeightAdapter b = read_weight_adapter(file);
  EXPECT_EQ(b.format, AdapterFormat::Lycoris);
  EXPECT_FLOAT_EQ(std::get<HadamardUpdate>(b.targets[0].update).scale, 0.5f);

  TempDir bad;
  const std::string bf = bad.write_tensors(
      "a.safetensors", {{m + ".hada_w1_a", make_tensor({5, 4})}, {m + ".hada_w1_b", make_tensor({4, 6})},
                        {m + ".hada_w2_a", make_tensor({5, 3})}});
  test::expect_error([&] { read_weight_adapter(bf); }, {m, "hada_w2_b"});
}

// f64 transcriptions: LoHa row o = s·(w1a·w1b)[o] ⊙ (w2a·w2b)[o]; DoRA W' = f ⊙ (prev + s·B·A) with
// f = m / ‖W + s·B·A‖_row (W the base, prev the row after earlier updates).
TEST(MergeDoraLoha, MatchesFloat64) {
  const int64_t out = 7, in = 13, r = 3;
  Tensor w = values({out, in}, 1, 0.5f);
  LowRankUpdate l1{values({r, in}, 2, 0.3f), values({out, r}, 3, 0.3f), 0.7f};
  DoraUpdate d1{LowRankUpdate{values({r, in}, 4, 0.3f), values({out, r}, 5, 0.3f), 1.5f}, values({out}, 6, 1.0f)};
  HadamardUpdate h{values({out, 2}, 7, 0.4f), values({2, in}, 8, 0.4f), values({out, 2}, 9, 0.4f),
                   values({2, in}, 10, 0.4f), 2.0f};
  // magnitudes positive
  for (int64_t i = 0; i < out; ++i) const_cast<float*>(d1.magnitude.as<float>())[i] += 1.5f;
  Update u1 = l1, u2 = h, u3 = d1;
  std::vector<PlannedUpdate> plan = {{&u1, 0, 0, out, 1.0f}, {&u2, 0, 0, out, 0.5f}, {&u3, 0, 0, out, 0.8f}};
  Tensor got = merge_tensor(w, plan, MergePolicy::DeltaF32, DType::F32);
  const auto W = f64(w), A1 = f64(l1.a), B1 = f64(l1.b), A3 = f64(d1.lora.a), B3 = f64(d1.lora.b),
             M = f64(d1.magnitude), H1a = f64(h.w1a), H1b = f64(h.w1b), H2a = f64(h.w2a), H2b = f64(h.w2b);
  for (int64_t o = 0; o < out; ++o) {
    std::vector<double> row(in), v(in), p3(in);
    double sq = 0;
    for (int64_t i = 0; i < in; ++i) {
      double p1 = 0, p3i = 0, q1 = 0, q2 = 0;
      for (int64_t k = 0; k < r; ++k) p1 += B1[o * r + k] * A1[k * in + i];
      for (int64_t k = 0; k < r; ++k) p3i += B3[o * r + k] * A3[k * in + i];
      for (int64_t k = 0; k < 2; ++k) q1 += H1a[o * 2 + k] * H1b[k * in + i];
      for (int64_t k = 0; k < 2; ++k) q2 += H2a[o * 2 + k] * H2b[k * in + i];
      const double s3 = 1.5 * 0.8;
      row[i] = W[o * in + i] + 0.7 * p1 + 1.0 * q1 * q2 + s3 * p3i;  // LoHa scale 2·0.5
      v[i] = W[o * in + i] + s3 * p3i;
      sq += v[i] * v[i];
    }
    const double f = M[o] / std::sqrt(sq);
    for (int64_t i = 0; i < in; ++i) {
      const double want = f * row[i];
      const double g = got.as<float>()[o * in + i];
      EXPECT_NEAR(g, want, 16 * 0x1p-24 * (std::abs(want) + std::abs(row[i]) + 4)) << o << "," << i;
    }
  }
  // strength 0 drops a DoRA update: the base comes back (adapter off), bit for bit.
  std::vector<PlannedUpdate> off = {{&u3, 0, 0, out, 0.0f}};
  Tensor same = merge_tensor(w, off, MergePolicy::DeltaF32, DType::F32);
  EXPECT_EQ(0, std::memcmp(same.data, w.data, static_cast<size_t>(w.nbytes())));
}

}  // namespace
}  // namespace graft::adapter
