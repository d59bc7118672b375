// make_weight_adapter_source: an overlay on immutable base weights. Reading an adapted tensor
// materializes base + updates (merge_tensor under the chosen policy) in the requested dtype;
// every other tensor passes through zero-copy. The base is never written, and a tensor read twice
// never gets its update twice (each read starts again from the base, or comes from the cache).
// After materializing a tensor the overlay tells the base it may release that tensor's stored
// pages (TensorSource::release), so a fused load does not keep two copies resident.
#pragma once
#include <memory>
#include <mutex>
#include <optional>

#include "graft/adapter/bind.h"
#include "graft/adapter/merge.h"
#include "graft/io/tensor_source.h"

namespace graft::adapter {

struct AdaptedSourceOptions {
  MergePolicy policy = MergePolicy::DeltaF32;
  // Adapted tensors come out in this dtype (F32/F16/BF16); unset: the base tensor's dtype.
  std::optional<DType> dtype;
  // Keep each materialized tensor (one dtype per tensor: a read in another dtype replaces it).
  bool cache = false;
  ThreadPool* pool = nullptr;  // row parallelism for merges (serial when null)
};

class WeightAdapterSource : public io::TensorSource {
 public:
  WeightAdapterSource(std::shared_ptr<const io::TensorSource> base, std::shared_ptr<const WeightAdapterPlan> plan,
                      AdaptedSourceOptions options);

  std::vector<std::string> names() const override { return base_->names(); }
  std::optional<io::TensorInfo> info(const std::string& name) const override;
  Tensor read(const std::string& name) const override;
  std::string describe() const override;

  // Reads in an explicit dtype (adapted tensors only are converted; others pass through).
  Tensor read_as(const std::string& name, DType dtype) const;
  const WeightAdapterPlan& plan() const { return *plan_; }
  size_t cached_tensors() const;

 private:
  std::shared_ptr<const io::TensorSource> base_;
  std::shared_ptr<const WeightAdapterPlan> plan_;
  AdaptedSourceOptions options_;
  mutable std::mutex mu_;
  mutable std::map<std::string, Tensor> cache_;
};

// An empty plan gives back the base source itself (the identity overlay).
std::shared_ptr<const io::TensorSource> make_weight_adapter_source(std::shared_ptr<const io::TensorSource> base,
                                                                   std::shared_ptr<const WeightAdapterPlan> plan,
                                                                   AdaptedSourceOptions options = {});

}  // namespace graft::adapter
