// The Python package's model (graft.load): an engine, its chat template, and one generation or
// logits pass at a time. The options are `graft generate`'s own (cli/model_args.h), parsed from the
// same flags, so a Python keyword and a CLI option cannot drift apart. Every method that runs the
// engine is called with the GIL released (module.cpp) and serialized here.
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graft/cli/commands.h"
#include "graft/engine/engine.h"
#include "graft/engine/sequence.h"
#include "graft/text/chat_prompt.h"

namespace graft::python {

// A request's adapter scales by name ({} : the base model; unset: the adapters' default scales).
using LoraScales = std::optional<std::vector<std::pair<std::string, float>>>;

class Model;

// One generation, stepped by the caller: next() runs forward passes until a piece of text is final
// (or the generation ends) and returns it.
class Generation {
 public:
  Generation(std::shared_ptr<Model> model, std::vector<int32_t> prompt, engine::SequenceParams params);
  std::optional<std::string> next();  // nullopt once finished
  const std::vector<int32_t>& tokens() const { return seq_->generated(); }
  std::string text() const { return seq_->text(); }
  const char* finish_reason() const { return engine::stop_reason_name(seq_->reason()); }
  int64_t prompt_tokens() const { return static_cast<int64_t>(seq_->prompt().size()); }

 private:
  std::shared_ptr<Model> model_;
  runtime::KVCache cache_;
  std::unique_ptr<engine::Sequence> seq_;
};

class Model {
 public:
  // `args`: the flags `graft generate` takes for its model and adapters (-m PATH, --dtype, --lora,
  // --adapter, --ctx-size, ...); `names`: the --lora adapters' names by position ("" : the
  // directory's name). A bad flag is kBadRequest with CLI11's message.
  Model(const std::vector<std::string>& args, const std::vector<std::string>& names, bool verbose);

  const text::Tokenizer& tokenizer() const { return engine_->tokenizer(); }
  int64_t context() const { return ctx_; }
  int64_t vocab_size() const { return engine_->model().config.vocab_size; }
  std::vector<int32_t> eos_ids() const { return engine_->model().config.eos_token_ids; }
  std::string chat_render(const std::string& messages_json, bool add_generation_prompt) const;
  std::vector<int32_t> chat_encode(const std::string& messages_json, bool add_generation_prompt) const;

  // Logits for every position of `tokens`, rows [tokens, vocab], under the chosen adapters.
  std::vector<float> logits(const std::vector<int32_t>& tokens, const LoraScales& lora);
  // The adapters a generation or logits pass runs with, resident.
  std::vector<runtime::ScaledAdapter> adapters(const LoraScales& lora);

  int64_t load_lora(const std::string& name, const std::string& path, float scale);
  void unload_lora(const std::string& name);
  std::vector<engine::AdapterInfo> loras() const { return engine_->adapters().list(); }

 private:
  friend class Generation;
  std::string path_;  // the model, for messages
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<text::ChatPrompt> chat_;
  int64_t ctx_ = 0;
  DType cache_type_;
  std::mutex mu_;  // one forward pass at a time (the Transformer's buffers are shared)
};

}  // namespace graft::python
