// Phi-3 as a family row: fused qkv_proj / gate_up_proj split by rows at load and joined again on
// the way out, partial rotary, llama.cpp's phi3 GGUF, longrope refused by name. References:
// transformers (tests/fixtures/models/phi3_f32, tools/gen_model_fixtures.py), PEFT
// (engine_adapters/phi3_f32/peft_lora) and, for the GGUF file converted by llama.cpp's
// convert_hf_to_gguf.py, transformers' logits under llama.cpp's phi3 rules (no sliding window;
// tools/gen_family_gguf_fixtures.py). Tolerance 1e-4 on logits: F32 on both sides, only the
// summation order differs (as tests/engine/reference_models_test.cpp says). mlx-lm's own LoRA on
// the fused modules is checked by adapter_references_test.cpp (MlxLoraReference/phi3_f32).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "graft/adapter/adapted_source.h"
#include "graft/core/error.h"
#include "graft/io/checkpoint_writer.h"
#include "graft/io/gguf.h"
#include "graft/io/gguf_writer.h"
#include "graft/io/safetensors.h"
#include "graft/model/family.h"
#include "graft/model/fused_projections.h"
#include "graft/model/gguf_adapters.h"
#include "graft/model/loader.h"
#include "graft/model/model_adapters.h"
#include "support/run_util.h"
#include "test_paths.h"
#include "support/errors.h"

namespace graft::runtime {
namespace {
using test::expect_refused;

namespace fs = std::filesystem;
using nlohmann::json;
using test::max_abs_diff;
using test::prompt_logits;

constexpr float kTol = 1e-4f;

std::string model_dir() { return test::fixture("models/phi3_f32"); }
std::string gguf_path() { return test::fixture("models_gguf/phi3_f32.gguf"); }
std::string peft_dir() { return test::fixture("engine_adapters/phi3_f32/peft_lora"); }

std::string read_text(const std::string& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}


struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / ("graft_phi3_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

TEST(Phi3Family, ConfigReadsPartialRotaryAndTheFusedLayout) {
  model::ModelSource src = model::open_model_source(model_dir());
  EXPECT_EQ(src.config.model_type, "phi3");
  EXPECT_TRUE(src.config.fused_projections);
  EXPECT_EQ(src.config.rope_dims(), 8);  // partial_rotary_factor 0.5 of head_dim 16
  ASSERT_TRUE(src.config.sliding_window.has_value());
  EXPECT_EQ(*src.config.sliding_window, 4);
  // The source shows the parts by their Llama names, as zero-copy rows of the fused tensors.
  for (const char* n : {"model.layers.0.self_attn.q_proj.weight", "model.layers.2.self_attn.v_proj.weight",
                        "model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp.up_proj.weight"})
    EXPECT_TRUE(src.source->has(n)) << n;
  EXPECT_FALSE(src.source->has("model.layers.0.self_attn.qkv_proj.weight"));
  EXPECT_EQ(src.source->info("model.layers.0.self_attn.k_proj.weight")->shape, (Shape{32, 64}));
  auto raw = io::SafetensorsFile::open(model_dir() + "/model.safetensors");
  const Tensor qkv = raw->tensor("model.layers.0.self_attn.qkv_proj.weight");
  const Tensor q = src.source->read("model.layers.0.self_attn.q_proj.weight");
  const Tensor v = src.source->read("model.layers.0.self_attn.v_proj.weight");
  EXPECT_EQ(v.data, q.as<float>() + 96 * 64);  // rows 96..127 of the same mapping: after q (64) and k (32)
  EXPECT_EQ(std::memcmp(v.data, qkv.as<float>() + 96 * 64, 32 * 64 * sizeof(float)), 0);
  const Tensor up = src.source->read("model.layers.0.mlp.up_proj.weight");
  const Tensor gate_up = raw->tensor("model.layers.0.mlp.gate_up_proj.weight");
  // gate first, as transformers' chunk(2)
  EXPECT_EQ(std::memcmp(up.data, gate_up.as<float>() + 128 * 64, 128 * 64 * sizeof(float)), 0);
}

// transformers 5 writes partial_rotary_factor inside rope_parameters, 4.x at the top level.
TEST(Phi3Family, PartialRotaryFactorInRopeParameters) {
  json j = test::read_json(model_dir() + "/config.json");
  j.erase("partial_rotary_factor");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}};
  EXPECT_EQ(model::parse_hf_config(j, "config.json").rope_dims(), 4);
  j["rope_parameters"]["partial_rotary_factor"] = 0.3;  // 4.8 dims
  expect_refused([&] { model::parse_hf_config(j, "config.json"); }, {"partial_rotary_factor 0.3"});
}

TEST(Phi3Family, LongropeIsRefusedByName) {
  json j = test::read_json(model_dir() + "/config.json");
  const json factors = json::array({1.0, 1.0, 1.0, 1.0});
  for (const char* type : {"longrope", "su", "yarn"}) {
    j["rope_scaling"] = {{"type", type}, {"short_factor", factors}, {"long_factor", factors}};
    expect_refused([&] { model::parse_hf_config(j, "config.json"); },
                   {std::string("rope_scaling.type '") + type + "'", "not supported for phi3"});
  }
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "longrope"}, {"rope_theta", 10000.0}, {"short_factor", factors},
                          {"long_factor", factors}};
  expect_refused([&] { model::parse_hf_config(j, "config.json"); },
                 {"rope_parameters.rope_type 'longrope'", "not supported for phi3"});
}

