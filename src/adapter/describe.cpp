#include "graft/adapter/describe.h"

namespace graft::adapter {

namespace {

struct TargetFacts {
  int64_t rank = 0;
  float scale = 1.0f;
  std::string dtype;
  int64_t bytes = 0;
};

void add_tensor(TargetFacts& f, const Tensor& t) {
  if (!t.data) return;
  f.bytes += t.nbytes();
  if (f.dtype.empty()) f.dtype = dtype_name(t.dtype);
}

TargetFacts facts(const Update& u) {
  TargetFacts f;
  if (const auto* l = std::get_if<LowRankUpdate>(&u)) {
    f.rank = l->a.shape.empty() ? 0 : l->a.shape[0];
    f.scale = l->scale;
    add_tensor(f, l->a);
    add_tensor(f, l->b);
  } else if (const auto* k = std::get_if<KroneckerUpdate>(&u)) {
    f.rank = k->w1_b.data ? k->w1_b.shape[0] : 0;
    if (k->w2_b.data) f.rank = k->w2_b.shape[0];
    f.scale = k->scale;
    for (const Tensor* t : {&k->w1, &k->w1_a, &k->w1_b, &k->w2, &k->w2_a, &k->w2_b}) add_tensor(f, *t);
  } else if (const auto* h = std::get_if<HadamardUpdate>(&u)) {
    f.rank = h->w1b.shape.empty() ? 0 : h->w1b.shape[0];
    f.scale = h->scale;
    for (const Tensor* t : {&h->w1a, &h->w1b, &h->w2a, &h->w2b}) add_tensor(f, *t);
  } else if (const auto* dr = std::get_if<DoraUpdate>(&u)) {
    f = facts(Update{dr->lora});
    add_tensor(f, dr->magnitude);
  } else if (const auto* d = std::get_if<DiffUpdate>(&u)) {
    f.scale = d->scale;
    add_tensor(f, d->diff);
  } else if (const auto* r = std::get_if<Replacement>(&u)) {
    add_tensor(f, r->value);
  }
  return f;
}

}  // namespace

nlohmann::json describe_adapter(const WeightAdapter& a) {
  nlohmann::json targets = nlohmann::json::array();
  int64_t total = 0;
  for (const auto& t : a.targets) {
    TargetFacts f = facts(t.update);
    total += f.bytes;
    nlohmann::json j = {{"module", t.module}, {"param", t.param}, {"kind", update_kind(t.update)},
                        {"scale", f.scale},   {"dtype", f.dtype}, {"delta_shape", update_delta_shape(t.update)},
                        {"keys", t.keys},     {"embedding", t.embedding}};
    if (f.rank > 0) j["rank"] = f.rank;
    if (std::holds_alternative<DoraUpdate>(t.update)) j["dora_magnitude"] = true;
    if (!t.alt_modules.empty()) j["alt_modules"] = t.alt_modules;  // the base decides (PEFT nesting)
    targets.push_back(j);
  }
  return {{"path", a.path}, {"format", format_name(a.format)}, {"metadata", a.metadata},
          {"size_bytes", total}, {"targets", targets}};
}

nlohmann::json describe_plan(const WeightAdapterPlan& plan) {
  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, nlohmann::json> by_tensor;
  for (const auto& b : plan.bound) {
    const WeightAdapter& a = *plan.adapters[b.adapter_index].adapter;
    const AdapterTarget& t = a.targets[b.target_index];
    by_tensor[b.slice.tensor].push_back({{"adapter", a.path},
                                         {"module", t.module},
                                         {"kind", update_kind(t.update)},
                                         {"rows", {b.slice.src_row, b.slice.dst_row, b.slice.rows}},
                                         {"strength", plan.adapters[b.adapter_index].strength}});
  }
  for (auto& [name, updates] : by_tensor) tensors.push_back({{"tensor", name}, {"updates", updates}});
  return {{"tensors", tensors}};
}

}  // namespace graft::adapter
