// Perplexity and KL divergence over a token stream, as llama-perplexity measures them, so the two
// engines' numbers compare: the stream is cut into chunks of n_ctx tokens, each evaluated from an
// empty cache (its first token replaced by BOS where the tokenizer adds one), and the second half of
// each chunk is scored (positions [n_ctx/2, n_ctx - 1), each predicting the next token: every scored
// token has at least n_ctx/2 tokens of context). Against a saved base (io/log_prob_file.h: the
// base model's log-probabilities at the same positions) each position also gives the KL divergence
// KL(base || this), the change of the right token's probability and whether the top token agrees.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "graft/engine/engine.h"
#include "graft/io/log_prob_file.h"
#include "graft/runtime/kv_cache.h"

namespace graft::engine {

// Per scored position, in stream order. The base columns are filled only against a base.
struct PositionScores {
  std::vector<double> nll;       // -ln p(next token)
  std::vector<double> nll_base;  // the same under the base
  std::vector<double> kld;       // sum_i p_base(i) (ln p_base(i) - ln p(i)), over p_base(i) > e^-16
  std::vector<double> p_diff;    // p(next token) - p_base(next token)
  std::vector<uint8_t> same_top; // 1 where both put the same token first
  size_t size() const { return nll.size(); }
};

class PerplexityRun {
 public:
  // n_ctx: tokens per chunk (>= 4, at most the model's context). The adapters run unfused at their
  // scales (a registry selection's pairs), as a request's do.
  PerplexityRun(Engine& engine, int64_t n_ctx, std::vector<runtime::ScaledAdapter> adapters, DType cache_type);

  int64_t n_ctx() const { return n_ctx_; }
  io::LogProbLayout layout(int64_t n_chunk) const;

  // Evaluates one chunk (n_ctx tokens, checked against the vocabulary first) and appends its scored
  // positions to `scores`. With `base`, its records of chunk `base_chunk` are compared; with `save`,
  // this run's log-probabilities are written as the next chunk's records.
  void score_chunk(std::span<const int32_t> chunk, PositionScores& scores, const io::LogProbFile* base = nullptr,
                   int64_t base_chunk = 0, io::LogProbWriter* save = nullptr);

 private:
  Engine& engine_;
  int64_t n_ctx_;
  std::vector<runtime::ScaledAdapter> adapters_;
  runtime::KVCache cache_;
};

// A mean with its standard error (0 with fewer than 2 values).
struct Estimate {
  double value = 0, error = 0;
};

struct Percentile {
  double fraction, value;  // fraction 0: the minimum, 0.5 the median, 1 the maximum
};

// What llama-perplexity prints: the perplexity, and against a base its statistics.
struct PerplexitySummary {
  int64_t count = 0;
  Estimate ppl;  // exp(mean nll); its error from the nll's standard error
  bool has_base = false;
  Estimate ppl_base, log_ppl_ratio, ppl_ratio, ppl_diff;
  double log_ppl_correlation = 0;  // of the two means' errors (how much of the noise they share)
  Estimate kld, p_diff, p_diff_rms, same_top;  // same_top: a fraction, with its binomial error
  std::vector<Percentile> kld_percentiles, p_diff_percentiles;
};

// The fractions llama-perplexity prints for KLD (max, 99.9 %, 99 %, 95 %, 90 %, median, 10 %, 5 %,
// 1 %, 0.1 %, min) and for Δp (the same with 75 % and 25 %).
const std::vector<double>& kld_fractions();
const std::vector<double>& p_diff_fractions();

// percentiles false: everything but the two percentile lists, without sorting (a progress line's).
PerplexitySummary summarize(const PositionScores& scores, bool percentiles = true);

}  // namespace graft::engine
