#include "graft/model/stacked_experts.h"

#include <map>

#include "graft/core/error.h"
#include "graft/model/family.h"

namespace graft::model {

namespace {

// mlx-lm's SwitchGLU names its projections the same way in every family.
constexpr const char* kSwitchProj[] = {"gate_proj", "up_proj", "down_proj"};
constexpr ExpertTensor kRoles[] = {ExpertTensor::Gate, ExpertTensor::Up, ExpertTensor::Down};
constexpr const char* kSuffixes[] = {".weight", ".scales", ".biases"};

std::string stacked_stem(const ModelConfig& c, int64_t layer, int part) {
  return "model.layers." + std::to_string(layer) + "." + family(c.model_type).moe.mlx_switch + "." + kSwitchProj[part];
}

std::string expert_stem(const ModelConfig& c, int64_t layer, int64_t expert, int part) {
  std::string n = hf_expert_tensor_name(c, layer, expert, kRoles[part]);
  return n.substr(0, n.size() - 7);  // ".weight"
}

struct Slice {
  std::string stacked;
  int64_t expert = 0;
};

// Expert e of a stacked [E, ...] tensor: its e-th contiguous E-th of the bytes.
Tensor expert_slice(const Tensor& t, int64_t e) {
  Tensor out = t;
  const int64_t bytes = t.nbytes() / t.shape[0];
  out.data = static_cast<const uint8_t*>(t.data) + e * bytes;
  out.shape = Shape(t.shape.begin() + 1, t.shape.end());
  return out;
}

class UnstackedSource : public io::TensorSource {
 public:
  UnstackedSource(std::shared_ptr<io::TensorSource> base, std::map<std::string, Slice> slices,
                  std::map<std::string, size_t> stacked)
      : base_(std::move(base)), slices_(std::move(slices)), stacked_(std::move(stacked)) {}
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (auto& n : base_->names())
      if (!stacked_.count(n)) out.push_back(n);
    for (const auto& [n, s] : slices_) out.push_back(n);
    return out;
  }
  std::optional<io::TensorInfo> info(const std::string& name) const override {
    if (auto it = slices_.find(name); it != slices_.end()) {
      auto si = base_->info(it->second.stacked);
      return io::TensorInfo{si->dtype, Shape(si->shape.begin() + 1, si->shape.end())};
    }
    if (stacked_.count(name)) return std::nullopt;
    return base_->info(name);
  }
  Tensor read(const std::string& name) const override {
    if (auto it = slices_.find(name); it != slices_.end())
      return expert_slice(base_->read(it->second.stacked), it->second.expert);
    if (stacked_.count(name)) fail(base_->describe(), ": no tensor '", name, "' (read through its experts)");
    return base_->read(name);
  }
  std::string describe() const override { return base_->describe(); }
  // The stacked tensor's pages back every expert: dropped once the last expert is released.
  void release(const std::string& name) const override {
    auto it = slices_.find(name);
    if (it == slices_.end()) return base_->release(name);
    if (++released_[it->second.stacked] == stacked_.at(it->second.stacked)) base_->release(it->second.stacked);
  }

 private:
  std::shared_ptr<io::TensorSource> base_;
  std::map<std::string, Slice> slices_;
  std::map<std::string, size_t> stacked_;  // stacked tensor -> its expert count
  mutable std::map<std::string, size_t> released_;
};

}  // namespace

std::shared_ptr<io::TensorSource> unstack_mlx_experts(std::shared_ptr<io::TensorSource> source,
                                                      const ModelConfig& c) {
  const MoeLayout& moe = family(c.model_type).moe;
  if (!moe.present() || !moe.mlx_switch) return source;
  std::map<std::string, Slice> slices;
  std::map<std::string, size_t> stacked;
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
        stacked[name] = static_cast<size_t>(c.num_experts);
        for (int64_t e = 0; e < c.num_experts; ++e) {
          const std::string expert = expert_stem(c, l, e, part) + suffix;
          if (source->has(expert))
            fail(source->describe(), ": holds both '", name, "' (mlx-lm's stacked experts) and '", expert,
                 "'; expected one layout per layer");
          slices[expert] = Slice{name, e};
        }
      }
  }
  if (stacked.empty()) return source;
  return std::make_shared<UnstackedSource>(std::move(source), std::move(slices), std::move(stacked));
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
