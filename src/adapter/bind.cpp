#include "graft/adapter/bind.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "adapter/import_common.h"
#include "graft/core/error.h"

namespace graft::adapter {

namespace {

Shape kron_factor_shape(const Tensor& full, const Tensor& a, const Tensor& b) {
  if (full.data) return full.shape;
  if (a.data && b.data && a.shape.size() == 2 && b.shape.size() == 2) return {a.shape[0], b.shape[1]};
  return {};
}

std::string describe_target(const WeightAdapter& a, const AdapterTarget& t) {
  std::string keys, alts;
  for (const auto& k : t.keys) keys += (keys.empty() ? "" : ", ") + k;
  for (const auto& m : t.alt_modules) alts += " or '" + m + "'";
  return "'" + a.path + "' module '" + t.module + "'" + alts + " (" + t.param + "; keys " + keys + ")";
}

// A target whose file leaves its module open (AdapterTarget::alt_modules) binds to the one
// candidate whose base weight has ΔW's shape; none or several is a problem.
const Binding* resolve_target(const WeightAdapter& a, const AdapterTarget& t, const WeightAdapterBindings& bindings,
                              std::vector<std::string>& problems) {
  if (t.alt_modules.empty()) return bindings.resolve(t.module, t.param);
  const Shape ds = update_delta_shape(t.update);
  const Binding* found = nullptr;
  std::vector<std::string> fits;
  std::vector<std::string> names = {t.module};
  names.insert(names.end(), t.alt_modules.begin(), t.alt_modules.end());
  for (const auto& m : names) {
    const Binding* b = bindings.resolve(m, t.param);
    if (b && !b->one_dimensional && Shape{b->delta_rows, b->delta_cols} == ds) {
      found = b;
      fits.push_back(m);
    }
  }
  if (fits.size() > 1) {
    problems.push_back(describe_target(a, t) + ": update shape " + shape_str(ds) + " fits the base weights of '" +
                       fits[0] + "' and '" + fits[1] + "'; the file does not say which it adapts");
    return nullptr;
  }
  if (!found)
    problems.push_back(describe_target(a, t) + ": no base weight of shape " + shape_str(ds) +
                       " under any of these names (wrong base model?)");
  return found;
}

}  // namespace

Shape update_delta_shape(const Update& u) {
  struct Visitor {
    Shape operator()(const LowRankUpdate& l) const {
      if (l.a.shape.size() != 2 || l.b.shape.size() != 2) return {};
      return {l.b.shape[0], l.a.shape[1]};
    }
    Shape operator()(const KroneckerUpdate& k) const {
      Shape s1 = kron_factor_shape(k.w1, k.w1_a, k.w1_b), s2 = kron_factor_shape(k.w2, k.w2_a, k.w2_b);
      if (s1.size() != 2 || s2.size() != 2) return {};
      return {s1[0] * s2[0], s1[1] * s2[1]};
    }
    Shape operator()(const HadamardUpdate& h) const {
      if (h.w1a.shape.size() != 2 || h.w1b.shape.size() != 2) return {};
      return {h.w1a.shape[0], h.w1b.shape[1]};
    }
    Shape operator()(const DoraUpdate& d) const { return (*this)(d.lora); }
    Shape operator()(const DiffUpdate& d) const { return d.diff.shape; }
    Shape operator()(const Replacement& r) const { return r.value.shape; }
  };
  return std::visit(Visitor{}, u);
}

std::shared_ptr<WeightAdapterPlan> bind_weight_adapter(const std::vector<AdapterUse>& adapters,
                                                       const WeightAdapterBindings& bindings,
                                                       const io::TensorSource& base, const BindOptions& options) {
  auto plan = std::make_shared<WeightAdapterPlan>();
  plan->adapters = adapters;
  std::vector<std::string> problems;
  for (size_t ai = 0; ai < adapters.size(); ++ai) {
    const AdapterUse& use = adapters[ai];
    if (!use.adapter) fail("bind_weight_adapter: null adapter");
    const WeightAdapter& a = *use.adapter;
    if (!std::isfinite(use.strength))
      problems.push_back("'" + a.path + "': strength " + std::to_string(use.strength) + " is not finite");
    if (a.targets.empty()) problems.push_back("'" + a.path + "': the adapter has no targets");
    std::map<std::string, std::string> claimed;  // "tensor|row" -> module, within this adapter
    size_t applied = 0;
    for (size_t ti = 0; ti < a.targets.size(); ++ti) {
      const AdapterTarget& t = a.targets[ti];
      const size_t before = problems.size();
      const Binding* b = resolve_target(a, t, bindings, problems);
      if (!b) {
        if (problems.size() == before)
          problems.push_back(describe_target(a, t) + ": no matching base weight (wrong base model?)");
        continue;
      }
      const Update* chosen = &t.update;
      if (t.transposed && update_delta_shape(t.update) != Shape{b->delta_rows, b->delta_cols} &&
          update_delta_shape(*t.transposed) == Shape{b->delta_rows, b->delta_cols})
        chosen = &*t.transposed;
      const Shape ds = update_delta_shape(*chosen);
      const bool is_replacement = std::holds_alternative<Replacement>(t.update);
      bool ok = true;
      size_t dims = ds.size();
      if (const auto* lr = std::get_if<LowRankUpdate>(&t.update)) dims = std::max(lr->a.shape.size(), lr->b.shape.size());
      if (const auto* dr = std::get_if<DoraUpdate>(&t.update))
        dims = std::max(dr->lora.a.shape.size(), dr->lora.b.shape.size());
      if (dims > 2) {
        problems.push_back(describe_target(a, t) + ": " + std::to_string(dims) +
                           "-D update (mixture-of-experts or conv) cannot apply to a dense weight");
        continue;
      }
      if (b->one_dimensional) {
        if (ds.size() != 1 || ds[0] != b->delta_rows) ok = false;
        if (!std::holds_alternative<DiffUpdate>(t.update) && !std::holds_alternative<Replacement>(t.update)) ok = false;
      } else if (ds.size() != 2 || ds[0] != b->delta_rows || ds[1] != b->delta_cols) {
        ok = false;
      }
      if (!ok) {
        problems.push_back(describe_target(a, t) + ": update shape " + shape_str(ds) + " does not match the base " +
                           (b->slices.size() > 1 ? "fused projection " : "weight ") + shape_str(
                               b->one_dimensional ? Shape{b->delta_rows} : Shape{b->delta_rows, b->delta_cols}) +
                           " (" + b->slices[0].tensor + (b->slices.size() > 1 ? ", ..." : "") + ")");
        continue;
      }
      for (const BoundSlice& s : b->slices) {
        auto info = base.info(s.tensor);
        if (!info) {
          problems.push_back(describe_target(a, t) + ": base tensor '" + s.tensor + "' is missing");
          ok = false;
          continue;
        }
        const DType dt = info->dtype;
        // GGUF block weights are dequantized to merge and the result stays F32: nothing is
        // requantized, so they fuse as exactly as dense ones.
        const bool mergeable = dt == DType::F32 || dt == DType::F16 || dt == DType::BF16 || dtype_is_quantized(dt);
        if (!mergeable && !options.allow_quantized_base) {
          problems.push_back(describe_target(a, t) + ": base weight '" + s.tensor + "' is stored as " +
                             std::string(dtype_name(dt)) +
                             "; fusing into a quantized weight is refused (it would dequantize, merge and requantize, "
                             "losing small deltas) - apply the adapter unfused with --lora instead");
          ok = false;
        }
        const std::string key = s.tensor + "|" + std::to_string(s.dst_row) + "|" + (is_replacement ? "set" : "add");
        auto [it, inserted] = claimed.emplace(key, t.module);
        if (!inserted) {
          problems.push_back("'" + a.path + "': modules '" + it->second + "' and '" + t.module +
                             "' both resolve to base weight '" + s.tensor + "'");
          ok = false;
        }
      }
      if (!ok) continue;
      if (auto s = detail::update_scale(*chosen); s && !std::isfinite(*s * use.strength)) {
        problems.push_back(describe_target(a, t) + ": scale " + std::to_string(*s) + " times strength " +
                           std::to_string(use.strength) + " is not finite");
        continue;
      }
      for (const BoundSlice& s : b->slices) {
        plan->updates[s.tensor].push_back(PlannedUpdate{chosen, s.src_row, s.dst_row, s.rows, use.strength});
        plan->bound.push_back({ai, ti, s});
      }
      ++applied;
    }
    if (applied == 0 && !a.targets.empty() && problems.empty())
      problems.push_back("'" + a.path + "': the adapter applies to no tensor of this model");
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << "cannot bind adapter" << (adapters.size() > 1 ? "s" : "") << " (" << problems.size() << " problem"
       << (problems.size() > 1 ? "s" : "") << "); no weight was changed:";
    for (const auto& p : problems) os << "\n  - " << p;
    throw Error(os.str());
  }
  return plan;
}

}  // namespace graft::adapter
