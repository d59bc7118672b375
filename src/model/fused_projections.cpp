#include "graft/model/fused_projections.h"

#include <cstring>
#include <map>

#include "graft/core/error.h"
#include "graft/io/sliced_source.h"
#include "graft/model/family.h"

namespace graft::model {

namespace {

// Each part of every fused tensor of `base` as a row range of it.
std::map<std::string, io::TensorSlice> split_parts(const io::TensorSource& base, const ModelConfig& c) {
  std::map<std::string, io::TensorSlice> parts;
  for (int64_t i = 0; i < c.num_layers; ++i)
    for (const auto& spec : fused_projection_specs()) {
      const std::string fused = hf_fused_tensor_name(i, spec);
      auto info = base.info(fused);
      if (!info) continue;  // weight validation reports the missing parts by their names
      int64_t rows = 0;
      for (Role r : spec.parts) rows += layer_tensor_shape(c, r)[0];
      if (info->shape.size() != 2 || info->shape[0] != rows || info->shape[1] != c.hidden_size)
        fail(base.describe(), ": tensor '", fused, "' has shape ", shape_str(info->shape), ", expected [", rows, ", ",
             c.hidden_size, "] (", c.model_type, " stores ", spec.parts.size(),
             " projections fused in it; sizes from config.json)");
      int64_t row = 0;
      for (Role r : spec.parts) {
        const int64_t n = layer_tensor_shape(c, r)[0];
        parts[hf_layer_tensor_name(c, i, r)] = io::TensorSlice::rows(fused, row, n);
        row += n;
      }
    }
  return parts;
}

class JoinSource : public io::TensorSource {
 public:
  JoinSource(std::shared_ptr<const io::TensorSource> base, const ModelConfig& c) : base_(std::move(base)) {
    for (int64_t i = 0; i < c.num_layers; ++i)
      for (const auto& spec : fused_projection_specs()) {
        std::vector<std::string> parts;
        for (Role r : spec.parts)
          if (base_->has(hf_layer_tensor_name(c, i, r))) parts.push_back(hf_layer_tensor_name(c, i, r));
        if (parts.size() != spec.parts.size()) continue;
        for (const auto& p : parts) hidden_[p] = true;
        fused_[hf_fused_tensor_name(i, spec)] = parts;
      }
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (auto& n : base_->names())
      if (!hidden_.count(n)) out.push_back(n);
    for (const auto& [n, p] : fused_) out.push_back(n);
    return out;
  }
  std::optional<io::TensorInfo> info(const std::string& name) const override {
    auto it = fused_.find(name);
    if (it == fused_.end()) return hidden_.count(name) ? std::nullopt : base_->info(name);
    io::TensorInfo out = *base_->info(it->second[0]);
    out.shape[0] = 0;
    for (const auto& p : it->second) {
      auto pi = base_->info(p);
      if (pi->dtype != out.dtype || pi->shape.size() != 2 || pi->shape[1] != out.shape[1])
        fail(base_->describe(), ": cannot join '", p, "' into '", name, "': its dtype or width differs from '",
             it->second[0], "'");
      out.shape[0] += pi->shape[0];
    }
    return out;
  }
  Tensor read(const std::string& name) const override {
    auto it = fused_.find(name);
    if (it == fused_.end()) {
      if (hidden_.count(name)) fail(base_->describe(), ": no tensor '", name, "' (written joined)");
      return base_->read(name);
    }
    const io::TensorInfo fi = *info(name);
    std::vector<uint8_t> bytes;
    for (const auto& p : it->second) {
      Tensor t = base_->read(p);
      const auto* b = static_cast<const uint8_t*>(t.data);
      bytes.insert(bytes.end(), b, b + t.nbytes());
    }
    return Tensor::owned(fi.dtype, fi.shape, std::move(bytes));
  }
  std::string describe() const override { return base_->describe(); }
  void release(const std::string& name) const override {
    auto it = fused_.find(name);
    if (it == fused_.end()) return base_->release(name);
    for (const auto& p : it->second) base_->release(p);
  }

 private:
  std::shared_ptr<const io::TensorSource> base_;
  std::map<std::string, std::vector<std::string>> fused_;
  std::map<std::string, bool> hidden_;
};

}  // namespace

std::shared_ptr<io::TensorSource> split_fused_projections(std::shared_ptr<io::TensorSource> source,
                                                          const ModelConfig& config) {
  if (!config.fused_projections) return source;
  auto parts = split_parts(*source, config);
  return io::make_sliced_source(std::move(source), std::move(parts), "read through its split parts");
}

std::shared_ptr<const io::TensorSource> join_fused_projections(std::shared_ptr<const io::TensorSource> source,
                                                               const ModelConfig& config) {
  if (!config.fused_projections) return source;
  return std::make_shared<JoinSource>(std::move(source), config);
}

}  // namespace graft::model
