// --activations f32 (compute::Activations::F32): quantized weights with unrounded activations. The
// reference is the exact-dequantized path, the one `--dtype f32` loads (GGUF blocks converted to F32
// at load, F32 math: what transformers computes on the same file) and the one mlx matrices run when
// not interleaved (matmul_affine's F32 kernel, held to mlx-lm's logits by quantized_test.cpp).
//   * a tiny llama (tests/fixtures/models/llama_f32) whose seven projections and head are quantized
//     in memory by graft's llama-quantize reference quantizers (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 in turn;
//     its 64/128-wide rows do not divide into K-quant super-blocks): the logits of every prompt
//     position equal the dequantized model's bit for bit, at 1 and 2 threads, decode included (greedy);
//   * the SmolLM2 Q4_1 file (skipped without `make models`): the same, against `--dtype f32`;
//   * an mlx affine tiny model: nothing interleaved, the logits of the unprepared (F32) model.
// Bit equality is the contract, not a tolerance: the F32 path dequantizes each tile of rows with the
// same convert_to_f32 the loader uses and runs the same dense kernel, whose sums do not depend on
// where a tile starts. That the default (q8) path differs is checked too, so the comparison can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "graft/core/error.h"
#include "graft/core/gguf_quantize.h"
#include "graft/model/loader.h"
#include "graft/runtime/kernels.h"
#include "support/run_util.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {

// Every projection and the head of `m` quantized to GGUF blocks (kinds in turn); `deq` gets the
// blocks' dequantized F32 values in the same matrices.
void quantize_projections(model::LoadedModel& m, model::LoadedModel& deq) {
  const DType kinds[] = {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1};
  int next = 0;
  auto one = [&](model::Matrix& w, model::Matrix& d) {
    const Tensor f = to_f32(w.dense);
    const DType t = kinds[next++ % 5];
    std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(t, f.numel())));
    quantize_gguf_blocks(t, f.as<float>(), bytes.data(), f.numel());
    w = model::Matrix::of(Tensor::owned(t, f.shape, std::move(bytes)));
    d = model::Matrix::of(to_f32(w.dense));
  };
  one(m.weights.lm_head, deq.weights.lm_head);
  for (size_t l = 0; l < m.weights.layers.size(); ++l) {
    auto& L = m.weights.layers[l];
    auto& D = deq.weights.layers[l];
    one(L.q, D.q), one(L.k, D.k), one(L.v, D.v), one(L.o, D.o);
    one(L.gate, D.gate), one(L.up, D.up), one(L.down, D.down);
  }
}

const std::vector<std::vector<int32_t>> kPrompts = {{1, 17, 250, 3, 99, 42, 7, 300, 12, 5, 64, 128, 255}, {5}, {9, 8, 7}};

TEST(F32Activations, TinyGgufBlocksEqualTheDequantizedModel) {
  const std::string dir = test::fixture("models/llama_f32");
  model::LoadedModel q = model::load_model(dir), deq = model::load_model(dir);
  quantize_projections(q, deq);
  model::LoadedModel q8 = model::load_model(dir), unused = model::load_model(dir);
  quantize_projections(q8, unused);  // (the quantizers are deterministic: the same blocks)
  ThreadPool pool(2);
  EXPECT_EQ(prepare_weights(q.weights, pool, compute::Activations::F32), 0);  // nothing copied
  EXPECT_TRUE(q.weights.layers[0].q.f32_activations);
  EXPECT_NE(describe_kernels(q.weights).find("gguf-blocks f32-activations"), std::string::npos)
      << describe_kernels(q.weights);
  prepare_weights(q8.weights, pool, compute::Activations::Q8);
  for (const auto& ids : kPrompts) {
    const auto want = test::prompt_logits(deq, nullptr, {}, ids);
    EXPECT_EQ(test::prompt_logits(q, nullptr, {}, ids, 2), want);
    EXPECT_EQ(test::prompt_logits(q, nullptr, {}, ids, 1), want);
    EXPECT_EQ(test::greedy_ids(q, nullptr, {}, ids, 6), test::greedy_ids(deq, nullptr, {}, ids, 6));
    if (ids.size() > 1) {
      EXPECT_NE(test::prompt_logits(q8, nullptr, {}, ids), want) << "q8 is a different computation";
    }
  }
}

