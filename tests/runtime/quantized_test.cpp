// mlx-lm affine quantization against mlx itself (fixtures: tools/gen_mlx_quant_fixtures.py, see
// tests/fixtures/mlx_quant/README.md for mlx's exact CPU arithmetic):
//   * quantize_affine == mx.quantize bit for bit (codes, scales, biases; f32/bf16/f16, g 32/64/128,
//     4/8 bits, normal/outlier/constant/one-signed/zero/tie groups);
//   * dequantize == mx.dequantize bit for bit in F32 (mlx rounds to the scale dtype twice for
//     bf16/f16; graft computes in F32, so those are checked to that dtype's half-ulp);
//   * matmul_affine == dequantize-then-matmul within F32 rounding: |y - y_exact| <= K·2^-24·Σ|x·w|
//     (a bound for any summation order), and rows of a prefill equal their decode bit for bit;
//   * graft quantize writes exactly what mlx_lm.convert -q wrote (every tensor, every byte);
//   * quantized tiny models (codes kept packed) and an unfused mlx-lm LoRA on them match mlx-lm's
//     logits within 1e-4 (mlx's F32 forward is within 4e-6 of float64; graft's kernel regroups the
//     sums) and its greedy tokens exactly; fusing into them requantizes (or, fuse_dense, keeps dense).
//     These run the F32 affine kernel (matmul_affine: models loaded without prepare_weights, the
//     path GRAFT_Q8_INTERLEAVE=0 keeps); the interleaved int8-activation path that `graft generate`
//     runs by default is held to mlx-lm by InterleavedKernelsStayNearMlxLm, with its own bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/affine_quant.h"
#include "graft/core/error.h"
#include "graft/io/safetensors.h"
#include "graft/model/loader.h"
#include "graft/model/quantize.h"
#include "graft/runtime/kernels.h"
#include "graft/runtime/lora.h"
#include "graft/runtime/transformer.h"
#include "support/run_util.h"
#include "graft/compute/weight.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {
using test::LoraSet;
using test::make_lora_set;

namespace fs = std::filesystem;
using nlohmann::json;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype == b.dtype && a.shape == b.shape && std::memcmp(a.data, b.data, static_cast<size_t>(a.nbytes())) == 0;
}

struct CaseName {
  int group, bits;
};
CaseName parse_case(const std::string& c) {  // "<dtype>_g<G>_b<B>_<kind>"
  const size_t g = c.find("_g"), b = c.find("_b", g + 2);
  return {std::stoi(c.substr(g + 2, b - g - 2)), std::stoi(c.substr(b + 2, c.find('_', b + 2) - b - 2))};
}

TEST(AffineQuant, QuantizeAndDequantizeMatchMlx) {
  auto f = io::SafetensorsFile::open(test::fixture("mlx_quant/cases.safetensors"));
  int cases = 0;
  for (const auto& e : f->entries()) {
    if (e.name.size() < 2 || e.name.substr(e.name.size() - 2) != ".w") continue;
    const std::string c = e.name.substr(0, e.name.size() - 2);
    const CaseName cn = parse_case(c);
    const Tensor w = f->tensor(e.name);
    const AffineQuantized q = quantize_affine(w, cn.bits, cn.group, w.dtype);
    EXPECT_TRUE(same_bytes(q.packed, f->tensor(c + ".q"))) << c;
    EXPECT_TRUE(same_bytes(affine_param_as(q.scales, w.dtype), f->tensor(c + ".scales"))) << c;
    EXPECT_TRUE(same_bytes(affine_param_as(q.biases, w.dtype), f->tensor(c + ".biases"))) << c;

    const AffineQuantized stored = make_affine_quantized(f->tensor(c + ".q"), f->tensor(c + ".scales"),
                                                         f->tensor(c + ".biases"), cn.bits, cn.group, w.shape[0],
                                                         w.shape[1], c);
    const Tensor dq = dequantize_affine(stored);
    const Tensor mlx_dq = to_f32(f->tensor(c + ".dq"));
    if (w.dtype == DType::F32) {
      EXPECT_TRUE(same_bytes(dq, mlx_dq)) << c;
    } else {
      // mlx dequantizes in the scale dtype T: T(T(s·q) + b). Rebuild that from graft's codes and
      // widened scales: equal bits show the codes and parameters are read exactly as mlx does.
      auto round_t = [&](float v) {
        uint16_t h;
        convert_from_f32(&v, w.dtype, &h, 1);
        float back;
        convert_to_f32(w.dtype, &h, &back, 1);
        return back;
      };
      const int64_t cols = w.shape[1];
      const Tensor scales_f32 = to_f32(stored.scales), biases_f32 = to_f32(stored.biases);
      for (int64_t i = 0; i < dq.numel(); ++i) {
        const int64_t r = i / cols, col = i % cols, g = r * (cols / cn.group) + col / cn.group;
        const float s = scales_f32.as<float>()[g], b = biases_f32.as<float>()[g];
        const int64_t per_word = 32 / cn.bits, words = cols / per_word;
        uint32_t word;  // the file may place the codes at any byte offset
        std::memcpy(&word, static_cast<const uint8_t*>(stored.packed.data) + (r * words + col / per_word) * 4, 4);
        const float code = static_cast<float>((word >> ((col % per_word) * cn.bits)) & ((1u << cn.bits) - 1));
        ASSERT_EQ(round_t(round_t(s * code) + b), mlx_dq.as<float>()[i]) << c << " element " << i;
      }
    }
    ++cases;
  }
  EXPECT_EQ(cases, 126);
}

