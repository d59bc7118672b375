// One generation in flight: its KV cache, its token history, its sampler, the stop matcher and the
// UTF-8 stream decoder, and its adapters at their scales. The engine's step feeds every active
// sequence's next tokens through one batched forward pass; a sequence only decides what to feed
// next and what a logits row means for it. `graft generate` runs one, `graft serve` many.
#pragma once
#include <chrono>
#include <memory>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graft/engine/grammar.h"
#include "graft/runtime/kv_cache.h"
#include "graft/runtime/lora.h"
#include "graft/runtime/sampler.h"
#include "graft/text/tokenizer.h"

namespace graft::engine {

enum class StopReason { None, Eos, StopString, MaxTokens, ContextFull, Cancelled };

// The vocabulary as constrained decoding sees it: each token's bytes, special tokens none (a
// grammar never produces them; EOS is decided by the grammar's end instead).
std::shared_ptr<const TokenTrie> grammar_vocabulary(const text::Tokenizer& tokenizer);
// "none", "eos", "word", "limit", "context", "cancelled" (llama-server's stop_type words).
const char* stop_reason_name(StopReason r);

// Holds back text that might be the start of a stop string, so a stop string is never half-emitted.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Appends text; returns what is safe to emit; sets `matched` to the stop string that appeared.
  std::string push(std::string_view piece, const std::string** matched);
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

struct SequenceParams {
  int64_t max_tokens = 256;  // < 0: until EOS or the context is full; 0: only evaluate the prompt
  runtime::SamplingParams sampling;
  std::vector<std::string> stop;     // stop strings (not included in the output)
  std::vector<int32_t> eos_ids;      // generation stops at any of these (not emitted)
  // The unfused adapters it runs with, each at its scale (a registry Selection's pairs), held alive
  // by the sequence; none: the base model.
  std::vector<runtime::ScaledAdapter> adapters;
  // Constrained decoding: every drawn token must continue a sentence of `grammar` (tokens that
  // cannot are masked before sampling; EOS only once the text is a complete sentence, and the
  // sequence ends when nothing more can follow). `grammar_vocab` is the tokenizer's vocabulary
  // (grammar_vocabulary), required with a grammar.
  std::shared_ptr<const Grammar> grammar;
  std::shared_ptr<const TokenTrie> grammar_vocab;
  int32_t n_probs = 0;               // > 0: keep the top-n token probabilities of each step
  bool token_prob = false;           // keep the drawn token's probability (also with n_probs > 0)
  // An embedding: the prompt is evaluated for its hidden states (every prompt token's final-norm
  // row, hidden_rows()) and nothing is generated; the whole prompt may fill the context. The
  // cache must start empty (a reused prefix would have no hidden states).
  bool embedding = false;
};

struct TokenProb {
  int32_t id;
  float prob;
};

// What one step produced for a sequence.
struct StepOutput {
  bool sampled = false;                 // a token was drawn (false while the prompt is evaluated)
  int32_t token = -1;                   // the drawn token (also when it is EOS)
  std::string text;                     // text that became final this step
  std::vector<TokenProb> top;           // with n_probs > 0
  float prob = 0.0f;                    // the drawn token's, with n_probs > 0 or token_prob
};

class Sequence {
 public:
  using Clock = std::chrono::steady_clock;

  // `cache` may already hold a prefix of `prompt` (a reused prompt cache): evaluation continues
  // from cache.size(), which must be < prompt.size(). Throws if the prompt is empty or does not
  // fit the cache with room for one generated token.
  Sequence(const text::Tokenizer& tokenizer, runtime::KVCache& cache, std::vector<int32_t> prompt,
           SequenceParams params);

  bool finished() const { return reason_ != StopReason::None; }
  StopReason reason() const { return reason_; }
  // The next tokens to evaluate (at most max_tokens of them): the rest of the prompt, or the last
  // drawn token. Empty when finished.
  std::span<const int32_t> pending(int64_t max_tokens) const;
  // Whether evaluating `n` pending tokens reaches the end of the history (then a logits row is due).
  bool completes(int64_t n) const;
  // After a forward pass evaluated `n` pending tokens; `logits` is the row for the last one (empty
  // when !completes(n)). Samples, checks EOS, stop strings and limits.
  StepOutput advance(int64_t n, std::span<const float> logits);
  // Ends the sequence (client gone, timeout, shutdown); the text held back is dropped.
  void cancel() { if (!finished()) reason_ = StopReason::Cancelled; }

  const std::vector<int32_t>& prompt() const { return prompt_; }
  const std::vector<int32_t>& generated() const { return generated_; }
  const std::string& text() const { return text_; }
  const std::string& stopping_word() const { return stopping_word_; }
  const SequenceParams& params() const { return params_; }
  // Live scales: a change applies from the next forward pass on.
  std::vector<runtime::ScaledAdapter>& adapters() { return params_.adapters; }
  runtime::KVCache& cache() { return cache_; }
  // With params.embedding: rows [evaluated prompt tokens, hidden_size] (the step appends to it).
  std::vector<float>& hidden_rows() { return hidden_; }
  int64_t cached_at_start() const { return cached_at_start_; }
  // Timings: prompt evaluation (first pass to first token) and generation (after the first token).
  double prompt_seconds() const;
  double decode_seconds() const;

 private:
  const text::Tokenizer& tokenizer_;
  runtime::KVCache& cache_;
  std::vector<int32_t> prompt_, history_, generated_;
  std::vector<float> hidden_;
  SequenceParams params_;
  runtime::Sampler sampler_;
  std::unique_ptr<GrammarMatcher> grammar_;
  std::vector<uint8_t> allowed_;  // the grammar's token mask of the step
  text::StreamDecoder decoder_;
  StopMatcher stops_;
  StopReason reason_ = StopReason::None;
  std::string text_, stopping_word_;
  int64_t cached_at_start_ = 0;
  Clock::time_point t_start_{}, t_first_{}, t_end_{};
};

}  // namespace graft::engine
