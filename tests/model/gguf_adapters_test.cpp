// llama.cpp GGUF LoRA adapters made by llama.cpp's own converter (convert_lora_to_gguf.py, run by
// tools/gen_gguf_lora_fixtures.py; tests/fixtures/gguf_adapters/manifest.json has the commands and
// every tensor's stored type) from committed PEFT adapters, bound to the same base as the PEFT
// adapter: the normalized factors and the merged tensors must equal the PEFT path's.
//
// Tolerances, per element, derived a priori from the PEFT factors (never from the GGUF values):
//   * --outtype f32: exact (bit-identical factors after graft un-permutes the q/k lora_b rows, and
//     the same merge code), checked with memcmp;
//   * f16: |x|·2⁻¹¹ + 2⁻²⁵ per factor element (round to nearest; 2⁻²⁵ is half the subnormal step);
//   * bf16: |x|·2⁻⁸ + 2⁻¹³³;
//   * q8_0 (lora_a rows whose length is a multiple of 32; the converter writes the others F16):
//     0.57·d per element with d = amax(block of 32)/127: half a quantization step plus the F16
//     rounding of d itself (127·2⁻¹¹·d < 0.07·d);
//   * merged W' = W + s·B·A: s·Σₖ(|Bₖ|·e_A + e_B·(|Aₖ| + e_A)) from those factor bounds, plus
//     1e-6·(|W| + s·Σₖ|Bₖ||Aₖ|) for F32 summation order (rank ≤ 8: r·2⁻²⁴ ≈ 5e-7).
// Each adapted tensor must move by far more than its tolerance, so the comparison can fail.
// The q/k lora_b rows as stored must differ from PEFT's (the converter's permutation is there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "gguf_test_writer.h"
#include "graft/adapter/adapted_source.h"
#include "graft/adapter/weight_adapter.h"
#include "graft/core/convert.h"
#include "graft/core/error.h"
#include "graft/io/gguf.h"
#include "graft/io/gguf_writer.h"
#include "graft/model/gguf_adapters.h"
#include "graft/model/loader.h"
#include "graft/model/model_adapters.h"
#include "test_paths.h"

