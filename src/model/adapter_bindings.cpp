#include "graft/model/adapter_bindings.h"

#include <algorithm>

#include "graft/model/family.h"

namespace graft::model {

// An adapter trained on a fused projection (Phi-3's qkv_proj / gate_up_proj, on any model whose
// weights are separate or, for a fused family, split at load) lands on the parts by output rows.
adapter::WeightAdapterBindings model_adapter_bindings(const ModelConfig& config, const io::TensorSource& source) {
  adapter::WeightAdapterBindings b = adapter::bindings_for_source(source);
  for (int64_t i = 0; i < config.num_layers; ++i)
    for (const auto& f : fused_projection_specs()) {
      std::vector<std::string> parts;
      for (LayerTensor r : f.parts) parts.push_back(hf_layer_tensor_name(i, r));
      // A sparse (mixture-of-experts) layer has no gate/up to split onto.
      if (!std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return source.has(p); })) continue;
      std::string module = hf_fused_tensor_name(i, f);
      module.resize(module.size() - 7);  // ".weight"
      b.add_fused_split(module, parts);
    }
  return b;
}

}  // namespace graft::model
