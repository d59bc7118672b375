#include "graft/engine/step.h"

#include <algorithm>
#include <map>

namespace graft::engine {

namespace {

// The pass's adapter set when sequences bring their own: every distinct adapter of the batch once,
// in `order`, and each sequence's scales re-indexed into it. A sequence with only lora_scales (into
// the engine's set) takes adapter i of that set at order i.
struct MergedAdapters {
  runtime::LoraSet set;
  std::vector<std::vector<float>> scales;  // per chosen sequence
};

MergedAdapters merge_adapters(const runtime::LoraSet& engine_set, std::span<Sequence* const> sequences,
                              const std::vector<size_t>& chosen) {
  std::vector<std::vector<SequenceAdapter>> own;  // per chosen sequence, its adapters at non-zero scale
  for (size_t i : chosen) {
    const SequenceParams& p = sequences[i]->params();
    std::vector<SequenceAdapter> a = p.adapters;
    if (a.empty())
      for (size_t k = 0; k < p.lora_scales.size(); ++k)
        a.push_back({engine_set.adapters[k], p.lora_scales[k], static_cast<int64_t>(k)});
    std::erase_if(a, [](const SequenceAdapter& x) { return x.scale == 0.0f; });
    own.push_back(std::move(a));
  }
  // Distinct adapters keyed by (order, identity), so the map's order is the pass's order.
  std::map<std::pair<int64_t, const runtime::LoraAdapter*>, std::shared_ptr<const runtime::LoraAdapter>> distinct;
  for (const auto& a : own)
    for (const auto& x : a) distinct.emplace(std::make_pair(x.order, x.terms.get()), x.terms);
  MergedAdapters m;
  std::map<std::pair<int64_t, const runtime::LoraAdapter*>, size_t> index;
  for (const auto& [key, terms] : distinct) {
    index[key] = m.set.adapters.size();
    m.set.adapters.push_back(terms);
  }
  for (const auto& a : own) {
    std::vector<float> sc(m.set.size(), 0.0f);
    for (const auto& x : a) sc[index.at({x.order, x.terms.get()})] = x.scale;
    m.scales.push_back(std::move(sc));
  }
  return m;
}

}  // namespace

StepResult run_step(ThreadPool& pool, runtime::Transformer& model, const runtime::LoraSet& loras,
                    std::span<Sequence* const> sequences, int64_t token_budget) {
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
    in.lora_scales = s.params().lora_scales;
    in.want_logits = s.completes(counts[i]);
    if (s.params().embedding) in.hidden = &s.hidden_rows();  // rows instead of logits
    inputs.push_back(in);
    chosen.push_back(i);
    if (s.generated().empty()) res.prompt_tokens += counts[i];
    else res.decode_tokens += counts[i];
  }
  if (inputs.empty()) return res;
  const bool own = std::any_of(chosen.begin(), chosen.end(),
                               [&](size_t i) { return !sequences[i]->params().adapters.empty(); });
  MergedAdapters merged;
  if (own) {
    merged = merge_adapters(loras, sequences, chosen);
    for (size_t k = 0; k < inputs.size(); ++k) inputs[k].lora_scales = merged.scales[k];
  }
  const std::vector<float> logits = model.forward(pool, inputs, own ? merged.set : loras);
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