TEST(AffineQuant, RefusesUnsupportedAndInconsistentInput) {
  const Tensor w = Tensor::zeros_f32({2, 64});
  EXPECT_THROW(quantize_affine(w, 3, 64, DType::F32), Error);
  EXPECT_THROW(quantize_affine(w, 4, 48, DType::F32), Error);
  EXPECT_THROW(quantize_affine(Tensor::zeros_f32({2, 96}), 4, 64, DType::F32), Error);
  const AffineQuantized q = quantize_affine(w, 4, 32, DType::F32);
  EXPECT_THROW(make_affine_quantized(q.packed, q.scales, q.biases, 8, 32, 2, 64, "m"), Error);  // codes too short
  EXPECT_THROW(make_affine_quantized(q.packed, q.scales, q.biases, 4, 64, 2, 64, "m"), Error);  // scales shape
}

TEST(AffineQuant, MatmulMatchesDequantizeThenMatmul) {
  auto f = io::SafetensorsFile::open(test::fixture("mlx_quant/matmul.safetensors"));
  ThreadPool pool(2);
  for (const std::string cfg : {"b4_g64_f32", "b4_g64_bf16", "b8_g32_f32", "b8_g32_bf16"}) {
    const int bits = cfg[1] - '0', group = std::stoi(cfg.substr(4, 2));
    const AffineQuantized w = make_affine_quantized(f->tensor(cfg + ".q"), f->tensor(cfg + ".scales"),
                                                    f->tensor(cfg + ".biases"), bits, group, 32, 256, cfg);
    const Tensor x = f->tensor(cfg + ".x"), exact = f->tensor(cfg + ".y_exact"), mlx = f->tensor(cfg + ".y");
    std::vector<float> y(3 * 32);
    compute::matmul_affine(pool, x.as<float>(), 3, 256, w, y.data());
    const Tensor dq = dequantize_affine(w);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 32; ++j) {
        double mag = 0;
        for (int64_t k = 0; k < 256; ++k) mag += std::abs(double(x.as<float>()[i * 256 + k]) * dq.as<float>()[j * 256 + k]);
        const double bound = 256 * std::ldexp(1.0, -24) * mag;
        EXPECT_LE(std::abs(y[i * 32 + j] - exact.as<float>()[i * 32 + j]), bound) << cfg << " " << i << "," << j;
        EXPECT_LE(std::abs(y[i * 32 + j] - mlx.as<float>()[i * 32 + j]), 2 * bound) << cfg << " vs mlx";
      }
  }
}

