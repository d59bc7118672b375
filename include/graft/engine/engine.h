// The engine: a loaded model, its thread pool, its forward pass and its adapter registry, and the
// batching step over sequences. `graft generate` drives it with one sequence, `graft serve` with
// many (gemma.cpp's GenerateBatch shape: the application owns the sequences, the engine the model).
#pragma once
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "graft/adapter/bind.h"
#include "graft/engine/adapter_registry.h"
#include "graft/engine/sequence.h"
#include "graft/engine/step.h"
#include "graft/model/loader.h"
#include "graft/runtime/kernels.h"
#include "graft/core/thread_pool.h"
#include "graft/runtime/transformer.h"

namespace graft::engine {

struct EngineOptions {
  std::string model;
  model::LoadOptions load;  // may already carry adapters fused for good (generate --adapter)
  int threads = 0;          // <= 0: all hardware threads
  // The registry's adapters; ids are positions. Each use's strength is its initial default scale.
  std::vector<adapter::AdapterUse> adapters;
  bool fuse = false;                // bake the registry's adapters into the weights at their scales
  bool init_without_apply = false;  // default scales start at 0 (the adapters stay loaded)
  runtime::LoraDType lora_dtype;     // unfused factors: as stored (nullopt), or F32 / BF16 / Q8_0
  // How quantized weights meet the activations (--activations; runtime/kernels.h): 8-bit (the
  // integer kernels) or unrounded F32 (the reference frameworks' numbers).
  compute::Activations activations = compute::Activations::Q8;
  // The registry's residency budget (unfused adapters' built terms; AdapterRegistry).
  ResidencyLimits residency;
  // Names of the startup adapters, by position (missing or empty: the last component of the path,
  // with "-<id>" appended when another adapter already has that name).
  std::vector<std::string> adapter_names;
};

class Engine {
 public:
  // Loads the model and the adapters; every adapter is bound and checked before any weight is
  // read (a refusal loads nothing).
  explicit Engine(EngineOptions options);

  // What the constructor checks before reading any weight, without loading: the model's config
  // and tensor index, and every adapter bound against it (a server runs this before it listens,
  // so a bad adapter is a startup error with nothing bound). Throws what loading would throw.
  static void check(const EngineOptions& options);

  model::LoadedModel& model() { return model_; }
  const model::LoadedModel& model() const { return model_; }
  const text::Tokenizer& tokenizer() const { return model_.tokenizer; }
  ThreadPool& pool() { return pool_; }
  runtime::Transformer& transformer() { return *transformer_; }
  AdapterRegistry& adapters() { return *registry_; }
  const AdapterRegistry& adapters() const { return *registry_; }
  // Builds one adapter's unfused terms against this model (binding and every check; DoRA row norms
  // computed here, off the batching thread): the registry's builder.
  std::shared_ptr<const runtime::LoraAdapter> build_adapter(std::shared_ptr<const adapter::WeightAdapter> adapter) const;

  // One batched forward pass over the sequences (see run_step).
  StepResult step(std::span<Sequence* const> sequences, int64_t token_budget) {
    return run_step(pool_, *transformer_, sequences, token_budget);
  }

 private:
  ThreadPool pool_;
  model::LoadedModel model_;
  runtime::LoraDType lora_dtype_;
  // The model's adapter bindings, made once, when the first adapter is built.
  mutable std::once_flag bindings_once_;
  mutable std::shared_ptr<const model::ModelBindings> bindings_;
  std::unique_ptr<AdapterRegistry> registry_;
  std::unique_ptr<runtime::Transformer> transformer_;
};

}  // namespace graft::engine
