// The batching step: every active sequence's next tokens go through one forward pass. Decoding
// sequences add one token each; sequences still evaluating their prompt share the rest of the
// token budget in order (chunked prefill, so a long prompt does not stall the others' decoding).
// Sequences with different adapters and scales share the pass: each carries its own (adapter, scale)
// pairs, and the forward pass groups rows by adapter.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "graft/engine/sequence.h"
#include "graft/runtime/lora.h"
#include "graft/core/thread_pool.h"
#include "graft/runtime/transformer.h"

namespace graft::engine {

struct StepResult {
  int64_t prompt_tokens = 0;   // prompt tokens evaluated in this pass
  int64_t decode_tokens = 0;   // generated tokens evaluated in this pass (one per decoding sequence)
  // Per sequence, in the order given; a sequence left out of this pass (budget spent) or
  // finished gets an empty output.
  std::vector<StepOutput> outputs;
};

// Runs one pass over the unfinished sequences. `token_budget` caps the rows of the pass (at least
// one row per decoding sequence is always granted). Throws before any cache changes if the pass
// is invalid (see Transformer::forward).
StepResult run_step(ThreadPool& pool, runtime::Transformer& model, std::span<Sequence* const> sequences,
                    int64_t token_budget);

}  // namespace graft::engine
