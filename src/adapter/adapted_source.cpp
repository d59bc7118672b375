#include "graft/adapter/adapted_source.h"

#include "graft/core/error.h"

namespace graft::adapter {

WeightAdapterSource::WeightAdapterSource(std::shared_ptr<const io::TensorSource> base,
                                         std::shared_ptr<const WeightAdapterPlan> plan, AdaptedSourceOptions options)
    : base_(std::move(base)), plan_(std::move(plan)), options_(std::move(options)) {
  if (options_.dtype && *options_.dtype != DType::F32 && *options_.dtype != DType::F16 && *options_.dtype != DType::BF16)
    fail("adapted source: output dtype ", dtype_name(*options_.dtype), " is not supported (F32, F16, BF16)");
}

std::optional<io::TensorInfo> WeightAdapterSource::info(const std::string& name) const {
  auto i = base_->info(name);
  // A merged tensor is plain floating point: the requested dtype, else the base's (F32 for a
  // block-quantized base, which is dequantized to merge).
  if (i && plan_->adapts(name)) i->dtype = options_.dtype.value_or(dtype_is_quantized(i->dtype) ? DType::F32 : i->dtype);
  return i;
}

Tensor WeightAdapterSource::read(const std::string& name) const {
  if (!plan_->adapts(name)) return base_->read(name);
  return read_as(name, info(name)->dtype);
}

Tensor WeightAdapterSource::read_as(const std::string& name, DType dtype) const {
  auto it = plan_->updates.find(name);
  if (it == plan_->updates.end()) return base_->read(name);
  if (options_.cache) {
    std::lock_guard<std::mutex> lk(mu_);
    auto c = cache_.find(name);
    if (c != cache_.end() && c->second.dtype == dtype) return c->second;
  }
  // Each read starts from the immutable base, so a second read cannot apply the update twice.
  const Tensor base = base_->read(name);
  Tensor merged = merge_tensor(base, it->second, options_.policy, dtype, options_.pool);
  // The merged copy replaces the stored bytes for whoever reads through this overlay: let a
  // mapped base drop them, so fusing at load peaks near base + one tensor, not base + every
  // adapted tensor (views of the base stay valid; its pages reload if touched again).
  if (merged.data != base.data) base_->release(name);
  if (options_.cache) {
    std::lock_guard<std::mutex> lk(mu_);
    cache_[name] = merged;  // replaces any other dtype kept for this tensor
  }
  return merged;
}

std::string WeightAdapterSource::describe() const { return base_->describe() + " + adapters"; }

size_t WeightAdapterSource::cached_tensors() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cache_.size();
}

std::shared_ptr<const io::TensorSource> make_weight_adapter_source(std::shared_ptr<const io::TensorSource> base,
                                                                   std::shared_ptr<const WeightAdapterPlan> plan,
                                                                   AdaptedSourceOptions options) {
  if (!plan || plan->updates.empty()) return base;
  return std::make_shared<WeightAdapterSource>(std::move(base), std::move(plan), std::move(options));
}

}  // namespace graft::adapter
