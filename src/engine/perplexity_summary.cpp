// The statistics of a perplexity run (engine/perplexity.h), with llama-perplexity's definitions so
// the two engines' reports read the same: means with their standard errors, sums in stream order
// (the same numbers whatever the thread count).
#include <algorithm>
#include <cmath>

#include "graft/engine/perplexity.h"

namespace graft::engine {

namespace {

struct Moments {
  double n = 0, sum = 0, sum2 = 0;
  explicit Moments(std::span<const double> v) : n(static_cast<double>(v.size())) {
    for (double x : v) {
      sum += x;
      sum2 += x * x;
    }
  }
  double mean() const { return n > 0 ? sum / n : 0; }
  // The standard error of the mean: sqrt(variance / (n - 1)).
  double error() const {
    const double var = n > 0 ? sum2 / n - mean() * mean() : 0;
    return n > 1 && var > 0 ? std::sqrt(var / (n - 1)) : 0;
  }
  Estimate estimate() const { return {mean(), error()}; }
};

// The covariance of two means (of paired values), as the errors above scale it.
double mean_covariance(std::span<const double> a, std::span<const double> b) {
  const double n = static_cast<double>(a.size());
  if (n < 2) return 0;
  double sa = 0, sb = 0, sab = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sa += a[i];
    sb += b[i];
    sab += a[i] * b[i];
  }
  return (sab / n - (sa / n) * (sb / n)) / (n - 1);
}

// Linear interpolation between the two nearest ranks of the sorted values.
std::vector<Percentile> percentiles(std::vector<double> v, const std::vector<double>& fractions) {
  std::sort(v.begin(), v.end());
  std::vector<Percentile> out;
  for (double f : fractions) {
    const double at = f * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(at);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    out.push_back({f, v[lo] + (at - static_cast<double>(lo)) * (v[hi] - v[lo])});
  }
  return out;
}

}  // namespace

const std::vector<double>& kld_fractions() {
  static const std::vector<double> f{1, 0.999, 0.99, 0.95, 0.9, 0.5, 0.1, 0.05, 0.01, 0.001, 0};
  return f;
}

const std::vector<double>& p_diff_fractions() {
  static const std::vector<double> f{1, 0.999, 0.99, 0.95, 0.9, 0.75, 0.5, 0.25, 0.1, 0.05, 0.01, 0.001, 0};
  return f;
}

PerplexitySummary summarize(const PositionScores& scores, bool with_percentiles) {
  PerplexitySummary s;
  s.count = static_cast<int64_t>(scores.size());
  if (s.count == 0) return s;
  const Moments nll(scores.nll);
  s.ppl = {std::exp(nll.mean()), std::exp(nll.mean()) * nll.error()};
  s.has_base = scores.nll_base.size() == scores.nll.size();
  if (!s.has_base) return s;
  const Moments base(scores.nll_base);
  s.ppl_base = {std::exp(base.mean()), std::exp(base.mean()) * base.error()};
  const double cov = mean_covariance(scores.nll, scores.nll_base);
  const double denom = nll.error() * base.error();
  s.log_ppl_correlation = denom > 0 ? cov / denom : 0;
  const double ratio_error = std::sqrt(std::max(0.0, nll.error() * nll.error() + base.error() * base.error() - 2 * cov));
  s.log_ppl_ratio = {nll.mean() - base.mean(), ratio_error};
  s.ppl_ratio = {std::exp(s.log_ppl_ratio.value), std::exp(s.log_ppl_ratio.value) * ratio_error};
  const double ppl_cov = s.ppl.value * s.ppl_base.value * cov;
  s.ppl_diff = {s.ppl.value - s.ppl_base.value,
                std::sqrt(std::max(0.0, s.ppl.error * s.ppl.error + s.ppl_base.error * s.ppl_base.error - 2 * ppl_cov))};
  s.kld = Moments(scores.kld).estimate();
  s.p_diff = Moments(scores.p_diff).estimate();
  std::vector<double> p_diff2(scores.p_diff.size());
  for (size_t i = 0; i < p_diff2.size(); ++i) p_diff2[i] = scores.p_diff[i] * scores.p_diff[i];
  const Moments mse(p_diff2);
  const double rms = std::sqrt(mse.mean());
  s.p_diff_rms = {rms, rms > 0 ? 0.5 / rms * mse.error() : 0};
  double same = 0;
  for (uint8_t t : scores.same_top) same += t;
  const double frac = same / static_cast<double>(s.count);
  s.same_top = {frac, s.count > 1 ? std::sqrt(frac * (1 - frac) / static_cast<double>(s.count - 1)) : 0};
  if (!with_percentiles) return s;
  s.kld_percentiles = percentiles(scores.kld, kld_fractions());
  s.p_diff_percentiles = percentiles(scores.p_diff, p_diff_fractions());
  return s;
}

}  // namespace graft::engine
