// The generation loop for one sequence: prefill the prompt as one matrix pass, then decode one
// token at a time, streaming text as complete UTF-8, until EOS, a stop string, max_tokens or the
// context size.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "graft/runtime/sampler.h"
#include "graft/runtime/transformer.h"
#include "graft/text/tokenizer.h"

namespace graft::runtime {

enum class StopReason { Eos, StopString, MaxTokens, ContextFull, Callback };
const char* stop_reason_name(StopReason r);

struct GenerateOptions {
  int64_t max_tokens = 256;  // < 0: until EOS or the context is full
  SamplingParams sampling;
  std::vector<std::string> stop;       // stop strings (not included in the output)
  std::vector<int32_t> eos_ids;        // generation stops at any of these (not emitted)
  std::vector<float> lora_scales;      // one per unfused adapter of the model (empty: all 0)
  // Called before each decode step with the number of tokens generated so far; may change the
  // scales, which then apply from that step's token on (live scales, no reload).
  std::function<void(int64_t generated, std::vector<float>& scales)> update_lora_scales;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (the EOS that stopped it excluded)
  std::string text;             // the text streamed, without a matched stop string
  StopReason reason = StopReason::MaxTokens;
  int64_t prompt_tokens = 0;
  double prompt_seconds = 0, decode_seconds = 0;
};

// on_text receives each piece of text as it becomes final; returning false stops generation.
using TextCallback = std::function<bool(std::string_view)>;

// The prompt must fit the cache with room for one generated token; else an error before any work.
GenerateResult generate(ThreadPool& pool, Transformer& model, const text::Tokenizer& tokenizer, KVCache& cache,
                        const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const TextCallback& on_text = nullptr);

}  // namespace graft::runtime
