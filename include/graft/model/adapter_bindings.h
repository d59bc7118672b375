// A Llama-family model's adapter bindings, as data: every tensor of the checkpoint under its own
// name (and the generated aliases), plus the fused projections other trainers use: an adapter on
// "qkv_proj" splits into q/k/v by output rows, one on "gate_up_proj" into gate/up.
#pragma once
#include "graft/adapter/bindings.h"
#include "graft/io/tensor_source.h"
#include "graft/model/config.h"

namespace graft::model {

adapter::WeightAdapterBindings model_adapter_bindings(const ModelConfig& config, const io::TensorSource& source);

}  // namespace graft::model