TEST(AffineQuant, MatmulRowsAreIndependentOfBatchAndThreads) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.3f);
  for (int bits : {4, 8})
    for (int group : {32, 64, 128}) {
      const int64_t n = 37, k = 384, m = 7;
      std::vector<float> wv(n * k), x(m * k);
      for (auto& v : wv) v = nd(rng);
      for (auto& v : x) v = nd(rng);
      std::vector<uint8_t> bytes(wv.size() * 4);
      std::memcpy(bytes.data(), wv.data(), bytes.size());
      const AffineQuantized w = quantize_affine(Tensor::owned(DType::F32, {n, k}, bytes), bits, group, DType::BF16);
      ThreadPool one(1), two(2);
      std::vector<float> all(m * n), all2(m * n), row(n);
      compute::matmul_affine(two, x.data(), m, k, w, all.data());
      compute::matmul_affine(one, x.data(), m, k, w, all2.data());
      EXPECT_EQ(std::memcmp(all.data(), all2.data(), all.size() * 4), 0);
      for (int64_t i = 0; i < m; ++i) {
        compute::matmul_affine(two, x.data() + i * k, 1, k, w, row.data());
        ASSERT_EQ(std::memcmp(row.data(), all.data() + i * n, n * 4), 0) << bits << "/" << group << " row " << i;
      }
    }
}

TEST(AffineQuant, GraftQuantizeWritesWhatMlxLmConvertWrote) {
  struct C {
    const char *base, *mlx;
    int bits, group;
  };
  for (const C c : {C{"llama_f32", "llama_f32_q4g32", 4, 32}, C{"qwen2_bf16", "qwen2_bf16_q8g64", 8, 64},
                    C{"qwen3_f32", "qwen3_f32_q4g64", 4, 64}}) {
    const std::string out = ::testing::TempDir() + "/graft_quantize_" + c.mlx;
    fs::remove_all(out);
    model::QuantizeOptions o;
    o.bits = c.bits;
    o.group_size = c.group;
    const auto r = model::quantize_checkpoint(test::fixture(std::string("models/") + c.base), out, o);
    auto mine = io::SafetensorsFile::open(out + "/model.safetensors");
    auto theirs = io::SafetensorsFile::open(test::fixture(std::string("mlx_quant/models/") + c.mlx + "/model.safetensors"));
    ASSERT_EQ(mine->entries().size(), theirs->entries().size()) << c.mlx;
    for (const auto& e : theirs->entries())
      EXPECT_TRUE(same_bytes(mine->tensor(e.name), theirs->tensor(e.name))) << c.mlx << ": " << e.name;
    EXPECT_GT(r.quantized_modules, 0);
    // The result loads in graft with the same config block mlx-lm writes.
    model::LoadedModel m = model::load_model(out);
    ASSERT_TRUE(m.config.quantization);
    EXPECT_EQ(m.config.quantization->default_spec, (model::QuantSpec{c.bits, c.group}));
    fs::remove_all(out);
  }
  EXPECT_THROW(model::quantize_checkpoint(test::fixture("mlx_quant/models/llama_f32_q4g32"), ::testing::TempDir() + "/x", {}),
               Error);  // already quantized
}

using test::greedy_ids;
using test::max_abs_diff;
using test::prompt_logits;

class QuantizedModel : public ::testing::TestWithParam<const char*> {};

// The fixture model's adapter as the runtime's unfused set.
std::shared_ptr<const LoraSet> fixture_lora_set(const model::LoadedModel& m, const std::string& dir) {
  auto adapter = std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(dir + "/adapters"));
  return make_lora_set(m.config, *m.source, {{adapter, 1.0f}});
}

// mlx-lm's logits without and with the adapter, and the suffix of the greedy keys that go with them:
// F32-activation references for a bf16 checkpoint (mlx-lm runs it in bf16; *_f32act is graft's
// arithmetic).
struct MlxReferences {
  std::shared_ptr<io::SafetensorsFile> base, lora;
  std::string sfx;
};
MlxReferences mlx_references(const std::string& dir) {
  const bool bf16 = fs::exists(dir + "/reference_f32act.safetensors");
  return {io::SafetensorsFile::open(dir + (bf16 ? "/reference_f32act.safetensors" : "/reference.safetensors")),
          io::SafetensorsFile::open(dir + (bf16 ? "/reference_lora_f32act.safetensors" : "/reference_lora.safetensors")),
          bf16 ? "_f32act" : ""};
}

