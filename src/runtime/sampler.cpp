#include "graft/runtime/sampler.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "graft/core/error.h"

namespace graft::runtime {

void validate(const SamplingParams& p) {
  // One rule for every field: a value outside its documented range is refused, never reinterpreted
  // (llama.cpp reads a negative temperature as greedy; here 0 is greedy and -1 an error).
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    fail_as(ErrorKind::kBadRequest, "temperature must be >= 0 and finite (0: greedy), got ", p.temperature);
  if (!(p.top_p > 0.0f) || p.top_p > 1.0f) fail_as(ErrorKind::kBadRequest, "top-p must be in (0, 1], got ", p.top_p);
  if (!(p.min_p >= 0.0f) || p.min_p > 1.0f) fail_as(ErrorKind::kBadRequest, "min-p must be in [0, 1], got ", p.min_p);
  if (!(p.repeat_penalty > 0.0f) || !std::isfinite(p.repeat_penalty))
    fail_as(ErrorKind::kBadRequest, "repeat penalty must be positive and finite, got ", p.repeat_penalty);
  if (p.repeat_last_n < 0) fail_as(ErrorKind::kBadRequest, "repeat-last-n must be >= 0, got ", p.repeat_last_n);
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    fail_as(ErrorKind::kBadRequest, "presence penalty must be in [-2, 2], got ", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    fail_as(ErrorKind::kBadRequest, "frequency penalty must be in [-2, 2], got ", p.frequency_penalty);
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0) fail_as(ErrorKind::kBadRequest, "logit bias: token id ", id, " is negative");
    if (std::isnan(bias) || bias == INFINITY) fail_as(ErrorKind::kBadRequest, "logit bias for token ", id, " must be finite or -inf");
  }
}

int32_t argmax(std::span<const float> logits) {
  // The largest value eight lanes at a time, then its first index: the lowest id on ties, as the
  // plain scan (a vocabulary of 49,152 scanned element by element was 3 % of a server step).
  const int64_t n = static_cast<int64_t>(logits.size());
  if (n < 16) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
    return best;
  }
  __m256 mx = _mm256_loadu_ps(logits.data());
  int64_t i = 8;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(logits.data() + i));
  float lanes[8];
  _mm256_storeu_ps(lanes, mx);
  float m = lanes[0];
  for (float v : lanes) m = std::max(m, v);
  for (; i < n; ++i) m = std::max(m, logits[i]);
  for (int64_t j = 0; j < n; ++j)
    if (logits[j] == m) return static_cast<int32_t>(j);
  return 0;  // NaN everywhere: callers refuse non-finite logits first
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate(params); }

namespace {
// The first non-finite logit's index, or -1: eight lanes at a time (x − x is 0 only for finite x).
int64_t first_non_finite(std::span<const float> logits) {
  const int64_t n = static_cast<int64_t>(logits.size());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(logits.data() + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(_mm256_sub_ps(v, v), _mm256_setzero_ps(), _CMP_NEQ_UQ)) != 0) break;
  }
  for (; i < n; ++i)
    if (!std::isfinite(logits[i])) return i;
  return -1;
}

