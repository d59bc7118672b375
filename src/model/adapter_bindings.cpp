#include "graft/model/adapter_bindings.h"

#include "graft/model/family.h"

namespace graft::model {

namespace {
struct FusedProjection {
  const char* external;  // module suffix after "model.layers.{i}."
  std::vector<LayerTensor> parts;
};
const std::vector<FusedProjection>& fused_projections() {
  static const std::vector<FusedProjection> kFused = {
      {"self_attn.qkv_proj", {LayerTensor::Q, LayerTensor::K, LayerTensor::V}},
      {"mlp.gate_up_proj", {LayerTensor::Gate, LayerTensor::Up}},
  };
  return kFused;
}
}  // namespace

adapter::WeightAdapterBindings model_adapter_bindings(const ModelConfig& config, const io::TensorSource& source) {
  adapter::WeightAdapterBindings b = adapter::bindings_for_source(source);
  for (int64_t i = 0; i < config.num_layers; ++i)
    for (const auto& f : fused_projections()) {
      std::vector<std::string> parts;
      for (LayerTensor r : f.parts) parts.push_back(hf_layer_tensor_name(i, r));
      b.add_fused_split("model.layers." + std::to_string(i) + "." + f.external, parts);
    }
  return b;
}

}  // namespace graft::model
