// Writing an mlx-lm affine-quantized checkpoint from a dense Hugging Face one (graft quantize):
// the embedding, every decoder projection and an untied lm_head whose input size is a multiple of
// the group size become `<m>.weight` (uint32 codes) + `.scales` + `.biases` in the weight's dtype,
// quantized exactly as mlx.core.quantize does on the CPU (core/affine_quant.h); everything else is
// copied. config.json gains the "quantization" block (mirrored as "quantization_config"), so
// mlx-lm and graft load the result.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "graft/core/dtype.h"

namespace graft::model {

struct QuantizeOptions {
  int bits = 4;
  int group_size = 64;
  std::optional<DType> dtype;  // convert float weights (and so scales/biases) first; unset: as stored
  std::function<void(int64_t done, int64_t total)> progress;
};

struct QuantizeResult {
  int64_t quantized_modules = 0;
  int64_t kept_tensors = 0;  // written unquantized (norms, biases, widths not divisible by the group)
  uint64_t bytes = 0;
};

// model_dir: a dense (not already quantized) Llama-family Hugging Face directory. out_dir must not
// exist or be empty; on failure nothing is left behind.
QuantizeResult quantize_checkpoint(const std::string& model_dir, const std::string& out_dir, const QuantizeOptions& options);

}  // namespace graft::model
