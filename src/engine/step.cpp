#include "graft/engine/step.h"

namespace graft::engine {

StepResult run_step(ThreadPool& pool, runtime::Transformer& model, std::span<Sequence* const> sequences,
                    int64_t token_budget) {
  StepResult res;
  res.outputs.resize(sequences.size());
  std::vector<size_t> chosen;
  std::vector<runtime::SequenceInput> inputs;
  // Decoding sequences first (one token each, always), then prompts in order from what is left.
  int64_t budget = token_budget;
  std::vector<int64_t> counts(sequences.size(), 0);
  for (size_t i = 0; i < sequences.size(); ++i) {
    Sequence& s = *sequences[i];
    if (s.finished()) continue;
    if (s.pending(1).size() == 1 && s.completes(1) && !s.generated().empty()) {
      counts[i] = 1;
      --budget;
    }
  }
  for (size_t i = 0; i < sequences.size(); ++i) {
    Sequence& s = *sequences[i];
    if (s.finished() || counts[i] != 0) continue;
    if (budget <= 0) continue;
    counts[i] = static_cast<int64_t>(s.pending(budget).size());
    budget -= counts[i];
  }
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (counts[i] == 0) continue;
    Sequence& s = *sequences[i];
    runtime::SequenceInput in;
    in.cache = &s.cache();
    in.tokens = s.pending(counts[i]);
    in.adapters = s.params().adapters;
    in.want_logits = s.completes(counts[i]);
    if (s.params().embedding) in.hidden = &s.hidden_rows();  // rows instead of logits
    inputs.push_back(in);
    chosen.push_back(i);
    if (s.generated().empty()) res.prompt_tokens += counts[i];
    else res.decode_tokens += counts[i];
  }
  if (inputs.empty()) return res;
  const std::vector<float> logits = model.forward(pool, inputs);
  const int64_t vocab = model.config().vocab_size;
  int64_t row = 0;
  for (size_t k = 0; k < chosen.size(); ++k) {
    std::span<const float> lrow;
    if (inputs[k].want_logits && !inputs[k].hidden) {
      lrow = std::span<const float>(logits.data() + row * vocab, static_cast<size_t>(vocab));
      ++row;
    }
    res.outputs[chosen[k]] = sequences[chosen[k]]->advance(counts[chosen[k]], lrow);
  }
  return res;
}

}  // namespace graft::engine
