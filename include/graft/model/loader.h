// Loading a model: a Hugging Face directory (config.json, safetensors, tokenizer files) or a single
// GGUF file, into one normalized form: config, weights, tokenizer, chat template.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "graft/io/gguf.h"
#include "graft/io/tensor_source.h"
#include "graft/model/config.h"
#include "graft/model/weights.h"
#include "graft/text/tokenizer.h"

namespace graft::model {

struct LoadedModel {
  std::string path;
  std::string format;  // "safetensors" | "gguf"
  ModelConfig config;
  std::shared_ptr<io::TensorSource> source;  // HF tensor names, whatever the file format
  ModelWeights weights;
  text::Tokenizer tokenizer;
  std::optional<std::string> chat_template;
};

struct LoadOptions {
  LoadProgress progress;
  std::optional<DType> weight_dtype;  // convert matrices at load (e.g. BF16 to halve bandwidth)
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
