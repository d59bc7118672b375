// PEFT target_parameters: LoRA on raw parameters (peft/tuners/lora/layer.py, ParamWrapper).
//
// A ParamWrapper of a parameter of shape [E, out, in] (transformers 5 experts: gate_up_proj
// [E, 2·width, hidden], down_proj [E, hidden, width]) holds lora_A [E·r, in] and lora_B
// [out, E·r]; get_delta_weight reshapes A to [E, r, in] (expert-major) and B to [out, r, E]
// (expert-minor), so expert e's update is
//     ΔW_e = s · B_e · A_e,  A_e = rows e·r .. e·r + r - 1 of A,  B_e = columns e, E + e, 2E + e, ... of B,
// [out, in] as the expert's own Linear weight (PEFT's is_transposed [E, in, out] layouts give the
// same per-expert product). A 2-D parameter (E = 1) is a plain LoRA pair. Each expert's pair is
// emitted as module `<module>.<e>.<param>` (the per-expert name a model binds, splitting fused
// gate_up_proj by rows); nothing here knows a model.
//
// Several parameters of one module nest: PEFT wraps the first, then wraps the wrapper, so the
// file holds `<module>.lora_A`, `<module>.base_layer.lora_A`, ... The nesting order follows the
// model's parameter order, which the file does not record, so each level's parameter is found
// from the file: r and alpha resolve per parameter (rank_pattern / alpha_pattern against
// `<module>.<param>`, as PEFT does), every level of a module must cut into the same expert count,
// and where that still leaves two readings (equal ranks) the level keeps both names and binding
// takes the one whose base weight has ΔW's shape (AdapterTarget::alt_modules).
#include "import_peft_params.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace graft::adapter::detail {

