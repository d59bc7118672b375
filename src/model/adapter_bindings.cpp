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
      for (Role r : f.parts) parts.push_back(hf_layer_tensor_name(i, r));
      // A sparse (mixture-of-experts) layer has no gate/up to split onto.
      if (!std::all_of(parts.begin(), parts.end(), [&](const std::string& p) { return source.has(p); })) continue;
      std::string module = hf_fused_tensor_name(i, f);
      module.resize(module.size() - 7);  // ".weight"
      b.add_fused_split(module, parts);
    }
  // transformers 5 holds a sparse layer's experts as 3-D parameters (<block>.experts.gate_up_proj
  // [E, 2 * width, hidden], .down_proj [E, hidden, width]); PEFT target_parameters adapters on them
  // arrive cut per expert (adapter/import_peft_params.cpp) as <block>.experts.<e>.gate_up_proj,
  // split by rows onto the expert's gate and up, and <block>.experts.<e>.down_proj. (SwitchGLU's
  // projection names are mlx-lm's, the same for every family.)
  const MoeLayout& moe = family(config.model_type).moe;
  if (moe.present() && moe.v5_block)
    for (int64_t i = 0; i < config.num_layers; ++i) {
      if (!config.layer_is_sparse(i)) continue;
      for (int64_t e = 0; e < config.num_experts; ++e) {
        const std::string gate = hf_expert_tensor_name(config, i, e, Role::Gate),
                          up = hf_expert_tensor_name(config, i, e, Role::Up),
                          down = hf_expert_tensor_name(config, i, e, Role::Down);
        if (!source.has(gate) || !source.has(up) || !source.has(down)) continue;
        const std::string stem =
            "model.layers." + std::to_string(i) + "." + moe.v5_block + ".experts." + std::to_string(e) + ".";
        b.add_fused_split(stem + moe.v5_gate_up, {gate, up});
        if (stem + moe.v5_down + ".weight" != down) b.add_fused_split(stem + moe.v5_down, {down});
        // mlx-lm LoRASwitchLinear pairs, cut per expert as <switch>.<e>.<proj> (adapter/import_mlx.cpp).
        if (moe.mlx_switch) {
          const std::string sw = "model.layers." + std::to_string(i) + "." + moe.mlx_switch + "." + std::to_string(e) + ".";
          for (const auto& [proj, tensor] : {std::pair{"gate_proj", gate}, {"up_proj", up}, {"down_proj", down}})
            if (sw + proj + ".weight" != tensor) b.add_fused_split(sw + proj, {tensor});
        }
      }
    }
  return b;
}

}  // namespace graft::model
