// bind_weight_adapter: resolves every target of one or more adapters to model tensors and checks
// every shape before any weight store is touched. The result is a plan: per model tensor, the
// updates (with row slices and user strengths) that merge_tensor or the overlay source applies.
// One error lists every problem found.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graft/adapter/bindings.h"
#include "graft/adapter/merge.h"
#include "graft/adapter/weight_adapter.h"
#include "graft/io/tensor_source.h"

namespace graft::adapter {

struct AdapterUse {
  std::shared_ptr<const WeightAdapter> adapter;
  float strength = 1.0f;  // user multiplier on top of the adapter's own scales
};

struct BoundTarget {
  size_t adapter_index;  // into WeightAdapterPlan::adapters
  size_t target_index;   // into that adapter's targets
  BoundSlice slice;
};

struct WeightAdapterPlan {
  std::vector<AdapterUse> adapters;                            // keeps the factors alive
  std::map<std::string, std::vector<PlannedUpdate>> updates;   // model tensor -> its updates
  std::vector<BoundTarget> bound;                              // for reports (inspect)

  bool adapts(const std::string& tensor) const { return updates.count(tensor) != 0; }
};

struct BindOptions {
  // Fusing into a block-quantized base is refused by default: merge-then-requantize loses small
  // deltas; the unfused runtime path (--lora) applies adapters to quantized bases exactly.
  bool allow_quantized_base = false;
};

// base: the model's weights (for dtypes); bindings: the names it answers to.
std::shared_ptr<WeightAdapterPlan> bind_weight_adapter(const std::vector<AdapterUse>& adapters,
                                                       const WeightAdapterBindings& bindings,
                                                       const io::TensorSource& base, const BindOptions& options = {});

// The final shape of an update's ΔW ([rows, cols], or [n] for 1-D updates).
Shape update_delta_shape(const Update& u);

}  // namespace graft::adapter
