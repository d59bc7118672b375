// Fused projections (Phi-3's qkv_proj and gate_up_proj) as table data on the way in and out: a
// source that shows a fused checkpoint under Llama's per-projection names (each part a zero-copy
// row range of the stored tensor through io/sliced_source.h, any dtype, GGUF blocks included:
// every row is whole blocks), and one that joins the parts again for writing a checkpoint in the
// family's own layout (`graft fuse`).
// The forward pass, adapter bindings and quantization code then never see the fusion.
#pragma once
#include <memory>

#include "graft/io/tensor_source.h"
#include "graft/model/config.h"

namespace graft::model {

// The parts of every fused tensor of `source` (names from model/family.h's fused_projection_specs)
// as separate tensors; a fused tensor whose rows differ from its parts' (from the config) is
// refused naming it. Returns `source` itself when the config has no fused projections.
std::shared_ptr<io::TensorSource> split_fused_projections(std::shared_ptr<io::TensorSource> source,
                                                          const ModelConfig& config);

// The inverse for writing: every complete set of parts is shown as the fused tensor (rows
// concatenated in the family's order, one copy at read); the parts must share a dtype.
std::shared_ptr<const io::TensorSource> join_fused_projections(std::shared_ptr<const io::TensorSource> source,
                                                               const ModelConfig& config);

}  // namespace graft::model