namespace {

const std::string kPrefix = "base_model.model.";
const std::string kBaseLayer = ".base_layer";

std::string strip_prefix(const std::string& m) {
  return starts_with(m, kPrefix) ? m.substr(kPrefix.size()) : m;
}

std::string last_component(const std::string& s) {
  const size_t dot = s.rfind('.');
  return dot == std::string::npos ? s : s.substr(dot + 1);
}

// The module a ParamWrapper level belongs to and how deep it is nested.
std::string root_of(std::string m, int& depth) {
  depth = 0;
  while (ends_with(m, kBaseLayer)) {
    m.resize(m.size() - kBaseLayer.size());
    ++depth;
  }
  return m;
}

// PEFT _inject_parameters: key `<module>.<param>` is targeted when it equals an entry or ends with
// `.<entry>`. The file does not list a module's parameters, so a bare entry ("down_proj") fits any
// module; which modules are wrappers is settled in take_parameter_targets. A Linear that an entry
// happens to end with (mlp.down_proj for "down_proj") holds weight/bias, not such a parameter.
std::vector<std::string> targeted_params(const std::string& root, const PeftParamConfig& pc) {
  const std::string name = strip_prefix(root);
  std::vector<std::string> out;
  for (const auto& t : pc.target_parameters) {
    const std::string p = last_component(t);
    if (p == last_component(name)) continue;
    const std::string key = name + "." + p;
    if ((key == t || ends_with(key, "." + t)) && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  }
  return out;
}

// A module with LoRA factors is a ParamWrapper when PEFT nested a level under it, or when a target
// parameter fits it and target_modules does not name it (PEFT wraps target_modules as Linear
// layers). Under "all-linear" only the shapes can tell: a wrapper's lora_A has experts * r rows.
bool is_wrapper(const std::string& root, int depth, const PeftModuleKeys& keys, const io::SafetensorsFile& f,
                const PeftParamConfig& pc) {
  if (depth > 0) return true;
  if (targeted_params(root, pc).empty()) return false;
  const std::optional<bool> named =
      pc.named_by_target_modules ? pc.named_by_target_modules(strip_prefix(root)) : std::optional<bool>(false);
  if (named) return !*named;
  if (keys.a.empty()) return false;
  const Tensor a = read_checked(f, keys.a);
  return a.shape.size() == 2 && a.shape[0] != pc.r;
}

struct Level {
  std::string module;  // as in the file
  std::string a_key, b_key;
  Tensor a, b;  // F32, [X, in] and [out, X]
};

struct ParamRule {
  int64_t r = 0;
  double scale = 0;
};

Tensor f32_of(const Tensor& t) { return convert_tensor(t, DType::F32); }

Tensor rows_of(const Tensor& a, int64_t row0, int64_t rows) {
  Tensor out = Tensor::zeros_f32({rows, a.shape[1]});
  std::copy_n(a.as<float>() + row0 * a.shape[1], rows * a.shape[1], out.mutable_as<float>());
  return out;
}

// Columns col0, col0 + step, ... (count of them) of b.
Tensor strided_cols(const Tensor& b, int64_t col0, int64_t count, int64_t step) {
  const int64_t rows = b.shape[0], cols = b.shape[1];
  Tensor out = Tensor::zeros_f32({rows, count});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t k = 0; k < count; ++k) out.mutable_as<float>()[i * count + k] = b.as<float>()[i * cols + col0 + k * step];
  return out;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

void take_parameter_targets(const io::SafetensorsFile& f, const std::string& file, const std::string& config_path,
                            const PeftParamConfig& pc, std::map<std::string, PeftModuleKeys>& modules,
                            std::vector<AdapterTarget>& out) {
  // Roots and their levels.
  std::map<std::string, std::map<int, std::string>> roots;  // root -> depth -> module
  for (const auto& [m, keys] : modules) {
    int depth = 0;
    const std::string root = root_of(m, depth);
    if (is_wrapper(root, depth, keys, f, pc)) roots[root][depth] = m;
  }
  int matched = 0;
  for (const auto& [root, by_depth] : roots) {
    const std::vector<std::string> params = targeted_params(root, pc);
    const std::string name = strip_prefix(root);
    if (params.empty())
      fail("'", file, "': module '", by_depth.begin()->second, "' is a nested PEFT ParamWrapper level of '", root,
           "', but target_parameters (", join(pc.target_parameters), ") names none of its parameters; expected "
           "base_layer levels only under a module whose parameters target_parameters names");
    std::vector<Level> levels;
    for (int d = 0; d < static_cast<int>(by_depth.size()); ++d) {
      auto it = by_depth.find(d);
      if (it == by_depth.end())
        fail("'", file, "': module '", root, "' has ParamWrapper levels up to depth ", by_depth.rbegin()->first,
             " but none at depth ", d, "; expected one LoRA pair per nesting level (", root, ", ", root,
             ".base_layer, ...)");
      const PeftModuleKeys& mk = modules.at(it->second);
      if (!mk.magnitude.empty())
        fail("'", file, "': tensor '", mk.magnitude, "' is a DoRA magnitude on a target_parameters wrapper (module '",
             it->second, "'); PEFT's ParamWrapper has no DoRA; expected plain LoRA pairs");
      if (!mk.ea.empty() || !mk.eb.empty() || !mk.lokr.empty())
        fail("'", file, "': module '", it->second, "' is a target_parameters wrapper with ",
             mk.ea.empty() && mk.eb.empty() ? "LoKr/LoHa" : "embedding", " factors; expected lora_A / lora_B");
      if (mk.a.empty() || mk.b.empty())
        fail("'", file, "': tensor '", mk.a.empty() ? mk.b : mk.a, "' has no partner ",
             mk.a.empty() ? "lora_A.weight" : "lora_B.weight", "; expected both halves of each pair");
      Level l;
      l.module = it->second;
      l.a_key = mk.a;
      l.b_key = mk.b;
      const Tensor a = read_checked(f, mk.a), b = read_checked(f, mk.b);
      if (a.shape.size() != 2 || b.shape.size() != 2 || a.shape[0] == 0 || a.shape[1] == 0 || b.shape[0] == 0 ||
          a.shape[0] != b.shape[1])
        fail("'", file, "': tensors '", mk.a, "' ", shape_str(a.shape), " and '", mk.b, "' ", shape_str(b.shape),
             " do not pair; expected a target_parameters LoRA lora_A [experts * r, in] and lora_B [out, experts * r]");
      l.a = f32_of(a);
      l.b = f32_of(b);
      levels.push_back(std::move(l));
    }
    if (levels.size() > params.size())
      fail("'", file, "': module '", root, "' has ", levels.size(), " nested LoRA levels but target_parameters (",
           join(pc.target_parameters), ") selects ", params.size(), " of its parameters (", join(params),
           "); expected one level per targeted parameter");
    // r and scale per parameter, as PEFT resolves them for key `<module>.<param>`.
    std::map<std::string, ParamRule> rules;
    for (const auto& p : params) {
      ParamRule& rule = rules[p];
      auto r_pat = pc.rank_pattern->resolve(name + "." + p);
      auto a_pat = pc.alpha_pattern->resolve(name + "." + p);
      rule.r = r_pat ? json_positive_int(Json(*r_pat), config_path, "rank_pattern (parameter " + name + "." + p + ")")
                     : pc.r;
      const double alpha = a_pat ? *a_pat : pc.alpha;
      rule.scale = pc.rslora ? alpha / std::sqrt(static_cast<double>(rule.r)) : alpha / static_cast<double>(rule.r);
    }
    // Every assignment of levels to distinct parameters under which each level cuts into the same
    // number of experts.
    std::vector<std::vector<std::string>> readings;
    std::vector<int64_t> reading_experts;
    std::vector<std::string> pick;
    std::function<void(size_t)> enumerate = [&](size_t i) {
      if (i == levels.size()) {
        int64_t experts = -1;
        for (size_t k = 0; k < levels.size(); ++k) {
          const int64_t x = levels[k].a.shape[0], r = rules[pick[k]].r;
          if (x % r != 0 || (experts >= 0 && x / r != experts)) return;
          experts = x / r;
        }
        readings.push_back(pick);
        reading_experts.push_back(experts);
        return;
      }
      for (const auto& p : params) {
        if (std::find(pick.begin(), pick.end(), p) != pick.end()) continue;
        pick.push_back(p);
        enumerate(i + 1);
        pick.pop_back();
      }
    };
    enumerate(0);
    if (readings.empty()) {
      std::string shapes;
      for (const auto& l : levels) shapes += (shapes.empty() ? "" : ", ") + l.a_key + " " + shape_str(l.a.shape);
      std::string ranks;
      for (const auto& [p, rule] : rules) ranks += (ranks.empty() ? "" : ", ") + p + " r = " + std::to_string(rule.r);
      fail("'", file, "': module '", root, "': no reading of its LoRA levels (", shapes, ") as the parameters ",
           join(params), " (", ranks, ") cuts every level into the same number of experts; expected lora_A rows = "
           "experts * r for each targeted parameter");
    }
    for (size_t i = 1; i < readings.size(); ++i)
      if (reading_experts[i] != reading_experts[0])
        fail("'", file, "': module '", root, "': its LoRA levels read as ", reading_experts[0], " experts (",
             join(readings[0]), ") or as ", reading_experts[i], " experts (", join(readings[i]),
             "); the file does not say which; expected ranks (rank_pattern) that tell its parameters apart");
    const int64_t experts = reading_experts[0];
    for (size_t k = 0; k < levels.size(); ++k) {
      const Level& l = levels[k];
      std::vector<std::string> names;
      for (const auto& reading : readings)
        if (std::find(names.begin(), names.end(), reading[k]) == names.end()) names.push_back(reading[k]);
      const ParamRule& rule = rules[names[0]];  // every reading gives the level the same r (same experts)
      for (int64_t e = 0; e < experts; ++e) {
        AdapterTarget t;
        auto module_for = [&](const std::string& p) {
          if (experts == 1) return p == "weight" ? root : root + "." + p;  // a 2-D parameter: a plain pair
          return root + "." + std::to_string(e) + "." + p;
        };
        t.module = module_for(names[0]);
        for (size_t n = 1; n < names.size(); ++n) t.alt_modules.push_back(module_for(names[n]));
        t.keys = {l.a_key, l.b_key};
        t.update = LowRankUpdate{rows_of(l.a, e * rule.r, rule.r), strided_cols(l.b, e, rule.r, experts),
                                 static_cast<float>(rule.scale)};
        out.push_back(std::move(t));
      }
      modules.erase(l.module);
    }
    ++matched;
  }
  if (matched == 0)
    fail("'", config_path, "': field 'target_parameters' is [", join(pc.target_parameters), "] but no tensor of '",
         file, "' is a LoRA pair on such a parameter; expected <module>.lora_A.weight / lora_B.weight of a module "
         "holding one (PEFT nests a second parameter's pair under <module>.base_layer)");
}

}  // namespace graft::adapter::detail
