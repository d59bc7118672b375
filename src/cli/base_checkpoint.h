// Opening the base that adapters bind to: a Llama-family model (HF directory or GGUF, with its
// fused-projection bindings), or any other safetensors checkpoint (directory or single file),
// bound by its own tensor names.
#pragma once
#include <memory>
#include <string>

#include "graft/adapter/bind.h"
#include "graft/adapter/bindings.h"
#include "graft/io/tensor_source.h"
#include "graft/model/config.h"

namespace graft::cli {

struct BaseCheckpoint {
  std::string path;
  std::string kind;  // "llama-family (<model_type>)" | "safetensors checkpoint"
  std::shared_ptr<const io::TensorSource> source;
  adapter::WeightAdapterBindings bindings;
  bool is_directory = false;
  std::optional<model::ModelConfig> config;  // Llama-family checkpoints
  std::vector<std::string> quantized_weights;  // mlx-quantized modules' weights (logical view)
};

BaseCheckpoint open_base_checkpoint(const std::string& path);

// Binds adapters to the base for fusing: a Llama-family checkpoint under the model rules (tied
// embedding/head, quantized weights refused unless allow_quantized), any other by tensor names.
std::shared_ptr<adapter::WeightAdapterPlan> bind_for_fuse(const BaseCheckpoint& base,
                                                          const std::vector<adapter::AdapterUse>& adapters,
                                                          bool allow_quantized = false);

}  // namespace graft::cli
