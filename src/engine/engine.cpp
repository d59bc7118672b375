#include "graft/engine/engine.h"

#include <filesystem>
#include <memory>
#include <thread>

#include "graft/core/error.h"
#include "graft/model/model_adapters.h"
#include "graft/runtime/kernels.h"

namespace graft::engine {

namespace {

// The name of startup adapter i: given, or the path's last component (made unique with "-<id>").
std::string adapter_name(const EngineOptions& o, size_t i, const std::vector<std::string>& taken) {
  if (i < o.adapter_names.size() && !o.adapter_names[i].empty()) return o.adapter_names[i];
  std::string name = std::filesystem::path(o.adapters[i].adapter->path).lexically_normal().filename().string();
  if (name.empty()) name = std::filesystem::path(o.adapters[i].adapter->path).parent_path().filename().string();
  if (name.empty() || std::find(taken.begin(), taken.end(), name) != taken.end()) name += "-" + std::to_string(i);
  return name;
}

std::vector<AdapterInfo> adapter_infos(const EngineOptions& o, bool digests = true) {
  std::vector<AdapterInfo> infos;
  std::vector<std::string> names;
  for (const auto& u : o.adapters) {
    AdapterInfo a;
    a.name = adapter_name(o, infos.size(), names);
    names.push_back(a.name);
    a.path = u.adapter->path;
    a.scale = o.init_without_apply ? 0.0f : u.strength;
    read_adapter_labels(*u.adapter, a);
    if (digests) a.content_digest = content_digest(a.path);
    infos.push_back(std::move(a));
  }
  return infos;
}

// Loading runs on every core the machine has, whatever the generation's thread count (-t): the
// checks and the copies into the kernels' layouts are done once, and a core left idle during them
// only delays the first token (ik_llama.cpp's -rtr repacks on a thread count of its own too). The
// copies are the same bytes on any number of threads.
model::LoadedModel load(const EngineOptions& o, ThreadPool& pool) {
  if (o.fuse && o.init_without_apply)
    fail_as(ErrorKind::kBadRequest,
            "--lora-init-without-apply and --lora-fuse exclude each other: fused adapters cannot start at scale 0");
  std::unique_ptr<ThreadPool> every_core;
  if (static_cast<int>(std::thread::hardware_concurrency()) > pool.size()) every_core = std::make_unique<ThreadPool>(0);
  ThreadPool& loading = every_core ? *every_core : pool;
  model::LoadOptions load = o.load;
  if (!load.pool) load.pool = &loading;
  if (o.fuse) load.fused_adapters.insert(load.fused_adapters.end(), o.adapters.begin(), o.adapters.end());
  model::LoadedModel m = model::load_model(o.model, load);
  runtime::prepare_weights(m.weights, loading, o.activations);
  return m;
}

std::unique_ptr<AdapterRegistry> make_registry(const EngineOptions& o, const Engine& engine) {
  if (o.fuse) return std::make_unique<AdapterRegistry>(adapter_infos(o));
  auto r = std::make_unique<AdapterRegistry>(
      [&engine](std::shared_ptr<const adapter::WeightAdapter> a) { return engine.build_adapter(std::move(a)); },
      o.residency);
  // One at a time, each within the budget: a thousand startup adapters never all sit in memory.
  const std::vector<AdapterInfo> infos = adapter_infos(o, false);  // add() takes the digests
  for (size_t i = 0; i < o.adapters.size(); ++i) r->add(infos[i].name, o.adapters[i].adapter, infos[i].scale);
  return r;
}

void check_options(const EngineOptions& o) {
  if (o.fuse && o.init_without_apply)
    fail_as(ErrorKind::kBadRequest,
            "--lora-init-without-apply and --lora-fuse exclude each other: fused adapters cannot start at scale 0");
  std::vector<std::string> names;
  for (size_t i = 0; i < o.adapters.size(); ++i) {
    const std::string n = adapter_name(o, i, names);
    if (std::find(names.begin(), names.end(), n) != names.end())
      fail_as(ErrorKind::kBadRequest, "two adapters are named '", n, "'; every adapter name must be unique");
    names.push_back(n);
  }
}

}  // namespace

void Engine::check(const EngineOptions& o) {
  check_options(o);
  const model::ModelSource src = model::open_model_source(o.model);
  const auto bindings = model::model_bindings(src.config, *src.source);  // once, for every adapter
  std::vector<adapter::AdapterUse> fused = o.load.fused_adapters;
  if (o.fuse) fused.insert(fused.end(), o.adapters.begin(), o.adapters.end());
  if (!fused.empty())
    model::bind_model_adapters(src.config, *src.source, *bindings, fused, model::AdapterPath::Fused, {}, true);
  // Bound and checked, not built: the constructor builds each adapter's terms once.
  if (!o.fuse)
    for (const auto& u : o.adapters) {
      const auto plan = runtime::bind_lora_adapter(src.config, *src.source, *bindings, u.adapter);
      runtime::check_lora_plan(*plan, *bindings, u.adapter->path, o.lora_dtype);
    }
}

Engine::Engine(EngineOptions options)
    : pool_(options.threads),
      model_((check_options(options), load(options, pool_))),
      lora_dtype_(options.lora_dtype),
      registry_(make_registry(options, *this)),
      transformer_(std::make_unique<runtime::Transformer>(model_.config, model_.weights)) {}

std::shared_ptr<const runtime::LoraAdapter> Engine::build_adapter(
    std::shared_ptr<const adapter::WeightAdapter> adapter) const {
  std::call_once(bindings_once_, [&] { bindings_ = model::model_bindings(model_.config, *model_.source); });
  auto terms = runtime::build_lora_adapter(model_.config, *model_.source, *bindings_, std::move(adapter), lora_dtype_);
  ThreadPool one(1);  // the engine's pool belongs to the batching thread
  runtime::prepare_lora_adapter(*terms, model_.weights, one);  // DoRA row norms now, not in a forward pass
  return terms;
}

}  // namespace graft::engine
