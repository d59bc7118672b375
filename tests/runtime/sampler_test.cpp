#include "graft/runtime/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "graft/core/error.h"

namespace graft::runtime {
namespace {

SamplingParams params(float temp, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

std::map<int32_t, int> histogram(const SamplingParams& p, const std::vector<float>& logits, int n = 4000) {
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits, {})];
  return h;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s(params(0));
  EXPECT_EQ(s.sample(std::vector<float>{0.1f, 3.0f, -1.0f, 3.0f}, {}), 1);
}

// A vocabulary-sized row goes through the vectorized scan: the same answer as the plain one.
TEST(Sampler, GreedyOnALongRowTakesTheFirstLargest) {
  std::vector<float> logits(49157);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 7919) % 1000) * 0.01f - 5.0f;
  size_t expect = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[expect]) expect = i;
  Sampler s(params(0));
  EXPECT_EQ(s.sample(logits, {}), static_cast<int32_t>(expect));
  logits[49156] = 100.0f;  // in the scalar tail
  EXPECT_EQ(s.sample(logits, {}), 49156);
  logits[12345] = 100.0f;  // a tie: the lower id
  EXPECT_EQ(argmax(logits), 12345);
  EXPECT_EQ(argmax(std::vector<float>(20, 0.0f)), 0);
}

TEST(Sampler, NonFiniteLogitsAreRefusedWithTheirToken) {
  for (bool greedy : {true, false})
    for (size_t at : {size_t{3}, size_t{40}, size_t{49156}})  // vector body and scalar tail
      for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
        std::vector<float> logits(49157, 0.5f);
        logits[at] = bad;
        Sampler s(params(greedy ? 0.0f : 0.8f));
        try {
          s.sample(logits, {});
          FAIL() << "accepted a non-finite logit at " << at;
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("for token " + std::to_string(at)), std::string::npos) << e.what();
        }
      }
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> logits = {1.0f, 1.2f, 0.9f, 1.1f, 0.5f};
  Sampler a(params(1.0f)), b(params(1.0f));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(logits, {}), b.sample(logits, {}));
}

TEST(Sampler, TopKOneIsGreedy) {
  auto h = histogram(params(1.5f, 1), {0.5f, 2.0f, 1.9f});
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.begin()->first, 1);
}

TEST(Sampler, TopKKeepsOnlyTheKBest) {
  auto h = histogram(params(1.0f, 2), {0.0f, 1.0f, 1.1f, 0.9f});
  EXPECT_EQ(h.size(), 2u);
  EXPECT_TRUE(h.count(1) && h.count(2));
}

TEST(Sampler, TopPCutsTheTail) {
  // Probabilities ~ [0.665, 0.245, 0.090]: top-p 0.8 keeps the first two.
  auto h = histogram(params(1.0f, 0, 0.8f), {2.0f, 1.0f, 0.0f});
  EXPECT_EQ(h.size(), 2u);
  EXPECT_FALSE(h.count(2));
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  // p1/p0 = e^-1 = 0.37 survives min-p 0.3; p2/p0 = e^-3 = 0.05 does not.
  auto h = histogram(params(1.0f, 0, 1.0f, 0.3f), {3.0f, 2.0f, 0.0f});
  EXPECT_EQ(h.size(), 2u);
  EXPECT_FALSE(h.count(2));
}

TEST(Sampler, TemperatureSharpensTheDistribution) {
  auto hot = histogram(params(2.0f), {1.0f, 0.0f});
  auto cold = histogram(params(0.25f), {1.0f, 0.0f});
  EXPECT_GT(cold[0], hot[0]);
  // At T = 1 the first token has probability e/(1+e) = 0.731.
  auto t1 = histogram(params(1.0f), {1.0f, 0.0f}, 20000);
  EXPECT_NEAR(t1[0] / 20000.0, 0.731, 0.02);
}

TEST(Sampler, RepetitionPenaltyFollowsLlamaCppRule) {
  SamplingParams p = params(0);
  p.repeat_penalty = 2.0f;
  Sampler s(p);
  // Token 0 (logit 3, seen) becomes 1.5 < token 1 (2.0): greedy now picks 1.
  std::vector<int32_t> history = {0};
  EXPECT_EQ(s.sample(std::vector<float>{3.0f, 2.0f, -1.0f}, history), 1);
  // A negative logit is multiplied: -1 seen becomes -2, still last.
  EXPECT_EQ(s.sample(std::vector<float>{-1.0f, -1.5f}, std::vector<int32_t>{0}), 1);
}

TEST(Sampler, RefusesBadParameters) {
  EXPECT_THROW(validate(params(1.0f, 0, 0.0f)), Error);
  EXPECT_THROW(validate(params(1.0f, 0, 1.5f)), Error);
  EXPECT_THROW(validate(params(1.0f, 0, 1.0f, -0.1f)), Error);
  SamplingParams p = params(1.0f);
  p.repeat_penalty = 0;
  EXPECT_THROW(validate(p), Error);
}

}  // namespace
}  // namespace graft::runtime
