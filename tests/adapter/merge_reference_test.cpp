// graft's merge against the real tools: every fixture in tests/fixtures/adapters/ holds an adapter
// written by PEFT, LyCORIS, mlx-lm (or built by the ComfyUI rule) for tests/fixtures/models/*, and
// the merged tensors that tool produced (tools/gen_adapter_fixtures.py).
//
// Tolerances:
// - F32 bases: |graft - tool| <= 8·2⁻²⁴·(|W| + max|Δ| of the tensor). Same formula, but torch
//   multiplies with FMA and mlx folds the scale into B first, while graft (DeltaF32) multiplies then
//   adds in F32: each element's rounding error is bounded by (r+2)·2⁻²⁴·(|W| + Σ_k|s·B·A|) (r ≤ 4
//   here), and Σ_k|s·B·A| is bounded by the tensor's largest delta up to a small factor. Where
//   W + Δ nearly cancels, an ulp of the result is far smaller than this, so ulps of the result would
//   be the wrong yardstick. A wrong scale or orientation gives errors of order max|Δ| itself.
// - BF16 base (PEFT's default merge rounds once: bf16(W + Δ)): graft's DeltaF32 with BF16 output
//   is the same single rounding of an F32 value that may differ by a few F32 ulps, so an element
//   may land on the neighbouring BF16 value at a rounding boundary: every element within 1 BF16 ulp
//   of max(|W|, |Δ|), and at most 0.5% of elements not bit-identical.
// - LyCORIS: compared with merged_forward.safetensors (W + s·kron), the weight LyCORIS's forward
//   pass and ComfyUI use; LyCORIS 4.1.3's merge_to applies the scale twice (see expected.json).
//   LyCORIS LoHa likewise (W + s·(w1a·w1b) ⊙ (w2a·w2b)).
// - DoRA (F32): the same bound, with max|Δ| = max|merged - W| (which includes the magnitude's
//   rescale): the norm and the factor m/‖V‖ add a few roundings relative to |W'|, far below it;
//   a norm over the wrong axis or without the scale moves whole rows by the rescale itself.
//   BF16 (PEFT rounds f·(W + Δ) to BF16 once, as DeltaF32 does): the BF16 rule above.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/adapter/adapted_source.h"
#include "graft/io/safetensors.h"
#include "test_paths.h"

namespace graft::adapter {
namespace {

namespace fs = std::filesystem;

const char* kFixtures[] = {"peft_lora",  "peft_rslora", "peft_patterns", "peft_modules_to_save", "peft_embed", "peft_bf16",
                           "peft_lokr", "peft_lokr_decompose_both", "lycoris_lokr", "lycoris_lokr_decompose_both",
                           "mlx_lora", "kohya_lora",
                           // tools/gen_dora_loha_fixtures.py: DoRA (PEFT, mlx-lm) and LoHa (PEFT, LyCORIS)
                           "peft_dora", "peft_dora_bf16", "mlx_dora", "peft_loha", "lycoris_loha",
                           // DoRA on q/k/v with biases (PEFT, qwen2: weights change, biases do not); mlx-lm
                           // DoRA with the embedding (DoRAEmbedding.fuse, untied llama and tied qwen2)
                           "peft_dora_qwen2", "mlx_dora_embed", "mlx_dora_embed_tied",
                           // DoRA on Phi-3's fused qkv_proj / gate_up_proj (merged under the fused names)
                           "peft_dora_phi3"};

class RealToolMerge : public ::testing::TestWithParam<const char*> {};

TEST_P(RealToolMerge, GraftFuseMatchesTheTool) {
  const std::string dir = test::fixture(std::string("adapters/") + GetParam());
  nlohmann::json ex = nlohmann::json::parse(std::ifstream(dir + "/expected.json"));
  const std::string base_dir = test::source_dir() + "/" + ex["base_model"].get<std::string>();
  auto base = io::open_safetensors_checkpoint(base_dir);
  const std::string adapter_path = fs::exists(dir + "/adapter.safetensors") ? dir + "/adapter.safetensors" : dir;
  auto adapter = std::make_shared<const WeightAdapter>(read_weight_adapter(adapter_path));
  auto plan = bind_weight_adapter({{adapter, 1.0f}}, bindings_for_source(*base), *base);
  auto adapted = make_weight_adapter_source(base, plan, {});

  const std::string merged_file = fs::exists(dir + "/merged_forward.safetensors") ? dir + "/merged_forward.safetensors"
                                                                                  : dir + "/merged.safetensors";
  auto ref = io::SafetensorsFile::open(merged_file);
  std::set<std::string> expected_tensors;
  for (const auto& e : ref->entries()) expected_tensors.insert(e.name);
  std::set<std::string> adapted_tensors;
  for (const auto& [name, u] : plan->updates) adapted_tensors.insert(name);
  EXPECT_EQ(adapted_tensors, expected_tensors) << "graft must change exactly the tensors the tool changed";

  const bool bf16 = ex["base_dtype"] == "BF16";
  for (const auto& e : ref->entries()) {
    if (!adapted_tensors.count(e.name)) continue;
    Tensor want = to_f32(ref->tensor(e.name));
    Tensor got_t = adapted->read(e.name);
    ASSERT_EQ(got_t.dtype, ref->tensor(e.name).dtype) << e.name << ": fused weights keep the base dtype";
    Tensor got = to_f32(got_t);
    Tensor w = to_f32(base->read(e.name));
    ASSERT_EQ(got.numel(), want.numel());
    int64_t differ = 0;
    float max_delta = 0;
    for (int64_t i = 0; i < want.numel(); ++i) max_delta = std::max(max_delta, std::abs(want.as<float>()[i] - w.as<float>()[i]));
    for (int64_t i = 0; i < want.numel(); ++i) {
      const float g = got.as<float>()[i], r = want.as<float>()[i], b = w.as<float>()[i];
      if (g != r) ++differ;
      if (bf16) {
        const float mag = std::max(std::abs(b), std::abs(r - b));
        const float bf16_ulp = bf16_to_f32(f32_to_bf16(mag) + 1) - bf16_to_f32(f32_to_bf16(mag));
        ASSERT_LE(std::abs(g - r), bf16_ulp) << e.name << "[" << i << "]";
      } else {
        ASSERT_LE(std::abs(g - r), 8 * 0x1p-24f * (std::abs(b) + max_delta)) << e.name << "[" << i << "] got " << g
                                                                              << " want " << r;
      }
    }
    if (bf16) {
      EXPECT_LE(differ, want.numel() / 200) << e.name << ": too many elements off by one BF16 ulp";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RealToolMerge, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace graft::adapter
