#include "graft/engine/perplexity.h"

#include <algorithm>
#include <cmath>

#include "graft/core/error.h"

namespace graft::engine {

namespace {

// Tokens per forward pass (llama.cpp's default micro-batch): bounds the pass's buffers and the
// logits rows held at once (512 x vocab floats).
constexpr int64_t kPassTokens = 512;
// Base log-probabilities at or below this add nothing measurable to the KL divergence (p < 1.2e-7)
// and are where the stored 16-bit codes stop resolving (io/log_prob_file.h).
constexpr float kBaseFloor = -16.0f;

struct Position {
  double nll = 0, nll_base = 0, kld = 0, p_diff = 0;
  bool same_top = false;
};

// One logits row: its softmax's pieces once, then every score that reads them.
Position score_row(std::span<const float> logits, int32_t next, const io::LogProbRecord* base, uint16_t* save) {
  const auto top = std::max_element(logits.begin(), logits.end());
  const float max_logit = *top;
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - max_logit));
  const auto log_sum_exp = static_cast<float>(std::log(sum));
  Position s;
  s.nll = static_cast<double>(max_logit) + log_sum_exp - logits[next];
  if (save) io::encode_log_probs(logits, max_logit, log_sum_exp, save);
  if (!base) return s;
  s.nll_base = -static_cast<double>(base->log_prob(next));
  int64_t top_base = 0;
  double kld = 0;
  const double shift = static_cast<double>(max_logit) + log_sum_exp;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (base->q[i] > base->q[top_base]) top_base = static_cast<int64_t>(i);
    const double lp_base = base->log_prob(static_cast<int64_t>(i));
    if (lp_base > kBaseFloor) kld += std::exp(lp_base) * (lp_base - (logits[i] - shift));
  }
  s.kld = kld;
  s.p_diff = std::exp(-s.nll) - std::exp(-s.nll_base);
  s.same_top = top - logits.begin() == top_base;
  return s;
}

}  // namespace

PerplexityRun::PerplexityRun(Engine& engine, int64_t n_ctx, std::vector<runtime::ScaledAdapter> adapters,
                             DType cache_type)
    : engine_(engine),
      n_ctx_(n_ctx),
      adapters_(std::move(adapters)),
      cache_(engine.model().config, n_ctx, cache_type) {
  if (n_ctx < 4) fail_as(ErrorKind::kBadRequest, "a perplexity chunk needs at least 4 tokens, got ", n_ctx);
}

io::LogProbLayout PerplexityRun::layout(int64_t n_chunk) const {
  return {n_ctx_, engine_.model().config.vocab_size, n_chunk};
}

void PerplexityRun::score_chunk(std::span<const int32_t> chunk, PositionScores& scores, const io::LogProbFile* base,
                                int64_t base_chunk, io::LogProbWriter* save) {
  if (static_cast<int64_t>(chunk.size()) != n_ctx_)
    fail_as(ErrorKind::kInternal, "perplexity chunk of ", chunk.size(), " tokens, expected ", n_ctx_);
  std::vector<int32_t> tokens(chunk.begin(), chunk.end());
  if (const auto bos = engine_.tokenizer().added_bos()) tokens[0] = *bos;
  const io::LogProbLayout shape = layout(1);
  const int64_t first = shape.first(), vocab = shape.n_vocab, words = shape.record_words();
  cache_.truncate(0);
  // The last token is never fed: its logits would predict a token past the chunk.
  for (int64_t at = 0; at < n_ctx_ - 1;) {
    const bool scored = at >= first;
    const int64_t n = std::min(kPassTokens, (scored ? n_ctx_ - 1 : first) - at);
    runtime::SequenceInput in;
    in.cache = &cache_;
    in.tokens = std::span<const int32_t>(tokens).subspan(static_cast<size_t>(at), static_cast<size_t>(n));
    in.adapters = adapters_;
    in.want_logits = scored;
    in.all_logits = scored;
    const std::vector<float> logits = engine_.transformer().forward(engine_.pool(), {&in, 1});
    if (scored) {
      std::vector<Position> rows(static_cast<size_t>(n));
      std::vector<uint16_t> records(save ? static_cast<size_t>(n * words) : 0);
      engine_.pool().parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const io::LogProbRecord rec = base ? base->record(base_chunk, at + r - first) : io::LogProbRecord{};
          rows[r] = score_row({logits.data() + r * vocab, static_cast<size_t>(vocab)}, tokens[at + r + 1],
                              base ? &rec : nullptr, save ? records.data() + r * words : nullptr);
        }
      }, 4);
      if (save) save->write_records(records);
      for (const Position& p : rows) {
        scores.nll.push_back(p.nll);
        if (!base) continue;
        scores.nll_base.push_back(p.nll_base);
        scores.kld.push_back(p.kld);
        scores.p_diff.push_back(p.p_diff);
        scores.same_top.push_back(p.same_top);
      }
    }
    at += n;
  }
}

}  // namespace graft::engine
