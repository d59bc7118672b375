#include "graft/model/stacked_experts.h"

#include <map>

#include "graft/core/error.h"
#include "graft/io/sliced_source.h"
#include "graft/model/family.h"

namespace graft::model {

namespace {

// mlx-lm's SwitchGLU names its projections the same way in every family.
constexpr const char* kSwitchProj[] = {"gate_proj", "up_proj", "down_proj"};
constexpr Role kRoles[] = {Role::Gate, Role::Up, Role::Down};
constexpr const char* kSuffixes[] = {".weight", ".scales", ".biases"};

std::string stacked_stem(const ModelConfig& c, int64_t layer, int part) {
  return "model.layers." + std::to_string(layer) + "." + family(c.model_type).moe.mlx_switch + "." + kSwitchProj[part];
}

std::string expert_stem(const ModelConfig& c, int64_t layer, int64_t expert, int part) {
  std::string n = hf_expert_tensor_name(c, layer, expert, kRoles[part]);
  return n.substr(0, n.size() - 7);  // ".weight"
}

}  // namespace

std::shared_ptr<io::TensorSource> unstack_mlx_experts(std::shared_ptr<io::TensorSource> source,
                                                      const ModelConfig& c) {
  const MoeLayout& moe = family(c.model_type).moe;
  if (!moe.present() || !moe.mlx_switch) return source;
  std::map<std::string, io::TensorSlice> slices;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.layer_is_sparse(l)) continue;
    for (int part = 0; part < 3; ++part)
      for (const char* suffix : kSuffixes) {
        const std::string name = stacked_stem(c, l, part) + suffix;
        auto info = source->info(name);
        if (!info) continue;
        if (info->shape.size() < 2 || info->shape[0] != c.num_experts)
          fail(source->describe(), ": tensor '", name, "' has shape ", shape_str(info->shape), "; expected [",
               c.num_experts, ", ...] (mlx-lm's stacked experts of ", c.model_type, ", num_experts from config.json)");
        for (int64_t e = 0; e < c.num_experts; ++e) {
          const std::string expert = expert_stem(c, l, e, part) + suffix;
          if (source->has(expert))
            fail(source->describe(), ": holds both '", name, "' (mlx-lm's stacked experts) and '", expert,
                 "'; expected one layout per layer");
          slices[expert] = io::TensorSlice::entry(name, e);
        }
      }
  }
  if (slices.empty()) return source;
  return io::make_sliced_source(std::move(source), std::move(slices), "read through its experts");
}

void unstack_quantization_overrides(QuantizationConfig& q, const ModelConfig& c) {
  const MoeLayout& moe = family(c.model_type).moe;
  if (!moe.present() || !moe.mlx_switch) return;
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (int part = 0; part < 3; ++part) {
      auto it = q.overrides.find(stacked_stem(c, l, part));
      if (it == q.overrides.end()) continue;
      for (int64_t e = 0; e < c.num_experts; ++e) q.overrides[expert_stem(c, l, e, part)] = it->second;
    }
}

}  // namespace graft::model
