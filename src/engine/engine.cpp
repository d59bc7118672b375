#include "graft/engine/engine.h"

#include "graft/core/error.h"
#include "graft/model/model_adapters.h"
#include "graft/runtime/kernels.h"

namespace graft::engine {

namespace {

std::vector<AdapterInfo> adapter_infos(const EngineOptions& o) {
  std::vector<AdapterInfo> infos;
  for (const auto& u : o.adapters) {
    AdapterInfo a;
    a.path = u.adapter->path;
    a.scale = o.init_without_apply ? 0.0f : u.strength;
    const auto& md = u.adapter->metadata;
    for (const char* k : {"task_name", "adapter.lora.task_name"})
      if (auto it = md.find(k); it != md.end()) a.task_name = it->second;
    for (const char* k : {"prompt_prefix", "adapter.lora.prompt_prefix"})
      if (auto it = md.find(k); it != md.end()) a.prompt_prefix = it->second;
    a.content_digest = content_digest(a.path);
    infos.push_back(std::move(a));
  }
  return infos;
}

model::LoadedModel load(const EngineOptions& o, runtime::ThreadPool& pool) {
  if (o.fuse && o.init_without_apply)
    fail_as(ErrorKind::kBadRequest,
            "--lora-init-without-apply and --lora-fuse exclude each other: fused adapters cannot start at scale 0");
  model::LoadOptions load = o.load;
  if (!load.parallel)
    load.parallel = [&pool](int64_t n, const std::function<void(int64_t, int64_t)>& fn) { pool.parallel_for(n, fn, 16); };
  if (o.fuse) load.fused_adapters.insert(load.fused_adapters.end(), o.adapters.begin(), o.adapters.end());
  model::LoadedModel m = model::load_model(o.model, load);
  runtime::prepare_weights(m.weights, pool);
  return m;
}

std::shared_ptr<const runtime::LoraSet> unfused_set(const EngineOptions& o, const model::LoadedModel& m,
                                                    runtime::ThreadPool& pool) {
  if (o.fuse || o.adapters.empty()) return nullptr;
  auto set = runtime::make_lora_set(m.config, *m.source, o.adapters, o.lora_dtype);
  runtime::prepare_lora_set(*set, m.weights, pool);  // DoRA row norms once, at load
  return set;
}

}  // namespace

void Engine::check(const EngineOptions& o) {
  if (o.fuse && o.init_without_apply)
    fail_as(ErrorKind::kBadRequest,
            "--lora-init-without-apply and --lora-fuse exclude each other: fused adapters cannot start at scale 0");
  const model::ModelSource src = model::open_model_source(o.model);
  std::vector<adapter::AdapterUse> fused = o.load.fused_adapters;
  if (o.fuse) fused.insert(fused.end(), o.adapters.begin(), o.adapters.end());
  if (!fused.empty())
    model::bind_model_adapters(src.config, *src.source, fused, model::AdapterPath::Fused, {}, true);
  if (!o.fuse && !o.adapters.empty()) runtime::make_lora_set(src.config, *src.source, o.adapters, o.lora_dtype);
}

Engine::Engine(EngineOptions options)
    : pool_(options.threads),
      model_(load(options, pool_)),
      registry_(adapter_infos(options), unfused_set(options, model_, pool_), options.fuse),
      transformer_(std::make_unique<runtime::Transformer>(model_.config, model_.weights,
                                                          registry_.shared_set())) {}

}  // namespace graft::engine