TEST(Phi3Family, FusedTensorOfTheWrongShapeIsRefusedNamingIt) {
  TempDir d("shape");
  for (const auto& e : fs::directory_iterator(model_dir())) fs::copy(e.path(), d.path / e.path().filename());
  json j = test::read_json((d.path / "config.json").string());
  j["num_key_value_heads"] = 4;  // qkv_proj then needs 192 rows, the file has 128
  std::ofstream(d.path / "config.json") << j.dump(2);
  expect_refused([&] { model::load_model(d.path.string()); },
                 {"model.layers.0.self_attn.qkv_proj.weight", "[128, 64]", "expected [192, 64]", "phi3"});
  j["num_key_value_heads"] = 2;
  j["quantization"] = {{"bits", 4}, {"group_size", 32}};
  std::ofstream(d.path / "config.json") << j.dump(2);
  expect_refused([&] { model::open_model_source(d.path.string()); }, {"quantization is not supported for phi3"});
}

TEST(Phi3Family, ChatTemplateFromTheCheckpointAndTheGguf) {
  const std::string want = read_text(test::fixture("chat_templates/phi3.jinja"));
  model::LoadedModel hf = model::load_model(model_dir());
  ASSERT_TRUE(hf.chat_template.has_value());
  EXPECT_EQ(*hf.chat_template, want);
  model::LoadedModel g = model::load_model(gguf_path());
  ASSERT_TRUE(g.chat_template.has_value());
  EXPECT_EQ(*g.chat_template, want);
}

// llama.cpp's phi3 GGUF: attn_qkv and ffn_up (gate and up) split by rows, rope.dimension_count 8,
// and the sliding window off as llama.cpp's loader turns it off.
TEST(Phi3Family, GgufMatchesTransformersUnderLlamaCppRules) {
  model::LoadedModel lm = model::load_model(gguf_path());
  EXPECT_EQ(lm.format, "gguf");
  EXPECT_EQ(lm.config.rope_dims(), 8);
  EXPECT_FALSE(lm.config.sliding_window.has_value());
  const json ref = test::read_json(model_dir() + "/reference.json");
  auto logits = io::SafetensorsFile::open(test::fixture("models_gguf/phi3_f32.reference.safetensors"));
  auto with_window = io::SafetensorsFile::open(model_dir() + "/reference.safetensors");
  for (size_t p = 0; p < ref["prompts"].size(); ++p) {
    const auto ids = ref["prompts"][p]["ids"].get<std::vector<int32_t>>();
    const auto out = prompt_logits(lm, nullptr, {}, ids);
    EXPECT_LE(max_abs_diff(out, logits->tensor("logits_" + std::to_string(p))), kTol) << "prompt " << p;
    // The long prompt (30 tokens > window 4) shows that the window really is off here.
    if (ids.size() > 4) {
      EXPECT_GT(max_abs_diff(out, with_window->tensor("logits_" + std::to_string(p))), 1e-2f) << "prompt " << p;
    }
  }
}