namespace graft::model {
namespace {

namespace fs = std::filesystem;
using adapter::LowRankUpdate;
using adapter::WeightAdapter;
using adapter::WeightAdapterPlan;

std::shared_ptr<const WeightAdapter> read(const std::string& path) {
  return std::make_shared<const WeightAdapter>(adapter::read_weight_adapter(path));
}

std::vector<float> f32(const Tensor& t) {
  const Tensor f = to_f32(t);
  return {f.as<float>(), f.as<float>() + f.numel()};
}

// Per-element error bound of a factor stored as `type` (GGML type name), given PEFT's values in
// the stored row-major order (blocks of 32 run along rows).
std::vector<float> factor_bound(const std::vector<float>& ref, const std::string& type) {
  std::vector<float> e(ref.size(), 0.0f);
  for (size_t i = 0; i < ref.size(); ++i) {
    const float x = std::abs(ref[i]);
    if (type == "F16") e[i] = x * std::ldexp(1.0f, -11) + std::ldexp(1.0f, -25);
    if (type == "BF16") e[i] = x * std::ldexp(1.0f, -8) + std::ldexp(1.0f, -133);
  }
  if (type == "Q8_0")
    for (size_t b = 0; b < ref.size(); b += 32) {
      float amax = 0;
      for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::abs(ref[i]));
      for (size_t i = b; i < b + 32; ++i) e[i] = 0.57f * amax / 127.0f;
    }
  return e;
}

struct Case {
  const char* file;   // under gguf_adapters/
  const char* model;  // under models/
  const char* peft;   // under engine_adapters/
};

class GgufConverted : public ::testing::TestWithParam<Case> {};

TEST_P(GgufConverted, FactorsAndMergedTensorsEqualPeft) {
  const Case c = GetParam();
  nlohmann::json manifest;
  std::ifstream(test::fixture("gguf_adapters/manifest.json")) >> manifest;
  const auto& types = manifest["files"][c.file]["tensors"];
  ModelSource m = open_model_source(test::fixture(std::string("models/") + c.model));
  auto peft = bind_model_adapters(m.config, *m.source, {{read(test::fixture(std::string("engine_adapters/") + c.peft)), 1.0f}},
                                  AdapterPath::Fused);
  auto gguf = bind_model_adapters(m.config, *m.source, {{read(test::fixture(std::string("gguf_adapters/") + c.file)), 1.0f}},
                                  AdapterPath::Fused);
  ASSERT_EQ(peft->updates.size(), gguf->updates.size());
  adapter::AdaptedSourceOptions ao;
  ao.dtype = DType::F32;
  auto peft_w = adapter::make_weight_adapter_source(m.source, peft, ao);
  auto gguf_w = adapter::make_weight_adapter_source(m.source, gguf, ao);
  const bool exact = std::string(c.file).find(".f32.") != std::string::npos;
  for (const auto& b : gguf->bound) {
    const std::string& tensor = b.slice.tensor;
    SCOPED_TRACE(tensor);
    ASSERT_EQ(peft->updates.count(tensor), 1u);
    const auto& pu = std::get<LowRankUpdate>(*peft->updates.at(tensor).at(0).update);
    const auto& gu = std::get<LowRankUpdate>(*gguf->updates.at(tensor).at(0).update);
    const auto& keys = gguf->adapters[b.adapter_index].adapter->targets[b.target_index].keys;  // lora_a, lora_b
    ASSERT_EQ(pu.a.shape, gu.a.shape);
    ASSERT_EQ(pu.b.shape, gu.b.shape);
    EXPECT_EQ(pu.scale, gu.scale);
    const auto pa = f32(pu.a), pb = f32(pu.b), ga = f32(gu.a), gb = f32(gu.b);
    const auto ea = factor_bound(pa, types[keys[0]]["type"]), eb = factor_bound(pb, types[keys[1]]["type"]);
    for (size_t i = 0; i < pa.size(); ++i) ASSERT_LE(std::abs(pa[i] - ga[i]), ea[i]) << "A element " << i;
    for (size_t i = 0; i < pb.size(); ++i) ASSERT_LE(std::abs(pb[i] - gb[i]), eb[i]) << "B element " << i;

    const Tensor wp = peft_w->read(tensor), wg = gguf_w->read(tensor), w0 = to_f32(m.source->read(tensor));
    ASSERT_EQ(wp.nbytes(), wg.nbytes());
    if (exact) {
      EXPECT_EQ(std::memcmp(wp.data, wg.data, static_cast<size_t>(wp.nbytes())), 0) << "F32 conversion not exact";
    }
    const int64_t rows = pu.b.shape[0], r = pu.a.shape[0], cols = pu.a.shape[1];
    const float s = std::abs(pu.scale);
    float moved = 0, worst = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        float bound = 0, mag = 0;
        for (int64_t k = 0; k < r; ++k) {
          const size_t ik = static_cast<size_t>(i * r + k), kj = static_cast<size_t>(k * cols + j);
          bound += std::abs(pb[ik]) * ea[kj] + eb[ik] * (std::abs(pa[kj]) + ea[kj]);
          mag += std::abs(pb[ik]) * std::abs(pa[kj]);
        }
        const size_t ij = static_cast<size_t>(i * cols + j);
        const float w = w0.as<float>()[ij];
        const float tol = s * bound + 1e-6f * (std::abs(w) + s * mag);
        const float d = std::abs(wp.as<float>()[ij] - wg.as<float>()[ij]);
        worst = std::max(worst, d / tol);
        ASSERT_LE(d, tol) << "merged element (" << i << ", " << j << ")";
        moved = std::max(moved, std::abs(wg.as<float>()[ij] - w) / std::max(tol, 1e-30f));
      }
    EXPECT_GT(moved, 100.0f) << "the adapter barely moves this tensor: the comparison could not fail";
    RecordProperty(tensor + "_worst_fraction_of_tolerance", std::to_string(worst));
  }
}