[[noreturn]] void refuse_logit(float v, int64_t i) {
  // NaN/Inf weights (or an overflow) surface here, whatever their path: refuse rather than print
  // garbage chosen from a meaningless distribution.
  fail("the model produced a non-finite logit (", v, " for token ", i,
       "): its weights or an adapter hold NaN/Inf values, or the activations overflowed");
}
}  // namespace

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history,
                        std::span<const uint8_t> allowed, std::span<const int32_t> generated) {
  const SamplingParams& p = params_;
  const bool penalty = p.repeat_penalty != 1.0f && p.repeat_last_n > 0;
  const bool oai_penalty = (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) && !generated.empty();
  const bool biased = !p.logit_bias.empty();
  const bool masked = !allowed.empty();
  if (masked && allowed.size() != logits.size())
    fail("sample: the token mask has ", allowed.size(), " entries for ", logits.size(), " logits");
  if (p.temperature <= 0.0f && !penalty && !oai_penalty && !biased) {  // greedy without a penalty: no copy (the server's common case)
    if (const int64_t bad = first_non_finite(logits); bad >= 0) refuse_logit(logits[bad], bad);
    if (!masked) return argmax(logits);
    int64_t best = -1;  // lowest id on ties, as argmax
    for (size_t i = 0; i < logits.size(); ++i)
      if (allowed[i] && (best < 0 || logits[i] > logits[static_cast<size_t>(best)])) best = static_cast<int64_t>(i);
    if (best < 0) fail("sample: the token mask allows no token");
    return static_cast<int32_t>(best);
  }
  candidates_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) refuse_logit(logits[i], static_cast<int64_t>(i));
    candidates_[i] = {logits[i], static_cast<int32_t>(i)};
  }

  bool banned = false;
  for (const auto& [id, bias] : p.logit_bias) {  // ids past the row (padding, or a bad id) are skipped
    if (id < 0 || static_cast<size_t>(id) >= candidates_.size()) continue;
    candidates_[static_cast<size_t>(id)].first += bias;
    banned |= std::isinf(bias);
  }
  if (penalty) {
    const size_t n = std::min<size_t>(history.size(), static_cast<size_t>(p.repeat_last_n));
    std::unordered_set<int32_t> seen(history.end() - static_cast<std::ptrdiff_t>(n), history.end());
    for (int32_t id : seen) {
      if (id < 0 || static_cast<size_t>(id) >= candidates_.size()) continue;
      float& l = candidates_[id].first;
      l = l > 0 ? l / p.repeat_penalty : l * p.repeat_penalty;
    }
  }
  if (oai_penalty) {
    std::unordered_map<int32_t, int32_t> count;
    for (int32_t id : generated) ++count[id];
    for (const auto& [id, c] : count) {
      if (id < 0 || static_cast<size_t>(id) >= candidates_.size()) continue;
      candidates_[static_cast<size_t>(id)].first -= static_cast<float>(c) * p.frequency_penalty + p.presence_penalty;
    }
  }
  if (masked || banned) {
    std::erase_if(candidates_, [&](const auto& c) {
      return (masked && !allowed[static_cast<size_t>(c.second)]) || c.first == -INFINITY;
    });
    if (candidates_.empty())
      fail(masked ? "sample: the token mask allows no token (with the logit bias's bans)" : "sample: the logit bias bans every token");
  }
  if (p.temperature <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < candidates_.size(); ++i)
      if (candidates_[i].first > candidates_[best].first) best = i;
    return candidates_[best].second;
  }

  // Sorted by logit, descending; ties by id so the order is reproducible.
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = candidates_.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    std::partial_sort(candidates_.begin(), candidates_.begin() + p.top_k, candidates_.end(), by_logit);
    n = static_cast<size_t>(p.top_k);
  } else {
    std::sort(candidates_.begin(), candidates_.end(), by_logit);
  }
  candidates_.resize(n);

  // Probabilities at temperature 1 for the top-p / min-p cuts (llama.cpp's order: cut, then temper).
  std::vector<double> prob(n);
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp(static_cast<double>(candidates_[i].first - candidates_[0].first));
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i] / sum;
      if (cum >= p.top_p) { n = i + 1; break; }
    }
  }
  if (p.min_p > 0.0f) {
    size_t keep = 1;
    while (keep < n && prob[keep] >= p.min_p * prob[0]) ++keep;  // prob[0] is the max (1.0 before normalizing)
    n = keep;
  }

  std::vector<double> w(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i)
    total += w[i] = std::exp(static_cast<double>(candidates_[i].first - candidates_[0].first) / p.temperature);
  std::uniform_real_distribution<double> uni(0.0, total);
  double r = uni(rng_);
  for (size_t i = 0; i < n; ++i) {
    if (r < w[i]) return candidates_[i].second;
    r -= w[i];
  }
  return candidates_[n - 1].second;
}

}  // namespace graft::runtime
