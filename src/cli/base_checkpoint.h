// Opening the base that adapters bind to: a Llama-family model (HF directory or GGUF, with its
// fused-projection bindings), or any other safetensors checkpoint (directory or single file),
// bound by its own tensor names.
#pragma once
#include <memory>
#include <string>

#include "graft/adapter/bindings.h"
#include "graft/io/tensor_source.h"

namespace graft::cli {

struct BaseCheckpoint {
  std::string path;
  std::string kind;  // "llama-family (<model_type>)" | "safetensors checkpoint"
  std::shared_ptr<const io::TensorSource> source;
  adapter::WeightAdapterBindings bindings;
  bool is_directory = false;
};

BaseCheckpoint open_base_checkpoint(const std::string& path);

}  // namespace graft::cli
