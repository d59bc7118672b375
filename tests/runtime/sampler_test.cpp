#include "graft/runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

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

// The reference of the new stages, computed here: bias, then the repetition penalty over the
// history, then logit[t] -= frequency * count(t in generated) + presence * (count > 0).
std::vector<float> reference_logits(std::vector<float> l, const SamplingParams& p, const std::vector<int32_t>& history,
                                    const std::vector<int32_t>& generated) {
  for (const auto& [id, b] : p.logit_bias) l[static_cast<size_t>(id)] += b;
  if (p.repeat_penalty != 1.0f) {
    std::vector<bool> seen(l.size());
    const size_t n = std::min<size_t>(history.size(), static_cast<size_t>(p.repeat_last_n));
    for (size_t i = history.size() - n; i < history.size(); ++i) seen[static_cast<size_t>(history[i])] = true;
    for (size_t t = 0; t < l.size(); ++t)
      if (seen[t]) l[t] = l[t] > 0 ? l[t] / p.repeat_penalty : l[t] * p.repeat_penalty;
  }
  std::vector<int> count(l.size());
  for (int32_t t : generated) ++count[static_cast<size_t>(t)];
  for (size_t t = 0; t < l.size(); ++t)
    l[t] -= p.frequency_penalty * static_cast<float>(count[t]) + p.presence_penalty * (count[t] > 0 ? 1.0f : 0.0f);
  return l;
}

// Greedy picks the argmax of the reference; temperature 1 without cuts draws from its softmax.
void expect_matches_reference(const SamplingParams& base, const std::vector<float>& logits,
                              const std::vector<int32_t>& history, const std::vector<int32_t>& generated) {
  const std::vector<float> ref = reference_logits(logits, base, history, generated);
  SamplingParams g = base;
  g.temperature = 0;
  Sampler greedy(g);
  EXPECT_EQ(greedy.sample(logits, history, {}, generated), argmax(ref));
  SamplingParams t = base;
  t.temperature = 1.0f;
  t.top_k = 0;
  t.top_p = 1.0f;
  t.min_p = 0.0f;
  Sampler s(t);
  const int n = 40000;
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits, history, {}, generated)];
  float mx = -INFINITY;
  for (float v : ref) mx = std::max(mx, v);
  double sum = 0;
  for (float v : ref) sum += std::exp(static_cast<double>(v - mx));
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(h[static_cast<int32_t>(i)] / static_cast<double>(n), std::exp(static_cast<double>(ref[i] - mx)) / sum, 0.012)
        << "token " << i;
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOnlyGeneratedTokens) {
  const std::vector<float> logits = {2.0f, 1.9f, 1.5f, 0.5f, 1.0f};
  // Token 2 is in the prompt only: never penalized. Token 0 generated 3 times, 1 once.
  const std::vector<int32_t> history = {2, 2, 2, 0, 1, 0, 0};
  const std::vector<int32_t> generated = {0, 1, 0, 0};
  SamplingParams p = params(0);
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.2f;
  expect_matches_reference(p, logits, history, generated);
  // Greedy by hand: 0 -> 2 - 0.9 - 0.2 = 0.9, 1 -> 1.9 - 0.3 - 0.2 = 1.4, 2 stays 1.5: picks 2.
  Sampler s(p);
  EXPECT_EQ(s.sample(logits, history, {}, generated), 2);
  // No generated tokens: no penalty (the prompt does not count), token 0 wins.
  EXPECT_EQ(s.sample(logits, history), 0);
  // Negative penalties encourage repetition: token 3 generated twice, -2 * 2 - 2 lifts 0.5 to 6.5.
  p.frequency_penalty = -2.0f;
  p.presence_penalty = -2.0f;
  Sampler neg(p);
  EXPECT_EQ(neg.sample(logits, std::vector<int32_t>{3, 3}, {}, std::vector<int32_t>{3, 3}), 3);
  expect_matches_reference(p, logits, {3, 3, 4}, {3, 3, 4});
}

TEST(Sampler, LogitBiasComesFirstThenRepeatThenPresencePenalty) {
  const std::vector<float> logits = {1.0f, 0.8f, 0.6f, 0.4f};
  SamplingParams p = params(0);
  p.logit_bias = {{3, 1.0f}, {0, -0.5f}};
  p.repeat_penalty = 2.0f;  // divides 3's biased 1.4 (seen) to 0.7, before the presence penalty
  p.presence_penalty = 0.1f;
  expect_matches_reference(p, logits, {3}, {3});
  // By hand: 0 -> 0.5, 1 -> 0.8, 2 -> 0.6, 3 -> (0.4 + 1) / 2 - 0.1 = 0.6: picks 1. Had the
  // penalty come before the bias, 3 would be 0.4 / 2 - 0.1 + 1 = 1.1 and win.
  Sampler s(p);
  EXPECT_EQ(s.sample(logits, std::vector<int32_t>{3}, {}, std::vector<int32_t>{3}), 1);
}

TEST(Sampler, LogitBiasBansAndLifts) {
  std::vector<float> logits(49157, 0.0f);
  logits[7] = 5.0f;
  SamplingParams p = params(0);
  p.logit_bias = {{7, -100.0f}, {12, 3.0f}};
  Sampler greedy(p);
  EXPECT_EQ(greedy.sample(logits, {}), 12);
  // -inf (llama-server's false) removes the token, also at a temperature and under a mask.
  logits.assign(64, 0.0f);
  logits[7] = 5.0f;
  p.logit_bias = {{7, -INFINITY}};
  p.temperature = 5.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  Sampler hot(p);
  for (int i = 0; i < 2000; ++i) EXPECT_NE(hot.sample(logits, {}), 7);
  std::vector<uint8_t> allowed(logits.size(), 0);
  allowed[7] = allowed[9] = 1;
  for (int i = 0; i < 50; ++i) EXPECT_EQ(hot.sample(logits, {}, allowed), 9);
  allowed[9] = 0;  // the mask and the ban leave nothing
  EXPECT_THROW(hot.sample(logits, {}, allowed), Error);
  // Ids past the row are skipped (padding rows of the output matrix).
  p.logit_bias = {{1000, 50.0f}};
  p.temperature = 0;
  Sampler past(p);
  EXPECT_EQ(past.sample(logits, {}), 7);
}

TEST(Sampler, RefusesBadParameters) {
  for (float v : {-2.01f, 2.01f, NAN}) {
    SamplingParams q = params(1.0f);
    q.presence_penalty = v;
    EXPECT_THROW(validate(q), Error);
    q = params(1.0f);
    q.frequency_penalty = v;
    EXPECT_THROW(validate(q), Error);
  }
  SamplingParams b = params(1.0f);
  b.logit_bias = {{1, NAN}};
  EXPECT_THROW(validate(b), Error);
  b.logit_bias = {{-1, 1.0f}};
  EXPECT_THROW(validate(b), Error);
  EXPECT_THROW(validate(params(1.0f, 0, 0.0f)), Error);
  EXPECT_THROW(validate(params(1.0f, 0, 1.5f)), Error);
  EXPECT_THROW(validate(params(1.0f, 0, 1.0f, -0.1f)), Error);
  SamplingParams p = params(1.0f);
  p.repeat_penalty = 0;
  EXPECT_THROW(validate(p), Error);
}

}  // namespace
}  // namespace graft::runtime