// One mlx fixture model as the tests below use it: its reference.json, the model loaded as
// `graft generate` loads it, the fixture adapter's unfused set, mlx-lm's logits.
struct MlxCase {
  std::string dir;
  json ref;
  model::LoadedModel m;
  std::shared_ptr<const LoraSet> set;
  MlxReferences refs;
};
MlxCase mlx_case(const char* name) {
  const std::string dir = test::fixture(std::string("mlx_quant/models/") + name);
  model::LoadedModel m = model::load_model(dir);
  auto set = fixture_lora_set(m, dir);
  return {dir, test::read_json(dir + "/reference.json"), std::move(m), std::move(set), mlx_references(dir)};
}

TEST_P(QuantizedModel, BaseAndUnfusedLoraMatchMlxLm) {
  auto [dir, ref, m, set, refs] = mlx_case(GetParam());
  const auto& [base_ref, lora_ref, sfx] = refs;
  ASSERT_TRUE(m.quantized);
  EXPECT_TRUE(m.weights.layers[0].q.quantized() && m.weights.embed.quantized());  // codes, not a dequantized copy
  for (size_t p = 0; p < ref["prompts"].size(); ++p) {
    const auto& pr = ref["prompts"][p];
    const auto ids = pr["ids"].get<std::vector<int32_t>>();
    const std::string key = "logits_" + std::to_string(p);
    EXPECT_LE(max_abs_diff(prompt_logits(m, nullptr, {}, ids), base_ref->tensor(key)), 1e-4f) << GetParam() << " prompt " << p;
    EXPECT_LE(max_abs_diff(prompt_logits(m, set, {1.0f}, ids), lora_ref->tensor(key)), 1e-4f) << GetParam() << " lora prompt " << p;
    if (pr.contains("greedy" + sfx)) {
      const auto want = pr["greedy" + sfx].get<std::vector<int32_t>>();
      EXPECT_EQ(greedy_ids(m, nullptr, {}, ids, want.size()), want) << GetParam() << " prompt " << p;
    }
    if (pr.contains("greedy_lora" + sfx)) {
      const auto want = pr["greedy_lora" + sfx].get<std::vector<int32_t>>();
      EXPECT_EQ(greedy_ids(m, set, {1.0f}, ids, want.size()), want) << GetParam() << " lora prompt " << p;
    }
  }
}

// The default path on CPUs with an integer kernel (what `graft generate` runs): the affine matrices
// interleaved and multiplied with 8-bit activations (runtime/interleaved_blocks.h), no longer F32
// math, so mlx-lm's logits are met to the activation rounding, not to 1e-4. Measured (AVX512-VNNI,
// every kernel gives the same bits): max |Δlogit| per prompt 0.16-0.33 (logits of these random tiny
// models span about ±5), bound 0.5. Greedy tokens equal mlx-lm's until a step where mlx-lm's top two
// are closer than twice that prompt's max |Δlogit| (a flip needs the errors of the two to add up to
// the gap); measured divergences at gaps 0.0037-0.105 against bounds 0.33-0.67, 5 of 18 sequences
// in full; nothing after a divergence is compared.
TEST_P(QuantizedModel, InterleavedKernelsStayNearMlxLm) {
  if (!compute::interleave_enabled_affine()) GTEST_SKIP() << "no interleaved integer kernel on this CPU (or GRAFT_Q8_INTERLEAVE=0)";
  auto [dir, ref, m, set, refs] = mlx_case(GetParam());
  // A mixture-of-experts model also moves where the rounding flips a near-tied router choice (one
  // expert's output swapped for another's): measured 0.67 on qwen3_moe_f32_q4g32, bound 1.0.
  const float kMaxAbs = m.config.num_experts > 0 ? 1.0f : 0.5f;
  const auto& [base_ref, lora_ref, sfx] = refs;
  ThreadPool prep(2);
  EXPECT_GT(prepare_weights(m.weights, prep), 0);
  EXPECT_NE(describe_kernels(m.weights).find("affine 4/8-bit rows interleaved x16"), std::string::npos);
  for (size_t p = 0; p < ref["prompts"].size(); ++p) {
    const auto& pr = ref["prompts"][p];
    const auto ids = pr["ids"].get<std::vector<int32_t>>();
    const std::string key = "logits_" + std::to_string(p);
    const float base_err = max_abs_diff(prompt_logits(m, nullptr, {}, ids), base_ref->tensor(key));
    const float lora_err = max_abs_diff(prompt_logits(m, set, {1.0f}, ids), lora_ref->tensor(key));
    EXPECT_LE(base_err, kMaxAbs) << GetParam() << " prompt " << p;
    EXPECT_LE(lora_err, kMaxAbs) << GetParam() << " lora prompt " << p;
    EXPECT_GT(base_err, 0.0f) << "the interleaved path is not a different computation";
    for (const bool lora : {false, true}) {
      const std::string gk = (lora ? "greedy_lora" : "greedy") + sfx, tk = (lora ? "top2_gap_lora" : "top2_gap") + sfx;
      if (!pr.contains(gk)) continue;
      const auto want = pr[gk].get<std::vector<int32_t>>();
      const auto gaps = pr[tk].get<std::vector<double>>();
      const auto got = lora ? greedy_ids(m, set, {1.0f}, ids, want.size()) : greedy_ids(m, nullptr, {}, ids, want.size());
      const double near_tie = 2.0 * (lora ? lora_err : base_err);
      for (size_t i = 0; i < want.size(); ++i) {
        if (got[i] == want[i]) continue;
        EXPECT_LT(gaps[i], near_tie) << GetParam() << " " << gk << " prompt " << p << ": diverged at step " << i;
        break;
      }
    }
  }
}

