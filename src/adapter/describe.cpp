#include "graft/adapter/describe.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <set>
#include <string_view>

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

// A metadata value as JSON: numbers, booleans, arrays and objects typed ("16" -> 16, "false" ->
// false, a JSON list -> the list), anything else the string it is.
nlohmann::json typed(const std::string& v) {
  if (v.empty() || !(v[0] == '-' || v[0] == '[' || v[0] == '{' || std::isdigit(static_cast<unsigned char>(v[0])) ||
                     v == "true" || v == "false" || v == "null"))
    return v;
  nlohmann::json j = nlohmann::json::parse(v, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? nlohmann::json(v) : j;
}

// Module names in natural order: digit runs compared as numbers ("layers.2" before "layers.10").
bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t ie = i, je = j;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      const std::string_view x = std::string_view(a).substr(i, ie - i), y = std::string_view(b).substr(j, je - j);
      if (x.size() != y.size()) return x.size() < y.size();  // (no leading zeros in layer numbers)
      if (x != y) return x < y;
      i = ie, j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i, ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// What a person wants first: how many targets of which kinds, the ranks and scales, the layers and
// the module names they touch.
nlohmann::json summary(const nlohmann::json& targets) {
  std::map<std::string, int64_t> kinds;
  std::set<int64_t> ranks;
  std::set<double> scales;
  std::set<std::string> dtypes, modules;
  std::set<int64_t> layers;
  static const std::regex layer(R"((?:^|[._])(?:layers|blocks|h|layer)[._](\d+)(?:[._]|$))");
  for (const auto& t : targets) {
    ++kinds[t["kind"].get<std::string>()];
    if (t.contains("rank")) ranks.insert(t["rank"].get<int64_t>());
    scales.insert(t["scale"].get<double>());
    if (!t["dtype"].get<std::string>().empty()) dtypes.insert(t["dtype"].get<std::string>());
    const std::string m = t["module"].get<std::string>();
    std::smatch match;
    if (std::regex_search(m, match, layer)) layers.insert(std::stoll(match[1].str()));
    modules.insert(m.substr(m.find_last_of('.') == std::string::npos ? 0 : m.find_last_of('.') + 1));
  }
  nlohmann::json s = {{"targets", targets.size()}, {"kinds", kinds},     {"ranks", ranks},
                      {"scales", scales},          {"dtypes", dtypes},   {"modules", modules}};
  if (!layers.empty()) s["layers"] = {*layers.begin(), *layers.rbegin(), layers.size()};
  return s;
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
  std::vector<nlohmann::json> sorted(targets.begin(), targets.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const nlohmann::json& x, const nlohmann::json& y) {
    return natural_less(x["module"].get<std::string>(), y["module"].get<std::string>());
  });
  nlohmann::json metadata = nlohmann::json::object();
  for (const auto& [k, v] : a.metadata) metadata[k] = typed(v);
  return {{"path", a.path},     {"format", format_name(a.format)}, {"summary", summary(targets)},
          {"metadata", metadata}, {"size_bytes", total},            {"targets", sorted}};
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
