// The 16-bit KV caches on the real model (SmolLM2-135M-Instruct, the exact F32-weight path so the
// cache is the only difference): logits of every position of the reference prompts and 32 greedy
// tokens, F16 and BF16 caches against the F32 cache.
//
// Tolerances. A stored key or value is rounded once (relative error <= 2^-11 for F16, 2^-8 for BF16);
// attention then runs in F32 on the rounded values, so each layer's attention output moves by about
// that relative amount, and the residual stream carries it through 30 layers to the logits (typical
// magnitude 10-25 here). Measured on the four prompts of tests/fixtures/smollm2/greedy_reference.json
// (all positions): max |Δlogit| F16 0.046, BF16 0.19. Bounds: F16 0.15 and BF16 0.6, about 3x the
// measurement. Greedy tokens: identical for 32 steps on every prompt with both caches (measured); a
// divergence is accepted only where the F32 cache's top-two margin is below twice the bound, i.e. a
// change the bound already allows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "graft/model/loader.h"
#include "support/run_util.h"
#include "test_paths.h"

namespace graft::runtime {
namespace {

struct CacheRun {
  std::vector<float> logits;     // every prompt position
  std::vector<int32_t> greedy;   // 32 argmax steps
  std::vector<float> margins;    // top-1 minus top-2 logit before each greedy step
};

CacheRun run_with(const model::LoadedModel& m, const std::vector<int32_t>& ids, DType cache_type) {
  ThreadPool pool(2);
  Transformer t(m.config, m.weights);
  KVCache cache(m.config, 256, cache_type);
  EXPECT_EQ(cache.dtype(), cache_type);
  SequenceInput in{&cache, ids, true, {}};
  CacheRun r;
  r.logits = t.forward(pool, std::span(&in, 1));
  const int64_t V = m.config.vocab_size;
  std::vector<float> last(r.logits.end() - V, r.logits.end());
  for (int i = 0; i < 32; ++i) {
    std::vector<float> s = last;
    std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
    r.margins.push_back(s[0] - s[1]);
    r.greedy.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    SequenceInput step{&cache, std::span(&r.greedy.back(), 1), false, {}};
    last = t.forward(pool, std::span(&step, 1));
  }
  return r;
}

constexpr float kF16Bound = 0.15f, kBF16Bound = 0.6f;

TEST(KVCacheTypesSmolLM2, SixteenBitCachesStayNearTheF32Cache) {
  if (!std::filesystem::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  const nlohmann::json ref = test::read_json(test::fixture("smollm2/greedy_reference.json"));
  model::LoadOptions f32;
  f32.weight_dtype = DType::F32;
  const model::LoadedModel m = model::load_model(test::smollm2_gguf(), f32);
  ASSERT_GE(ref["prompts"].size(), 3u);
  std::vector<CacheRun> f32_runs;
  for (const auto& p : ref["prompts"]) f32_runs.push_back(run_with(m, p["ids"].get<std::vector<int32_t>>(), DType::F32));
  for (DType t : {DType::F16, DType::BF16}) {
    const float bound = t == DType::F16 ? kF16Bound : kBF16Bound;
    float worst = 0;
    for (size_t pi = 0; pi < f32_runs.size(); ++pi) {
      const auto& p = ref["prompts"][pi];
      const CacheRun& a = f32_runs[pi];
      const CacheRun b = run_with(m, p["ids"].get<std::vector<int32_t>>(), t);
      ASSERT_EQ(a.logits.size(), b.logits.size());
      float d = 0;
      for (size_t i = 0; i < a.logits.size(); ++i) d = std::max(d, std::abs(a.logits[i] - b.logits[i]));
      worst = std::max(worst, d);
      EXPECT_LE(d, bound) << dtype_name(t) << ": " << p["text"];
      EXPECT_GT(d, 0.0f) << dtype_name(t) << " gave the F32 cache's bits: is the cache type ignored?";
      for (size_t i = 0; i < a.greedy.size(); ++i) {
        if (a.greedy[i] == b.greedy[i]) continue;
        std::printf("%s cache: diverged at step %zu, F32-cache top-2 margin %g\n", dtype_name(t).data(), i,
                    a.margins[i]);
        EXPECT_LT(a.margins[i], 2 * bound) << dtype_name(t) << " cache changed greedy token " << i << " of "
                                           << p["text"] << " where the F32 cache's margin is " << a.margins[i];
        break;
      }
    }
    std::printf("%s cache: max |logit - F32 cache's| over every position = %g (bound %g)\n", dtype_name(t).data(),
                worst, bound);
  }
}

}  // namespace
}  // namespace graft::runtime
