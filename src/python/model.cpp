#include "python/model.h"

#include <algorithm>

#include "graft/core/error.h"
#include "graft/engine/step.h"
#include "graft/runtime/kv_cache.h"

namespace graft::python {

namespace {

nlohmann::ordered_json parse_messages(const std::string& messages_json) {
  try {
    return nlohmann::ordered_json::parse(messages_json);
  } catch (const nlohmann::json::exception& e) {
    fail_as(ErrorKind::kBadRequest, "messages: not JSON (", e.what(), ")");
  }
}

}  // namespace

Model::Model(const std::vector<std::string>& args, const std::vector<std::string>& names, bool verbose) {
  const cli::ModelFlags flags(args);
  engine::EngineOptions o = flags.engine_options();
  o.adapter_names = names;
  engine_ = std::make_unique<engine::Engine>(o);
  if (verbose) flags.report(*engine_, o);
  const model::LoadedModel& m = engine_->model();
  if (m.chat_template) chat_ = std::make_unique<text::ChatPrompt>(tokenizer(), *m.chat_template, m.chat_template_origin);
  path_ = flags.model();
  ctx_ = flags.context(m.config);
  cache_type_ = flags.cache_type();
}

std::string Model::chat_render(const std::string& messages_json, bool add_generation_prompt) const {
  if (!chat_) fail_as(ErrorKind::kBadRequest, "model '", path_, "' has no chat template; pass a plain prompt");
  return chat_->render(parse_messages(messages_json), add_generation_prompt);
}

std::vector<int32_t> Model::chat_encode(const std::string& messages_json, bool add_generation_prompt) const {
  if (!chat_) fail_as(ErrorKind::kBadRequest, "model '", path_, "' has no chat template; pass a plain prompt");
  return chat_->encode(parse_messages(messages_json), add_generation_prompt);
}

std::vector<runtime::ScaledAdapter> Model::adapters(const LoraScales& lora) {
  engine::AdapterRegistry& reg = engine_->adapters();
  std::optional<std::vector<engine::ScaleEntry>> entries;
  if (lora) {
    entries.emplace();
    for (const auto& [name, scale] : *lora) {
      const auto id = reg.find(name);
      if (!id) fail_as(ErrorKind::kBadRequest, "lora: no adapter named '", name, "' is loaded");
      entries->push_back({*id, scale});
    }
  }
  engine::Selection chosen = reg.select(std::nullopt, entries);
  reg.make_resident(chosen);
  return chosen.adapters();
}

std::vector<float> Model::logits(const std::vector<int32_t>& tokens, const LoraScales& lora) {
  if (tokens.empty()) fail_as(ErrorKind::kBadRequest, "logits: no tokens");
  std::lock_guard<std::mutex> lock(mu_);
  const auto scaled = adapters(lora);
  runtime::KVCache cache(engine_->model().config, static_cast<int64_t>(tokens.size()), cache_type_);
  runtime::SequenceInput in{.cache = &cache, .tokens = tokens, .all_logits = true, .adapters = scaled};
  return engine_->transformer().forward(engine_->pool(), std::span<const runtime::SequenceInput>(&in, 1));
}

int64_t Model::load_lora(const std::string& name, const std::string& path, float scale) {
  std::lock_guard<std::mutex> lock(mu_);
  return engine_->adapters().add(name, path, scale);
}

void Model::unload_lora(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!engine_->adapters().remove(name)) fail_as(ErrorKind::kBadRequest, "unload_lora: no adapter named '", name, "' is loaded");
}

Generation::Generation(std::shared_ptr<Model> model, std::vector<int32_t> prompt, engine::SequenceParams params)
    : model_(std::move(model)),
      // Room for the prompt and every token asked for, within the model's context.
      cache_(model_->engine_->model().config,
             params.max_tokens < 0 ? model_->ctx_
                                   : std::min<int64_t>(model_->ctx_, static_cast<int64_t>(prompt.size()) + params.max_tokens + 1),
             model_->cache_type_) {
  seq_ = std::make_unique<engine::Sequence>(model_->tokenizer(), cache_, std::move(prompt), std::move(params));
}

std::optional<std::string> Generation::next() {
  std::lock_guard<std::mutex> lock(model_->mu_);
  engine::Sequence* batch[] = {seq_.get()};
  while (!seq_->finished()) {
    const engine::StepResult r = model_->engine_->step(batch, static_cast<int64_t>(seq_->prompt().size()));
    if (!r.outputs[0].text.empty()) return r.outputs[0].text;
  }
  return std::nullopt;
}

}  // namespace graft::python