INSTANTIATE_TEST_SUITE_P(Converter, GgufConverted,
                         ::testing::Values(Case{"llama_f32_lora.f32.gguf", "llama_f32", "llama_f32/peft_lora"},
                                           Case{"llama_f32_lora.f16.gguf", "llama_f32", "llama_f32/peft_lora"},
                                           Case{"llama_f32_lora.bf16.gguf", "llama_f32", "llama_f32/peft_lora"},
                                           Case{"llama_f32_lora.q8_0.gguf", "llama_f32", "llama_f32/peft_lora"},
                                           Case{"qwen2_f32_lora.f32.gguf", "qwen2_f32", "qwen2_f32/peft_lora"},
                                           Case{"llama_f32_embed.f32.gguf", "llama_f32", "embed/peft_embed_llama_f32"}),
                         [](const auto& info) { return test::param_name_of_file(info.param.file); });

TEST(GgufAdapterRows, ConverterPermutesQkRowsAndGraftUndoesThem) {
  // As stored, q/k lora_b rows are in llama.cpp's RoPE order; un-permuted they are PEFT's bits.
  auto gguf = read(test::fixture("gguf_adapters/llama_f32_lora.f32.gguf"));
  auto peft = read(test::fixture("engine_adapters/llama_f32/peft_lora"));
  ModelSource m = open_model_source(test::fixture("models/llama_f32"));
  for (const char* proj : {"q", "k"}) {
    const std::string module = std::string("blk.1.attn_") + proj;
    const std::string peft_module = std::string("base_model.model.model.layers.1.self_attn.") + proj + "_proj";
    const LowRankUpdate* g = nullptr;
    const LowRankUpdate* p = nullptr;
    for (const auto& t : gguf->targets)
      if (t.module == module) g = &std::get<LowRankUpdate>(t.update);
    for (const auto& t : peft->targets)
      if (t.module == peft_module) p = &std::get<LowRankUpdate>(t.update);
    ASSERT_TRUE(g && p) << module;
    const int64_t heads = proj[0] == 'q' ? m.config.num_heads : m.config.num_kv_heads;
    EXPECT_NE(f32(g->b), f32(p->b)) << module << ": stored rows already in Hugging Face order?";
    EXPECT_EQ(f32(unpermute_gguf_rope_rows(g->b, heads)), f32(p->b)) << module;
    EXPECT_EQ(f32(g->a), f32(p->a)) << module;
  }
}

// graft convert's writer against llama.cpp's converter on the same PEFT adapter: the same tensor
// names, GGML types, shapes and bytes, and the same alpha and architecture (exact: both copy the
// F32 factors, permute the same q/k rows and transpose the same token_embd factor).
class GgufExport : public ::testing::TestWithParam<Case> {};

TEST_P(GgufExport, WritesWhatLlamaCppsConverterWrites) {
  const Case c = GetParam();
  ModelSource m = open_model_source(test::fixture(std::string("models/") + c.model));
  const GgufLoraFile f =
      gguf_lora_for_model(m.config, *m.source, {read(test::fixture(std::string("engine_adapters/") + c.peft)), 1.0f});
  EXPECT_FALSE(f.scales_folded);
  const std::string out = (fs::temp_directory_path() / ("graft_gguf_export_" + std::to_string(::getpid()) + ".gguf")).string();
  io::write_gguf(out, f.metadata, f.tensors);
  auto mine = io::GgufFile::open(out);
  auto ref = io::GgufFile::open(test::fixture(std::string("gguf_adapters/") + c.file));
  for (const char* k : {"general.architecture", "general.type", "adapter.type"})
    EXPECT_EQ(mine->require_string(k), ref->require_string(k)) << k;
  EXPECT_EQ(mine->optional_float("adapter.lora.alpha"), ref->optional_float("adapter.lora.alpha"));
  ASSERT_EQ(mine->tensors().size(), ref->tensors().size());
  for (const auto& t : ref->tensors()) {
    const io::GgufTensorInfo* g = mine->find(t.name);
    ASSERT_TRUE(g) << t.name << " not written";
    EXPECT_EQ(g->ggml_type, t.ggml_type) << t.name;
    ASSERT_EQ(g->shape, t.shape) << t.name;
    const Tensor a = mine->tensor(t.name), b = ref->tensor(t.name);
    EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(b.nbytes())), 0) << t.name << " bytes differ";
  }
  fs::remove(out);
}

