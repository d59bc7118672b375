// Loading a model: a Hugging Face directory (config.json, safetensors, tokenizer files) or a single
// GGUF file, into one normalized form: config, weights, tokenizer, chat template.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "graft/adapter/bind.h"
#include "graft/adapter/merge.h"
#include "graft/io/gguf.h"
#include "graft/io/tensor_source.h"
#include "graft/model/config.h"
#include "graft/model/quantized_source.h"
#include "graft/model/weights.h"
#include "graft/text/tokenizer.h"

namespace graft::model {

struct LoadedModel {
  std::string path;
  std::string format;  // "safetensors" | "gguf"
  ModelConfig config;
  // HF tensor names, whatever the file format; an mlx-lm quantized checkpoint's quantized weights
  // appear dequantized at their logical shapes (what adapters bind against).
  std::shared_ptr<const io::TensorSource> source;
  std::shared_ptr<const QuantizedCheckpointSource> quantized;  // set for mlx-lm quantized checkpoints
  std::shared_ptr<const adapter::WeightAdapterPlan> fused;     // the adapters fused at load, if any
  // How the matrices the fused adapters changed are held, by format: {"Q8_0", 210} when requantized
  // (a quantized base), {"F32", 210} when kept dense (LoadOptions::fuse_dense).
  std::map<std::string, int64_t> fused_formats;
  ModelWeights weights;
  text::Tokenizer tokenizer;
  std::optional<std::string> chat_template;
  std::string chat_template_origin;  // where it came from, for error messages ("'dir/chat_template.jinja'")
};

struct LoadOptions {
  LoadProgress progress;
  std::optional<DType> weight_dtype;  // convert matrices at load (e.g. BF16 to halve bandwidth)
  std::optional<QuantSpec> quantize;  // quantize dense matrices at load (mlx affine), after fusing
  bool copy_weights = false;          // --no-mmap: weights in process memory, not the file mapping
  // Adapters fused into the weights at load through the overlay source: each adapted tensor is
  // materialized once (base + updates, in the base dtype) as the loader reads it; nothing else is
  // copied. Every adapter is bound and checked before any weight is read.
  std::vector<adapter::AdapterUse> fused_adapters;
  adapter::MergePolicy merge_policy = adapter::MergePolicy::DeltaF32;
  // A matrix of a quantized base that an adapter is fused into is merged in F32 and quantized again
  // at 8 bits (GGUF: Q8_0; mlx: 8-bit affine, its own group size), not to the base's own 4 or 5
  // bits: a LoRA's change to one weight is far below a 4-bit step, so requantizing there rounds the
  // adapter away (measured: docs/ADAPTERS.md "Fusing into a quantized base"). fuse_dense keeps such
  // matrices dense instead (F32, or weight_dtype): the adapter exactly, reading 4 bytes a weight.
  bool fuse_dense = false;
  ThreadPool* pool = nullptr;  // merges' rows and the NaN / inf checks in parallel (serial when null)
};

// A source and config without weights or tokenizer, for tools that only inspect.
struct ModelSource {
  std::string format;
  ModelConfig config;
  std::shared_ptr<io::TensorSource> source;
  std::shared_ptr<io::GgufFile> gguf;  // the file itself when format == "gguf" (tokenizer metadata)
};
ModelSource open_model_source(const std::string& path);

LoadedModel load_model(const std::string& path, const LoadOptions& options = {});

// GGUF: the tensors under Hugging Face names (q/k rows un-permuted, block types dequantized to
// F32) and the config from metadata. Declared here for tests.
ModelSource open_gguf_model_source(const std::string& path);

}  // namespace graft::model
