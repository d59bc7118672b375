// mlx-lm's stacked experts as the per-expert tensors the rest of graft reads. mlx-lm saves a MoE
// model's experts as one [E, out, in] tensor per SwiGLU projection (<switch>.gate_proj.weight,
// and for an affine-quantized model also .scales / .biases, [E, out, groups]); this source shows
// expert e of each as the Hub's per-expert name (model/family.h's hf_expert_tensor_name, with the
// same .scales / .biases suffixes), a zero-copy slice of the stored tensor (io/sliced_source.h),
// and hides the stacked tensors. Quantization, weight loading and adapter bindings then never see
// the stacking.
#pragma once
#include <memory>

#include "graft/io/tensor_source.h"
#include "graft/model/config.h"

namespace graft::model {

// `source` itself when the family has no mlx-lm switch layout or the checkpoint holds none. A
// stacked tensor whose shape is not [num_experts, ...] is refused naming it; so is a checkpoint
// holding both a layer's stacked and its per-expert tensors.
std::shared_ptr<io::TensorSource> unstack_mlx_experts(std::shared_ptr<io::TensorSource> source,
                                                      const ModelConfig& config);

// A quantization config's per-module overrides under mlx-lm's stacked names
// (model.layers.L.<switch>.<proj>) repeated under each expert's stem, as unstack_mlx_experts names them.
void unstack_quantization_overrides(QuantizationConfig& q, const ModelConfig& config);

}  // namespace graft::model