// The default (q8) head's largest logits are refined to their unrounded value (runtime/transformer.cpp
// refine_head): with only the head quantized, the hidden state is the same F32 one under both, so a
// refined logit equals the dequantized model's (up to F32 summation order, 1e-5) while the others
// keep the 8-bit rounding's error (so this can fail both ways).
TEST(F32Activations, HeadRefinementGivesTheUnroundedTopLogits) {
  const std::string dir = test::fixture("models/llama_f32");
  for (DType t : {DType::Q8_0, DType::Q4_1}) {
    model::LoadedModel q = model::load_model(dir), deq = model::load_model(dir);
    const Tensor f = to_f32(q.weights.lm_head.dense);
    std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(t, f.numel())));
    quantize_gguf_blocks(t, f.as<float>(), bytes.data(), f.numel());
    q.weights.lm_head = model::Matrix::of(Tensor::owned(t, f.shape, std::move(bytes)));
    deq.weights.lm_head = model::Matrix::of(to_f32(q.weights.lm_head.dense));
    ThreadPool pool(2);
    prepare_weights(q.weights, pool, compute::Activations::Q8);
    ASSERT_TRUE(compute::rounds_activations(q.weights.lm_head.kind()));
    const std::vector<int32_t> ids = kPrompts[0];
    const auto got = test::prompt_logits(q, nullptr, {}, ids), want = test::prompt_logits(deq, nullptr, {}, ids);
    const int64_t V = q.config.vocab_size;
    float refined_worst = 0, others_worst = 0;
    for (size_t p = 0; p < ids.size(); ++p) {
      const float* g = &got[p * V];
      const float* w = &want[p * V];
      std::vector<int64_t> order(static_cast<size_t>(V));
      for (int64_t j = 0; j < V; ++j) order[static_cast<size_t>(j)] = j;
      std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return g[a] > g[b]; });
      for (int64_t r = 0; r < V; ++r) {
        const int64_t j = order[static_cast<size_t>(r)];
        const float d = std::fabs(g[j] - w[j]) / (1.0f + std::fabs(w[j]));
        // (the 32 largest before refinement within 12 nats of the top are refined; ranks near 32
        // may have moved across that line: the first 24 afterwards surely were among them)
        if (r < 24 && g[j] >= g[order[0]] - 12.0f) refined_worst = std::max(refined_worst, d);
        if (r > 40) others_worst = std::max(others_worst, d);
      }
    }
    EXPECT_LE(refined_worst, 1e-5f) << dtype_name(t);
    EXPECT_GT(others_worst, 1e-4f) << dtype_name(t) << ": the rest keep the 8-bit rounding";
  }
}

TEST(F32Activations, SmolLM2Q4_1EqualsDtypeF32) {
  if (!std::filesystem::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  model::LoadOptions f32o;
  f32o.weight_dtype = DType::F32;
  const model::LoadedModel f32 = model::load_model(test::smollm2_gguf(), f32o);
  model::LoadedModel q = model::load_model(test::smollm2_gguf());
  ThreadPool pool(2);
  prepare_weights(q.weights, pool, compute::Activations::F32);
  EXPECT_EQ(q.weights.layers[0].q.dense.dtype, DType::Q4_1);  // kept as stored
  EXPECT_EQ(q.weights.layers[0].q.interleaved, nullptr);
  const auto ids = test::read_json(test::fixture("smollm2/greedy_reference.json"))["prompts"][0]["ids"].get<std::vector<int32_t>>();
  EXPECT_EQ(test::prompt_logits(q, nullptr, {}, ids), test::prompt_logits(f32, nullptr, {}, ids));
  EXPECT_EQ(test::greedy_ids(q, nullptr, {}, ids, 4), test::greedy_ids(f32, nullptr, {}, ids, 4));
}

TEST(F32Activations, MlxAffineStaysOnTheF32Kernel) {
  const std::string dir = test::fixture("mlx_quant/models/llama_f32_q4g32");
  model::LoadedModel q = model::load_model(dir), plain = model::load_model(dir);
  ASSERT_TRUE(q.weights.layers[0].q.quantized());
  ThreadPool pool(2);
  EXPECT_EQ(prepare_weights(q.weights, pool, compute::Activations::F32), 0);
  EXPECT_EQ(q.weights.layers[0].q.interleaved, nullptr);
  EXPECT_FALSE(q.weights.layers[0].q.f32_activations);
  for (const auto& ids : kPrompts) EXPECT_EQ(test::prompt_logits(q, nullptr, {}, ids), test::prompt_logits(plain, nullptr, {}, ids));
}

// What the first stderr line and /props report: the activations the prepared weights really take.
TEST(F32Activations, InForceFollowsTheWeights) {
  const std::string dir = test::fixture("models/llama_f32");
  ThreadPool pool(2);
  model::LoadedModel dense = model::load_model(dir);  // F32 weights: q8 rounds nothing
  prepare_weights(dense.weights, pool, compute::Activations::Q8);
  EXPECT_STREQ(activations_in_force(dense.weights, compute::Activations::Q8), "f32");
  model::LoadedModel q = model::load_model(dir), deq = model::load_model(dir);
  quantize_projections(q, deq);
  model::LoadedModel q8 = model::load_model(dir), unused = model::load_model(dir);
  quantize_projections(q8, unused);
  prepare_weights(q8.weights, pool, compute::Activations::Q8);
  EXPECT_STREQ(activations_in_force(q8.weights, compute::Activations::Q8), "q8");
  prepare_weights(q.weights, pool, compute::Activations::F32);
  EXPECT_STREQ(activations_in_force(q.weights, compute::Activations::F32), "f32");
  EXPECT_STREQ(activations_in_force(unused.weights, compute::Activations::Q8), "f32");  // (the dequantized twin)
  // Not interleaved (GRAFT_Q8_INTERLEAVE=0's effect): GGUF blocks still take 8-bit activations.
  model::LoadedModel stored = model::load_model(dir), twin = model::load_model(dir);
  quantize_projections(stored, twin);
  EXPECT_STREQ(activations_in_force(stored.weights, compute::Activations::Q8), "q8");
}

TEST(F32Activations, OptionNames) {
  EXPECT_EQ(compute::parse_activations("q8"), compute::Activations::Q8);
  EXPECT_EQ(compute::parse_activations("f32"), compute::Activations::F32);
  EXPECT_STREQ(compute::activations_name(compute::Activations::F32), "f32");
  EXPECT_STREQ(compute::activations_name(compute::Activations::Q8), "q8");
  try {
    compute::parse_activations("f16");
    ADD_FAILURE() << "f16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--activations: 'f16' is not an activation type (allowed: q8, f32)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace graft::runtime
