#include "graft/engine/sequence.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "graft/core/error.h"

namespace graft::engine {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::None: return "none";
    case StopReason::Eos: return "eos";
    case StopReason::StopString: return "word";
    case StopReason::MaxTokens: return "limit";
    case StopReason::ContextFull: return "context";
    case StopReason::Cancelled: return "cancelled";
  }
  return "none";
}

std::string StopMatcher::push(std::string_view piece, const std::string** matched) {
  pending_ += piece;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    const size_t at = pending_.find(s);
    if (at < cut) {
      cut = at;
      *matched = &s;
    }
  }
  if (cut != std::string::npos) {
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  size_t hold = 0;  // longest suffix of pending_ that is a proper prefix of a stop string
  for (const auto& s : stops_)
    for (size_t n = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); n > hold; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::flush() { return std::exchange(pending_, {}); }

Sequence::Sequence(const text::Tokenizer& tokenizer, runtime::KVCache& cache, std::vector<int32_t> prompt,
                   SequenceParams params)
    : tokenizer_(tokenizer),
      cache_(cache),
      prompt_(std::move(prompt)),
      params_(std::move(params)),
      sampler_(params_.sampling),
      decoder_(tokenizer),
      stops_(params_.stop) {
  if (prompt_.empty()) fail_as(ErrorKind::kBadRequest, "the prompt is empty (no tokens)");
  if (params_.embedding) {
    if (static_cast<int64_t>(prompt_.size()) > cache_.capacity())
      fail_as(ErrorKind::kLimit, "the input has ", prompt_.size(), " tokens, which does not fit the context size ",
              cache_.capacity(), " (raise --ctx-size or shorten the input)");
    if (cache_.size() != 0) fail_as(ErrorKind::kInternal, "an embedding must start from an empty cache");
  } else if (static_cast<int64_t>(prompt_.size()) >= cache_.capacity())
    fail_as(ErrorKind::kLimit, "the prompt has ", prompt_.size(), " tokens, which does not fit the context size ",
            cache_.capacity(), " with room to generate (raise --ctx-size or shorten the prompt)");
  const int32_t vocab = tokenizer_.vocab_size();
  for (int32_t id : prompt_)
    if (id < 0 || id >= vocab) fail_as(ErrorKind::kBadRequest, "prompt token id ", id, " is out of range [0, ", vocab, ")");
  if (cache_.size() >= static_cast<int64_t>(prompt_.size()))
    fail_as(ErrorKind::kInternal, "a reused cache must leave at least one prompt token to evaluate");
  cached_at_start_ = cache_.size();
  history_ = prompt_;
  if (params_.grammar) {
    if (!params_.grammar_vocab || static_cast<int32_t>(params_.grammar_vocab->size()) != vocab)
      fail_as(ErrorKind::kInternal, "a grammar needs the tokenizer's vocabulary (grammar_vocabulary)");
    grammar_ = std::make_unique<GrammarMatcher>(params_.grammar);
  }
  t_start_ = Clock::now();
}

std::span<const int32_t> Sequence::pending(int64_t max_tokens) const {
  if (finished()) return {};
  const int64_t done = cache_.size(), total = static_cast<int64_t>(history_.size());
  const int64_t n = std::min(total - done, std::max<int64_t>(1, max_tokens));
  return std::span<const int32_t>(history_.data() + done, static_cast<size_t>(n));
}

bool Sequence::completes(int64_t n) const { return cache_.size() + n >= static_cast<int64_t>(history_.size()); }

double Sequence::prompt_seconds() const {
  const auto end = t_first_ != Clock::time_point{} ? t_first_ : (t_end_ != Clock::time_point{} ? t_end_ : Clock::now());
  return std::chrono::duration<double>(end - t_start_).count();
}

double Sequence::decode_seconds() const {
  if (t_first_ == Clock::time_point{}) return 0;
  const auto end = t_end_ != Clock::time_point{} ? t_end_ : Clock::now();
  return std::chrono::duration<double>(end - t_first_).count();
}

std::shared_ptr<const TokenTrie> grammar_vocabulary(const text::Tokenizer& tokenizer) {
  std::vector<std::string> bytes(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id)
    if (!tokenizer.is_special(id)) bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(id);
  return std::make_shared<const TokenTrie>(bytes);
}

StepOutput Sequence::advance(int64_t n, std::span<const float> logits) {
  StepOutput out;
  // The cache was advanced by the forward pass; only the history decides what comes next.
  if (static_cast<int64_t>(history_.size()) > cache_.size()) return out;  // prompt not finished yet
  const bool first = generated_.empty();
  auto finish = [&](StopReason r) {
    reason_ = r;
    t_end_ = Clock::now();
    if (first && t_first_ == Clock::time_point{}) t_first_ = t_end_;
  };
  // EOS drawn, or a grammar with nothing more to give: the text held back is released (unless it
  // completes a stop string) and the sequence ends.
  auto end_of_text = [&]() -> StepOutput& {
    finish(StopReason::Eos);
    const std::string* matched = nullptr;
    out.text = stops_.push(decoder_.flush(), &matched);
    if (matched) stopping_word_ = *matched;
    else out.text += stops_.flush();
    text_ += out.text;
    return out;
  };
  if (params_.embedding || (params_.max_tokens >= 0 && static_cast<int64_t>(generated_.size()) >= params_.max_tokens)) {
    finish(StopReason::MaxTokens);
    out.text = stops_.flush();
    return out;
  }
  // Probabilities of the raw distribution (softmax of the logits, before bias, penalties, grammar
  // and temperature): the n most likely, and the drawn token's.
  const bool probs = params_.n_probs > 0 || params_.token_prob;
  float mx = -INFINITY;
  double sum = 0;
  if (probs) {
    for (float v : logits) mx = std::max(mx, v);
    for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  }
  if (params_.n_probs > 0) {
    std::vector<int32_t> ids(logits.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
    const size_t k = std::min<size_t>(static_cast<size_t>(params_.n_probs), ids.size());
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (size_t i = 0; i < k; ++i)
      out.top.push_back({ids[i], static_cast<float>(std::exp(static_cast<double>(logits[ids[i]] - mx)) / sum)});
  }
  if (grammar_) {
    // Only tokens that continue the grammar are candidates; EOS only where the text so far is a
    // complete sentence. A grammar that is complete, or whose next character no token can supply,
    // ends the sequence as EOS would (never an exception: this runs inside a batched step shared
    // with other requests).
    try {
      if (!grammar_->must_end()) grammar_->allowed_tokens(*params_.grammar_vocab, allowed_);
      else allowed_.assign(logits.size(), 0);
    } catch (const Error&) {
      allowed_.assign(logits.size(), 0);  // too ambiguous to go on (kLimit): end here
    }
    allowed_.resize(logits.size(), 0);  // rows past the tokenizer's vocabulary (padding) never come
    const bool end_ok = grammar_->can_end();
    for (int32_t e : params_.eos_ids)
      if (e >= 0 && static_cast<size_t>(e) < allowed_.size()) allowed_[static_cast<size_t>(e)] = end_ok ? 1 : 0;
    for (const auto& [id, bias] : params_.sampling.logit_bias)  // banned tokens: as if the grammar refused them
      if (bias == -INFINITY && id >= 0 && static_cast<size_t>(id) < allowed_.size()) allowed_[static_cast<size_t>(id)] = 0;
    if (std::find(allowed_.begin(), allowed_.end(), uint8_t{1}) == allowed_.end()) {
      return end_of_text();
    }
  }
  const int32_t next = sampler_.sample(logits, history_,
                                      grammar_ ? std::span<const uint8_t>(allowed_) : std::span<const uint8_t>(),
                                      generated_);
  out.sampled = true;
  out.token = next;
  if (probs) out.prob = static_cast<float>(std::exp(static_cast<double>(logits[next] - mx)) / sum);
  if (first) t_first_ = Clock::now();
  if (std::find(params_.eos_ids.begin(), params_.eos_ids.end(), next) != params_.eos_ids.end()) {
    return end_of_text();
  }
  generated_.push_back(next);
  history_.push_back(next);
  if (grammar_) {
    try {
      grammar_->accept(tokenizer_.token_bytes(next));  // allowed above, so it is accepted
    } catch (const Error&) {
      grammar_.reset();  // cannot happen for an allowed token; if it did, end rather than throw
      finish(StopReason::Eos);
    }
  }
  const std::string* matched = nullptr;
  out.text = stops_.push(decoder_.push(next), &matched);
  if (matched) {
    stopping_word_ = *matched;
    finish(StopReason::StopString);
  } else if (params_.max_tokens >= 0 && static_cast<int64_t>(generated_.size()) >= params_.max_tokens) {
    finish(StopReason::MaxTokens);
  } else if (static_cast<int64_t>(history_.size()) > cache_.capacity()) {
    finish(StopReason::ContextFull);  // the drawn token has no room to be evaluated
  }
  if (finished() && !matched) {
    const std::string* late = nullptr;
    std::string tail = stops_.push(decoder_.flush(), &late);
    if (late) {
      stopping_word_ = *late;
      reason_ = StopReason::StopString;
    } else {
      tail += stops_.flush();
    }
    out.text += tail;
  }
  text_ += out.text;
  return out;
}

}  // namespace graft::engine
