// One sequence to completion: what `graft generate` and the reference tests run. It is the same
// Sequence and the same batching step the server runs, with a batch of one.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "graft/engine/sequence.h"
#include "graft/runtime/transformer.h"

namespace graft::engine {

struct GenerateOptions {
  int64_t max_tokens = 256;  // < 0: until EOS or the context is full
  runtime::SamplingParams sampling;
  std::vector<std::string> stop;       // stop strings (not included in the output)
  std::vector<int32_t> eos_ids;        // generation stops at any of these (not emitted)
  std::vector<runtime::ScaledAdapter> adapters;  // unfused adapters at their scales (none: the base)
  // Called before each decode step with the number of tokens generated so far; may change the
  // scales, which then apply from that step's token on (live scales, no reload).
  std::function<void(int64_t generated, std::vector<runtime::ScaledAdapter>& adapters)> update_scales;
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
// The whole prompt is evaluated in one pass.
GenerateResult generate(ThreadPool& pool, runtime::Transformer& model, const text::Tokenizer& tokenizer,
                        runtime::KVCache& cache, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const TextCallback& on_text = nullptr);

}  // namespace graft::engine
