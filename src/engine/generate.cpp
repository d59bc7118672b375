#include "graft/engine/generate.h"

#include "graft/engine/step.h"

namespace graft::engine {

GenerateResult generate(ThreadPool& pool, runtime::Transformer& model, const text::Tokenizer& tokenizer,
                        runtime::KVCache& cache, const std::vector<int32_t>& prompt, const GenerateOptions& options,
                        const TextCallback& on_text) {
  SequenceParams params;
  params.max_tokens = options.max_tokens;
  params.sampling = options.sampling;
  params.stop = options.stop;
  params.eos_ids = options.eos_ids;
  params.adapters = options.adapters;
  Sequence seq(tokenizer, cache, prompt, params);
  Sequence* batch[] = {&seq};
  const int64_t whole_prompt = static_cast<int64_t>(prompt.size());
  while (!seq.finished()) {
    if (options.update_scales && !seq.generated().empty())
      options.update_scales(static_cast<int64_t>(seq.generated().size()), seq.adapters());
    const StepResult r = run_step(pool, model, batch, whole_prompt);
    const StepOutput& out = r.outputs[0];
    if (!out.text.empty() && on_text && !on_text(out.text)) seq.cancel();
  }
  GenerateResult res;
  res.tokens = seq.generated();
  res.text = seq.text();
  res.reason = seq.reason();
  res.prompt_tokens = whole_prompt;
  res.prompt_seconds = seq.prompt_seconds();
  res.decode_seconds = seq.decode_seconds();
  return res;
}

}  // namespace graft::engine
