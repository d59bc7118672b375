#include "graft/runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "graft/core/error.h"

namespace graft::runtime {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Eos: return "eos";
    case StopReason::StopString: return "stop";
    case StopReason::MaxTokens: return "length";
    case StopReason::ContextFull: return "context";
    case StopReason::Callback: return "cancelled";
  }
  return "?";
}

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Holds back text that might be the start of a stop string, so a stop string is never half-emitted.
class StopMatcher {
 public:
  explicit StopMatcher(const std::vector<std::string>& stops) : stops_(stops) {}

  // Appends text; returns what is safe to emit; sets `stopped` when a stop string appeared.
  std::string push(std::string_view piece, bool& stopped) {
    pending_ += piece;
    size_t cut = std::string::npos;
    for (const auto& s : stops_)
      if (!s.empty()) cut = std::min(cut, pending_.find(s));
    if (cut != std::string::npos) {
      stopped = true;
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
  std::string flush() { return std::exchange(pending_, {}); }

 private:
  const std::vector<std::string>& stops_;
  std::string pending_;
};

}  // namespace

GenerateResult generate(ThreadPool& pool, Transformer& model, const text::Tokenizer& tokenizer, KVCache& cache,
                        const std::vector<int32_t>& prompt, const GenerateOptions& options, const TextCallback& on_text) {
  if (prompt.empty()) fail("the prompt is empty (no tokens)");
  if (cache.size() + static_cast<int64_t>(prompt.size()) >= cache.capacity())
    fail("the prompt has ", prompt.size(), " tokens, which does not fit the context size ", cache.capacity(),
         " with room to generate (raise --ctx-size or shorten the prompt)");
  Sampler sampler(options.sampling);
  GenerateResult res;
  res.prompt_tokens = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> history = prompt;
  text::StreamDecoder decoder(tokenizer);
  StopMatcher stops(options.stop);
  auto emit = [&](const std::string& s) {
    if (s.empty()) return true;
    res.text += s;
    return on_text ? on_text(s) : true;
  };

  auto t0 = Clock::now();
  std::vector<float> scales = options.lora_scales;
  SequenceInput in{&cache, prompt, false, scales};
  std::vector<float> logits = model.forward(pool, std::span(&in, 1));
  res.prompt_seconds = seconds_since(t0);

  auto t1 = Clock::now();
  bool stopped = false;
  for (;;) {
    if (options.max_tokens >= 0 && static_cast<int64_t>(res.tokens.size()) >= options.max_tokens) {
      res.reason = StopReason::MaxTokens;
      break;
    }
    const int32_t next = sampler.sample(logits, history);
    if (std::find(options.eos_ids.begin(), options.eos_ids.end(), next) != options.eos_ids.end()) {
      res.reason = StopReason::Eos;
      break;
    }
    res.tokens.push_back(next);
    history.push_back(next);
    if (!emit(stops.push(decoder.push(next), stopped))) {
      res.reason = StopReason::Callback;
      break;
    }
    if (stopped) {
      res.reason = StopReason::StopString;
      break;
    }
    if (cache.size() >= cache.capacity()) {
      res.reason = StopReason::ContextFull;
      break;
    }
    if (options.update_lora_scales) options.update_lora_scales(static_cast<int64_t>(res.tokens.size()), scales);
    SequenceInput step{&cache, std::span(&history.back(), 1), false, scales};
    logits = model.forward(pool, std::span(&step, 1));
  }
  if (!stopped) emit(stops.push(decoder.flush(), stopped) + (stopped ? "" : stops.flush()));
  res.decode_seconds = seconds_since(t1);
  return res;
}

}  // namespace graft::runtime