INSTANTIATE_TEST_SUITE_P(Converter, GgufExport,
                         ::testing::Values(Case{"llama_f32_lora.f32.gguf", "llama_f32", "llama_f32/peft_lora"},
                                           Case{"qwen2_f32_lora.f32.gguf", "qwen2_f32", "qwen2_f32/peft_lora"},
                                           Case{"llama_f32_embed.f32.gguf", "llama_f32", "embed/peft_embed_llama_f32"}),
                         [](const auto& info) { return std::string(info.param.model) + "_" + std::to_string(info.index); });

// SmolLM2 (GGUF base, 9 query / 3 key-value heads): the pirate demo adapter exported with F16
// factors has the bytes of the converter's --outtype q8_0 file wherever that file holds F16 (every
// lora_b: rank 8 rows cannot form Q8_0 blocks), in particular the permuted q/k rows; lora_a (Q8_0
// there) is compared by name, type and shape only.
TEST(GgufExportSmolLM2, PirateLoraBBytesEqualTheConverters) {
  if (!fs::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  ModelSource m = open_model_source(test::smollm2_gguf());
  const GgufLoraFile f = gguf_lora_for_model(m.config, *m.source, {read(test::source_dir() + "/demo/adapters/pirate-peft"), 1.0f},
                                             DType::F16);
  auto ref = io::GgufFile::open(test::fixture("gguf_adapters/smollm2_pirate.q8_0.gguf"));
  for (const auto& [k, v] : f.metadata) {
    if (k == "adapter.lora.alpha") {
      EXPECT_EQ(std::get<float>(v), static_cast<float>(*ref->optional_float(k)));
    }
  }
  ASSERT_EQ(f.tensors.size(), ref->tensors().size());
  size_t compared = 0;
  for (const auto& t : f.tensors) {
    const io::GgufTensorInfo* r = ref->find(t.name);
    ASSERT_TRUE(r) << t.name;
    ASSERT_EQ(r->shape, t.tensor.shape) << t.name;
    if (r->dtype != DType::F16) continue;
    const Tensor b = ref->tensor(t.name);
    EXPECT_EQ(std::memcmp(t.tensor.data, b.data, static_cast<size_t>(b.nbytes())), 0) << t.name;
    ++compared;
  }
  EXPECT_EQ(compared, f.tensors.size() / 2);
}

// Per-module scales (rank_pattern / alpha_pattern) cannot share one alpha: they are folded into
// lora_b, and reading the file back merges to the original adapter's tensors within F32 rounding
// of s·B (one rounding per element: 2⁻²⁴ relative to s·Σ|B||A|, checked at 1e-6 of it + |W|·1e-7).
TEST(GgufExportFolded, PerModuleScalesFoldIntoLoraB) {
  ModelSource m = open_model_source(test::fixture("models/llama_f32"));
  auto src = read(test::fixture("adapters/peft_patterns"));
  const GgufLoraFile f = gguf_lora_for_model(m.config, *m.source, {src, 0.5f});
  EXPECT_TRUE(f.scales_folded);
  const std::string out = (fs::temp_directory_path() / ("graft_gguf_fold_" + std::to_string(::getpid()) + ".gguf")).string();
  io::write_gguf(out, f.metadata, f.tensors);
  auto back = read(out);
  fs::remove(out);
  auto p0 = bind_model_adapters(m.config, *m.source, {{src, 0.5f}}, AdapterPath::Fused);
  auto p1 = bind_model_adapters(m.config, *m.source, {{back, 1.0f}}, AdapterPath::Fused);
  ASSERT_EQ(p0->updates.size(), p1->updates.size());
  adapter::AdaptedSourceOptions ao;
  ao.dtype = DType::F32;
  auto w0 = adapter::make_weight_adapter_source(m.source, p0, ao);
  auto w1 = adapter::make_weight_adapter_source(m.source, p1, ao);
  for (const auto& [tensor, u] : p0->updates) {
    const Tensor a = w0->read(tensor), b = w1->read(tensor), base = to_f32(m.source->read(tensor));
    float worst = 0, moved = 0;
    for (int64_t i = 0; i < a.numel(); ++i) {
      worst = std::max(worst, std::abs(a.as<float>()[i] - b.as<float>()[i]));
      moved = std::max(moved, std::abs(a.as<float>()[i] - base.as<float>()[i]));
    }
    EXPECT_LE(worst, 1e-6f * moved + 1e-7f) << tensor;
    EXPECT_GT(moved, 1e-3f) << tensor;
  }
}

// Refusals name the file and the tensor or field, before any weight is read.
void expect_bind_refused(const std::string& model, const std::string& adapter, const std::vector<std::string>& needles) {
  ModelSource m = open_model_source(test::fixture("models/" + model));
  auto a = read(adapter);
  for (AdapterPath path : {AdapterPath::Fused, AdapterPath::Unfused}) {
    try {
      bind_model_adapters(m.config, *m.source, {{a, 1.0f}}, path);
      ADD_FAILURE() << adapter << " bound to " << model;
    } catch (const Error& e) {
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
}

TEST(GgufAdapterRefusals, ArchitectureMismatch) {
  const std::string f = test::fixture("gguf_adapters/qwen2_f32_lora.f32.gguf");
  expect_bind_refused("llama_f32", f, {f, "general.architecture is 'qwen2'", "llama", "maybe wrong base model?"});
  expect_bind_refused("qwen3_f32", test::fixture("gguf_adapters/llama_f32_lora.f32.gguf"),
                      {"general.architecture is 'llama'", "qwen3", "maybe wrong base model?"});
}

class GgufAdapterFile : public ::testing::Test {
 protected:
  std::string write(const test::GgufBuilder& b) {
    path_ = (fs::temp_directory_path() / ("graft_gguf_bind_" + std::to_string(::getpid()) + "_" +
                                          ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf"))
                .string();
    std::ofstream(path_, std::ios::binary) << b.build();
    return path_;
  }
  void TearDown() override {
    if (!path_.empty()) fs::remove(path_);
  }
  static test::GgufBuilder llama_header() {
    test::GgufBuilder b;
    b.kv_string("general.architecture", "llama").kv_string("general.type", "adapter").kv_string("adapter.type", "lora");
    return b;
  }
  std::string path_;
};

TEST_F(GgufAdapterFile, MissingBaseTensorNamesItWithHint) {
  auto b = llama_header();
  b.f32_tensor("blk.7.attn_q.weight.lora_a", {64, 2}).f32_tensor("blk.7.attn_q.weight.lora_b", {2, 64});
  const std::string f = write(b);
  expect_bind_refused("llama_f32", f, {f, "blk.7.attn_q", "blk.7.attn_q.weight.lora_a", "wrong base model?"});
}

TEST_F(GgufAdapterFile, WrongShapeNamesTensor) {
  auto b = llama_header();
  b.f32_tensor("blk.0.ffn_down.weight.lora_a", {64, 2}).f32_tensor("blk.0.ffn_down.weight.lora_b", {2, 64});
  const std::string f = write(b);
  expect_bind_refused("llama_f32", f, {f, "blk.0.ffn_down", "does not match the base weight", "mlp.down_proj"});
}

// A lora_b for q whose rows do not split into the base's heads is left as stored (never
// un-permuted with the wrong head count) and refused by its shape.
TEST_F(GgufAdapterFile, QRowsOfAnotherModelAreRefusedNotPermuted) {
  auto b = llama_header();
  b.f32_tensor("blk.0.attn_q.weight.lora_a", {64, 2}).f32_tensor("blk.0.attn_q.weight.lora_b", {2, 48});
  const std::string f = write(b);
  expect_bind_refused("llama_f32", f, {f, "blk.0.attn_q", "does not match the base weight"});
}

}  // namespace
}  // namespace graft::model