// A GGUF file with longrope factors (Phi-3 128k) is refused, naming the tensor and the family.
TEST(Phi3Family, GgufLongropeFactorsAreRefused) {
  TempDir d("gguf");
  auto g = io::GgufFile::open(gguf_path());
  std::vector<std::pair<std::string, io::GgufValue>> meta(g->metadata().begin(), g->metadata().end());
  std::vector<io::GgufWriteTensor> tensors;
  for (const auto& t : g->tensors()) tensors.push_back({t.name, g->tensor(t.name)});
  tensors.push_back({"rope_factors_long.weight", Tensor::zeros_f32({4})});
  const std::string out = (d.path / "longrope.gguf").string();
  io::write_gguf(out, meta, tensors);
  expect_refused([&] { model::open_model_source(out); }, {"rope_factors_long.weight", "longrope", "phi3"});
}

// A llama.cpp LoRA on phi3 names the fused tensors (blk.N.attn_qkv, blk.N.ffn_up): they bind to the
// parts by rows. Writing one is refused, naming the family.
TEST(Phi3Family, GgufAdapterNamesBindToTheParts) {
  model::ModelSource src = model::open_model_source(model_dir());
  const auto b = model::bindings_for_model(src.config, *src.source);
  const adapter::Binding* qkv = b.resolve("blk.1.attn_qkv", "weight");
  ASSERT_NE(qkv, nullptr);
  ASSERT_EQ(qkv->slices.size(), 3u);
  EXPECT_EQ(qkv->slices[1].tensor, "model.layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(qkv->slices[1].src_row, 64);
  const adapter::Binding* up = b.resolve("blk.1.ffn_up", "weight");
  ASSERT_NE(up, nullptr);
  ASSERT_EQ(up->slices.size(), 2u);
  EXPECT_EQ(up->slices[0].tensor, "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(up->delta_rows, 256);
  expect_refused([&] { model::gguf_lora_for_model(src.config, *src.source, {test::read_adapter(peft_dir()), 1.0f}, {}); },
                 {"GGUF LoRA file is not supported for phi3"});
}

// `graft fuse`'s path: adapted source, joined again, written; the written checkpoint has the fused
// names (as transformers reads them) and its logits are PEFT's.
TEST(Phi3Family, FusedCheckpointIsWrittenInThePhi3LayoutAndMatchesPeft) {
  model::ModelSource src = model::open_model_source(model_dir());
  const std::vector<adapter::AdapterUse> uses = {{test::read_adapter(peft_dir()), 1.0f}};
  auto plan = model::bind_model_adapters(src.config, *src.source, uses, model::AdapterPath::Fused);
  EXPECT_EQ(plan->updates.size(), 3u * 7u);  // every part of every projection, 3 layers
  auto adapted = adapter::make_weight_adapter_source(src.source, plan, {});
  auto joined = model::join_fused_projections(adapted, src.config);
  TempDir d("fuse");
  io::write_checkpoint(*joined, d.path.string());
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
    fs::copy(fs::path(model_dir()) / f, d.path / f);
  auto written = io::SafetensorsFile::open((d.path / "model.safetensors").string());
  EXPECT_NE(written->find("model.layers.2.self_attn.qkv_proj.weight"), nullptr);
  EXPECT_NE(written->find("model.layers.2.mlp.gate_up_proj.weight"), nullptr);
  EXPECT_EQ(written->find("model.layers.2.self_attn.q_proj.weight"), nullptr);
  EXPECT_EQ(written->find("model.layers.2.mlp.up_proj.weight"), nullptr);
  model::LoadedModel fused = model::load_model(d.path.string());
  const json ref = test::read_json(peft_dir() + "/reference.json");
  auto want = io::SafetensorsFile::open(peft_dir() + "/reference.safetensors");
  for (size_t p = 0; p < ref["prompts"].size(); ++p) {
    const auto ids = ref["prompts"][p]["ids"].get<std::vector<int32_t>>();
    EXPECT_LE(max_abs_diff(prompt_logits(fused, nullptr, {}, ids), want->tensor("logits_" + std::to_string(p))), kTol)
        << "prompt " << p;
  }
}

}  // namespace
}  // namespace graft::runtime