// Fusing into a quantized checkpoint: by default each changed matrix is quantized again at 8 bits with
// its own group size (still on the integer kernels), with fuse_dense it stays dense (the adapter
// exactly). Both land near the unfused result: the requantized weights differ from W + ΔW by up to
// half an 8-bit step per element, so the bound is the adapter's own effect.
TEST_P(QuantizedModel, FusingRequantizesByDefaultOrKeepsDense) {
  const std::string dir = test::fixture(std::string("mlx_quant/models/") + GetParam());
  auto adapter = std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(dir + "/adapters"));
  model::LoadOptions o;
  o.fused_adapters = {{adapter, 1.0f}};
  model::LoadedModel requantized = model::load_model(dir, o);
  ASSERT_TRUE(requantized.weights.layers[0].q.quantized());
  EXPECT_EQ(requantized.weights.layers[0].q.quant.bits, 8);
  EXPECT_EQ(requantized.weights.layers[0].q.quant.group_size, model::load_model(dir).weights.layers[0].q.quant.group_size);
  o.fuse_dense = true;
  model::LoadedModel dense = model::load_model(dir, o);
  EXPECT_FALSE(dense.weights.layers[0].q.quantized());
  EXPECT_EQ(dense.weights.layers[0].q.dense.dtype, DType::F32);
  int64_t dense_count = 0;
  for (const auto& [format, count] : dense.fused_formats) dense_count += format == "F32" ? count : 0;
  EXPECT_EQ(dense_count, static_cast<int64_t>(dense.fused->updates.size()));
  model::LoadedModel m = model::load_model(dir);
  auto set = make_lora_set(m.config, *m.source, {{adapter, 1.0f}});
  const std::vector<int32_t> ids = {5, 17, 42, 99};
  const auto b = prompt_logits(m, set, {1.0f}, ids), base = prompt_logits(m, nullptr, {}, ids);
  for (model::LoadedModel* fused : {&requantized, &dense}) {
    const auto a = prompt_logits(*fused, nullptr, {}, ids);
    double err = 0, effect = 0;
    for (size_t i = 0; i < a.size(); ++i) err += std::abs(a[i] - b[i]), effect += std::abs(b[i] - base[i]);
    EXPECT_LT(err, effect) << (fused == &dense ? "dense" : "requantized") << " fuse is further from the adapter "
                           << "than the base is";
  }
}

INSTANTIATE_TEST_SUITE_P(Mlx, QuantizedModel, ::testing::Values("llama_f32_q4g32", "qwen2_bf16_q8g64", "qwen3_f32_q4g64",
                                                              "qwen3_moe_f32_q4g32"));  // experts stacked as switch_mlp

}  // namespace
}  // namespace graft::runtime
