// Hugging Face PEFT adapters: adapter_config.json (peft_type LORA, LOKR or LOHA) +
// adapter_model.safetensors.
//
// LoRA keys: `<module>.lora_A.weight` [r, in] / `.lora_B.weight` [out, r] (also the unstripped
// `.lora_A.default.weight`), `<module>.lora_embedding_A` [r, num_emb] / `.lora_embedding_B` [dim, r]
// (embedding, normalized to B = Aᵀ, A = Bᵀ). LoKr keys: `<module>.lokr_w1[_a/_b]`, `lokr_w2[_a/_b]`.
// LoHa keys: `<module>.hada_w1_a` [out, r], `hada_w1_b` [r, in], `hada_w2_a`, `hada_w2_b`.
// DoRA (use_dora): `<module>.lora_magnitude_vector` [out] beside each Linear pair, required on every
// module; DoRA on an embedding is refused (PEFT normalizes it per hidden column, over the whole
// vocabulary, which neither the fused nor the unfused path implements).
// Module names keep the `base_model.model.` prefix (bindings strip aliases); patterns are matched
// without it, as PEFT matches the model's own module names.
//
// Scale: LoRA lora_alpha/r, rsLoRA lora_alpha/√r (DoRA likewise); LoKr and LoHa alpha/r always. r and alpha are resolved per
// module through rank_pattern / alpha_pattern (PEFT get_pattern_key: first key in dict order whose
// regex `(.*\.)?(<key>)$` matches), independently; a key that matches no module is an error.
//
// Full tensors `<module>.weight` / `.bias` listed in modules_to_save become unscaled Replacements.
// `<module>.base_layer.weight` (PEFT's save_embedding_layers copy of the frozen base) is kept in
// base_copies, shape-checked against the module's ΔW, never applied.
#include <cmath>
#include <set>
#include <string>

#include "graft/adapter/bind.h"
#include "import_common.h"
#include "import_peft_params.h"

namespace graft::adapter::detail {

namespace {

const std::string kPrefix = "base_model.model.";

// ---- config ---------------------------------------------------------------------------------

// Fields that never change what the tensors mean (training-only, informational, or handled here).
const std::set<std::string> kLoraHarmless = {
    "r", "lora_alpha", "lora_dropout", "target_modules", "exclude_modules", "layers_to_transform", "layers_pattern",
    "task_type", "inference_mode", "base_model_name_or_path", "revision", "peft_type", "auto_mapping",
    "peft_version", "runtime_config", "modules_to_save", "rank_pattern", "alpha_pattern", "use_rslora",
    // only read together with a field refused below:
    "qalora_group_size", "megatron_core",
    // tying adapters of tied layers: the tensors present are what is applied
    "ensure_weight_tying",
    // EVA is a data-driven init of A; its rank/alpha redistribution is saved in rank/alpha_pattern
    "eva_config",
    // VeLoRA only changes the backward pass; forward and merge are plain LoRA
    "velora_config",
    // DoRA: the magnitude vectors are read and checked below
    "use_dora",
    // LoRA on raw parameters (MoE experts): import_peft_params.cpp
    "target_parameters",
};
const std::set<std::string> kLokrHarmless = {
    "r", "alpha", "rank_dropout", "module_dropout", "rank_dropout_scale", "target_modules", "exclude_modules",
    "layers_to_transform", "layers_pattern", "task_type", "inference_mode", "base_model_name_or_path", "revision",
    "peft_type", "auto_mapping", "peft_version", "init_weights", "modules_to_save", "rank_pattern", "alpha_pattern",
    // factor shapes only; the tensors present say which factors are low-rank
    "decompose_both", "decompose_factor",
};

// Fields that must be unset (null/false/""/[]/{}), with the reason.
const std::set<std::string> kLohaHarmless = {
    "r", "alpha", "rank_dropout", "module_dropout", "target_modules", "exclude_modules", "layers_to_transform",
    "layers_pattern", "task_type", "inference_mode", "base_model_name_or_path", "revision", "peft_type",
    "auto_mapping", "peft_version", "init_weights", "modules_to_save", "rank_pattern", "alpha_pattern",
};
const std::map<std::string, const char*> kLoraMustBeUnset = {
    {"fan_in_fan_out", "fan_in_fan_out adapters store [in, out] factors for Conv1D bases; graft does not transpose"},
    {"lora_bias", "lora_bias adds a trained bias to lora_B; not supported"},
    {"use_qalora", "QALoRA pools inputs before lora_A; different delta semantics"},
    {"use_bdlora", "BD-LoRA uses block-diagonal factors; different delta semantics"},
    {"layer_replication", "layer_replication duplicates base layers; the adapter targets a different model"},
    {"trainable_token_indices", "trainable tokens patch embedding rows; not supported"},
    {"alora_invocation_tokens", "activated LoRA applies only after its invocation tokens; not mergeable"},
    {"arrow_config", "Arrow routing mixes several adapters per token; not supported"},
    {"megatron_config", "Megatron parallel LoRA layers are not supported"},
    {"loftq_config", "LoftQ initialization modifies the base weights"},
    {"corda_config", "CorDA initialization modifies the base weights"},
    {"lora_ga_config", "LoRA-GA initialization modifies the base weights"},
    {"kasa_config", "KaSA truncates the base weights' singular values"},
    {"monteclora_config", "MonteCLoRA samples the update at run time; not supported"},
};
const std::map<std::string, const char*> kLokrMustBeUnset = {
    {"use_effective_conv2d", "effective-conv2d LoKr uses Tucker (lokr_t2) factors; not supported"},
};
const std::map<std::string, const char*> kLohaMustBeUnset = {
    {"use_effective_conv2d", "effective-conv2d LoHa uses Tucker (hada_t1/hada_t2) factors; not supported"},
};

struct PeftConfig {
  bool lokr = false;
  bool loha = false;
  bool dora = false;
  int64_t r = 8;
  double alpha = 8;
  bool rslora = false;
  PatternTable rank_pattern, alpha_pattern;
  std::vector<std::string> modules_to_save;
  std::vector<std::string> target_parameters;
  // target_modules as PEFT matches it: a list of names (equal to a module or to a dotted suffix of
  // it), or one regular expression (re.fullmatch; "all-linear" names every Linear).
  std::vector<std::string> target_module_list;
  std::optional<std::string> target_module_regex;
};

std::vector<std::string> string_list(const Json& v, const std::string& path, const char* field) {
  std::vector<std::string> out;
  if (json_unset(v)) return out;
  if (!v.is_array()) fail("'", path, "': field '", field, "' is ", json_brief(v), "; expected a list of names");
  for (const auto& e : v) {
    if (!e.is_string() || e.get<std::string>().empty())
      fail("'", path, "': field '", field, "' holds ", json_brief(e), "; expected non-empty names");
    out.push_back(e.get<std::string>());
  }
  return out;
}

void check_init(const std::string& path, const std::string& field, const Json& v) {
  if (v.is_null() || v.is_boolean()) return;
  std::string s = v.is_string() ? v.get<std::string>() : "";
  for (const char* ok : {"gaussian", "orthogonal", "mica", "eva", "lycoris"})
    if (s == ok) return;
  for (const char* bad : {"pissa", "olora", "corda", "loftq", "lora_ga"})
    if (starts_with(s, bad))
      fail("'", path, "': field '", field, "' is \"", s, "\": this initialization modifies the base weights, so the "
           "adapter is only valid against the modified base; expected true, false or \"gaussian\"");
  fail("'", path, "': field '", field, "' is ", json_brief(v),
       ": semantics-changing or unknown PEFT config field value; expected true, false or \"gaussian\"");
}

PeftConfig read_config(const std::string& path, const Json& cfg, std::map<std::string, std::string>& meta) {
  PeftConfig c;
  const Json& pt = cfg["peft_type"];
  std::string type = pt.is_string() ? pt.get<std::string>() : pt.dump();
  if (type != "LORA" && type != "LOKR" && type != "LOHA")
    fail("'", path, "': field 'peft_type' is \"", type,
         "\": this PEFT method is not supported; expected LORA, LOKR or LOHA");
  c.lokr = type == "LOKR";
  c.loha = type == "LOHA";
  const auto& harmless = c.lokr ? kLokrHarmless : c.loha ? kLohaHarmless : kLoraHarmless;
  const auto& must_unset = c.lokr ? kLokrMustBeUnset : c.loha ? kLohaMustBeUnset : kLoraMustBeUnset;
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    const std::string& k = it.key();
    const Json& v = it.value();
    if (harmless.count(k)) continue;
    if (auto m = must_unset.find(k); m != must_unset.end()) {
      if (!json_unset(v))
        fail("'", path, "': field '", k, "' is ", json_brief(v), ": ", m->second, "; expected it unset or false");
      continue;
    }
    if (!c.lokr && !c.loha && k == "bias") {
      if (!v.is_null() && v != "none")
        fail("'", path, "': field 'bias' is ", json_brief(v),
             ": the file carries trained base biases; not supported; expected \"none\"");
      continue;
    }
    if (k == "init_lora_weights" && !c.lokr && !c.loha) {
      check_init(path, k, v);
      continue;
    }
    if (!json_unset(v))
      fail("'", path, "': field '", k, "' is ", json_brief(v),
           ": semantics-changing or unknown PEFT config field; expected it absent, null or false");
  }
  const char* alpha_field = c.lokr || c.loha ? "alpha" : "lora_alpha";
  if (cfg.contains("r") && !cfg["r"].is_null()) c.r = json_positive_int(cfg["r"], path, "r");
  if (cfg.contains(alpha_field) && !cfg[alpha_field].is_null())
    c.alpha = json_number(cfg[alpha_field], path, alpha_field);
  if (!c.lokr && !c.loha && cfg.contains("use_dora") && !cfg["use_dora"].is_null()) {
    if (!cfg["use_dora"].is_boolean())
      fail("'", path, "': field 'use_dora' is ", json_brief(cfg["use_dora"]), "; expected true or false");
    c.dora = cfg["use_dora"].get<bool>();
  }
  if (!c.lokr && !c.loha && cfg.contains("use_rslora") && !cfg["use_rslora"].is_null()) {
    if (!cfg["use_rslora"].is_boolean())
      fail("'", path, "': field 'use_rslora' is ", json_brief(cfg["use_rslora"]), "; expected true or false");
    c.rslora = cfg["use_rslora"].get<bool>();
  }
  if (cfg.contains("rank_pattern")) c.rank_pattern = PatternTable(cfg["rank_pattern"], path, "rank_pattern");
  if (cfg.contains("alpha_pattern")) c.alpha_pattern = PatternTable(cfg["alpha_pattern"], path, "alpha_pattern");
  if (cfg.contains("modules_to_save")) c.modules_to_save = string_list(cfg["modules_to_save"], path, "modules_to_save");
  if (cfg.contains("target_parameters") && !c.lokr && !c.loha)
    c.target_parameters = string_list(cfg["target_parameters"], path, "target_parameters");
  if (cfg.contains("target_modules")) {
    if (cfg["target_modules"].is_string())
      c.target_module_regex = cfg["target_modules"].get<std::string>();
    else if (cfg["target_modules"].is_array())
      c.target_module_list = string_list(cfg["target_modules"], path, "target_modules");
  }
  if (c.dora && !c.target_parameters.empty())
    fail("'", path, "': fields 'use_dora' and 'target_parameters' are both set: PEFT's ParamWrapper (LoRA on raw "
         "parameters) has no DoRA; expected use_dora false with target_parameters");
  meta["peft_type"] = type;
  meta["r"] = std::to_string(c.r);
  meta[alpha_field] = num_str(c.alpha);
  if (!c.lokr && !c.loha) meta["use_rslora"] = c.rslora ? "true" : "false";
  if (c.dora) meta["use_dora"] = "true";
  for (const char* k : {"target_modules", "target_parameters", "base_model_name_or_path", "revision", "task_type", "peft_version"})
    if (cfg.contains(k) && !cfg[k].is_null()) meta[k] = cfg[k].is_string() ? cfg[k].get<std::string>() : cfg[k].dump();
  return c;
}

// ---- tensors --------------------------------------------------------------------------------

enum Role { kA, kB, kEA, kEB, kLokr, kLoha, kBase, kFull, kDora, kLoraBias, kTucker, kOther };
struct SuffixRole {
  std::string_view suffix;
  Role role;
  const char* lokr_role = nullptr;
};
const std::vector<SuffixRole> kTable = {
    {".lora_A.weight", kA}, {".lora_A.default.weight", kA}, {".lora_B.weight", kB}, {".lora_B.default.weight", kB},
    {".lora_embedding_A", kEA}, {".lora_embedding_A.default", kEA},
    {".lora_embedding_B", kEB}, {".lora_embedding_B.default", kEB},
    {".lokr_w1", kLokr, "lokr_w1"}, {".lokr_w1.default", kLokr, "lokr_w1"},
    {".lokr_w1_a", kLokr, "lokr_w1_a"}, {".lokr_w1_a.default", kLokr, "lokr_w1_a"},
    {".lokr_w1_b", kLokr, "lokr_w1_b"}, {".lokr_w1_b.default", kLokr, "lokr_w1_b"},
    {".lokr_w2", kLokr, "lokr_w2"}, {".lokr_w2.default", kLokr, "lokr_w2"},
    {".lokr_w2_a", kLokr, "lokr_w2_a"}, {".lokr_w2_a.default", kLokr, "lokr_w2_a"},
    {".lokr_w2_b", kLokr, "lokr_w2_b"}, {".lokr_w2_b.default", kLokr, "lokr_w2_b"},
    {".base_layer.weight", kBase}, {".base_layer.bias", kBase},
    {".weight", kFull}, {".bias", kFull},
    {".lora_magnitude_vector", kDora}, {".lora_magnitude_vector.weight", kDora},
    {".lora_magnitude_vector.default", kDora}, {".lora_magnitude_vector.default.weight", kDora},
    {".lora_A.bias", kLoraBias}, {".lora_B.bias", kLoraBias}, {".lora_B.default.bias", kLoraBias},
    {".lokr_t1", kTucker}, {".lokr_t2", kTucker}, {".lokr_t2.default", kTucker},
    {".hada_w1_a", kLoha, "hada_w1_a"}, {".hada_w1_b", kLoha, "hada_w1_b"},
    {".hada_w2_a", kLoha, "hada_w2_a"}, {".hada_w2_b", kLoha, "hada_w2_b"},
    {".hada_t1", kTucker}, {".hada_t2", kTucker},
};

std::vector<std::string_view> table_suffixes() {
  std::vector<std::string_view> v;
  for (const auto& e : kTable) v.push_back(e.suffix);
  return v;
}

std::string strip_prefix(const std::string& m) {
  return starts_with(m, kPrefix) ? m.substr(kPrefix.size()) : m;
}

bool has_adapter_component(const std::string& module) {
  size_t pos = 0;
  while (pos <= module.size()) {
    size_t dot = module.find('.', pos);
    std::string c = module.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    for (const char* p : {"lora_", "lokr_", "hada_", "oft_", "ia3_", "vera_"})
      if (starts_with(c, p)) return true;
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  return false;
}

const Tensor& need_2d(const std::string& file, const std::string& key, const Tensor& t, const char* expected) {
  if (t.shape.size() == 4 || t.shape.size() == 3 || t.shape.size() == 5)
    fail("'", file, "': tensor '", key, "' has shape ", shape_str(t.shape),
         ": convolution LoRA factors are not supported; expected ", expected);
  if (t.shape.size() != 2 || t.shape[0] == 0 || t.shape[1] == 0)
    fail("'", file, "': tensor '", key, "' has shape ", shape_str(t.shape), "; expected ", expected);
  return t;
}

// The adapter file of a PEFT directory (refusing pickle checkpoints).
std::string peft_weights_file(const std::string& dir) {
  const std::string file = join_path(dir, "adapter_model.safetensors");
  if (!file_exists(file)) {
    if (file_exists(join_path(dir, "adapter_model.bin")))
      fail("'", join_path(dir, "adapter_model.bin"), "': pickle checkpoints are not read; convert to safetensors "
           "(expected adapter_model.safetensors)");
    fail("'", dir, "': PEFT adapter directory has no adapter_model.safetensors");
  }
  return file;
}

// The file's keys sorted by module and role: factor keys per module, full modules_to_save tensors
// (straight into targets), base-layer copies (checked once the updates are known); anything else
// is refused by name.
struct PeftKeys {
  std::map<std::string, PeftModuleKeys> modules;
  std::vector<std::pair<std::string, std::string>> base_keys;  // (module, key)
};

PeftKeys sort_peft_keys(const io::SafetensorsFile& f, const std::string& file, const PeftConfig& c,
                        std::vector<AdapterTarget>& targets) {
  PeftKeys keys;
  auto& modules = keys.modules;
  auto& base_keys = keys.base_keys;
  static const std::vector<std::string_view> suffixes = table_suffixes();
  for (const auto& e : f.entries()) {
    const std::string& key = e.name;
    SplitKey sk = split_key(key, suffixes);
    Role role = sk.suffix < 0 ? kOther : kTable[static_cast<size_t>(sk.suffix)].role;
    if (role == kFull && has_adapter_component(sk.module)) role = kOther;
    switch (role) {
      case kOther:
        fail("'", file, "': tensor '", key, "' is not a PEFT ", c.lokr ? "LoKr" : c.loha ? "LoHa" : "LoRA",
             " key graft reads; expected <module>.", c.lokr ? "lokr_w1[_a|_b] / lokr_w2[_a|_b]" :
             c.loha ? "hada_w1_a / hada_w1_b / hada_w2_a / hada_w2_b" :
             "lora_A.weight / lora_B.weight, lora_embedding_A / lora_embedding_B", ", or modules_to_save weights");
      case kDora: {
        if (!c.dora)
          fail("'", file, "': tensor '", key, "' is a DoRA magnitude vector but adapter_config.json does not set "
               "use_dora; expected use_dora: true with magnitude vectors, or plain LoRA factors");
        PeftModuleKeys& mk = modules[sk.module];
        if (!mk.magnitude.empty())
          fail("'", file, "': tensors '", mk.magnitude, "' and '", key, "' are both the DoRA magnitude of module '",
               sk.module, "'; expected one");
        mk.magnitude = key;
        mk.all.push_back(key);
        continue;
      }
      case kLoraBias:
        fail("'", file, "': tensor '", key, "' is a LoRA bias (lora_bias): not supported; expected no bias factors");
      case kTucker:
        fail("'", file, "': tensor '", key, "' is a Tucker core (lokr_t*/hada_t*, conv LoKr/LoHa): not supported; "
             "expected matrix factors only");
      case kBase:
        base_keys.emplace_back(sk.module, key);
        continue;
      case kFull: {
        const std::string name = strip_prefix(sk.module);
        bool listed = false;
        for (const auto& m : c.modules_to_save) listed = listed || ends_with(name, m);
        if (!listed)
          fail("'", file, "': tensor '", key, "' is a full tensor whose module is not listed in modules_to_save "
               "(PEFT saves whole embedding / lm_head weights when the vocabulary was resized; graft does not apply "
               "them); expected LoRA factors or modules_to_save weights");
        AdapterTarget t;
        t.module = sk.module;
        t.param = ends_with(key, ".bias") ? "bias" : "weight";
        t.update = Replacement{read_checked(f, key)};
        t.keys = {key};
        targets.push_back(std::move(t));
        continue;
      }
      default: break;
    }
    const bool is_lokr = role == kLokr, is_loha = role == kLoha;
    if (is_lokr != c.lokr || is_loha != c.loha) {
      const char* kind = is_lokr ? "LoKr" : is_loha ? "LoHa" : "LoRA";
      fail("'", file, "': tensor '", key, "' is a ", kind, " factor but adapter_config.json says peft_type ",
           c.lokr ? "LOKR" : c.loha ? "LOHA" : "LORA", "; expected ",
           c.lokr ? "lokr_* factors" : c.loha ? "hada_* factors" : "lora_A / lora_B factors");
    }
    PeftModuleKeys& mk = modules[sk.module];
    std::string* slot = role == kA ? &mk.a : role == kB ? &mk.b : role == kEA ? &mk.ea : role == kEB ? &mk.eb
                                                                             : &mk.lokr[kTable[sk.suffix].lokr_role];
    if (!slot->empty())
      fail("'", file, "': tensors '", *slot, "' and '", key, "' are the same factor of module '", sk.module,
           "'; expected one spelling per factor");
    *slot = key;
    mk.all.push_back(key);
  }

  return keys;
}

// One half of a PEFT factor pair: its key (empty when absent), its name and its expected shape as
// the messages show them.
struct FactorKey {
  const std::string& key;
  const char* name;
  const char* shape;
};

// A factor pair (down [r, in], up [out, r]: lora_A/lora_B, or lora_embedding_A/B) read and
// checked: both halves present, 2-D, and pairing on r.
std::pair<Tensor, Tensor> read_factor_pair(const io::SafetensorsFile& f, const std::string& file, const FactorKey& down,
                                           const FactorKey& up) {
  if (down.key.empty() || up.key.empty())
    fail("'", file, "': tensor '", down.key.empty() ? up.key : down.key, "' has no partner ",
         down.key.empty() ? down.name : up.name, "; expected both halves of each pair");
  Tensor a = read_checked(f, down.key), b = read_checked(f, up.key);
  need_2d(file, down.key, a, down.shape);
  need_2d(file, up.key, b, up.shape);
  if (a.shape[0] != b.shape[1])
    fail("'", file, "': tensors '", down.key, "' ", shape_str(a.shape), " and '", up.key, "' ", shape_str(b.shape),
         " do not pair; expected ", down.shape, " and ", up.shape);
  return {std::move(a), std::move(b)};
}

// One module's update from its factor keys, the rank and alpha its name resolves to (marking the
// rank/alpha pattern used), and the checks that the tensors pair and match them.
AdapterTarget read_peft_module(const io::SafetensorsFile& f, const std::string& file,
                               const std::string& config_path, PeftConfig& c, const std::string& module,
                               const PeftModuleKeys& mk) {
  const std::string name = strip_prefix(module);
  auto r_pat = c.rank_pattern.resolve(name);
  auto a_pat = c.alpha_pattern.resolve(name);
  const int64_t r = r_pat ? json_positive_int(Json(*r_pat), config_path, "rank_pattern (module " + name + ")") : c.r;
  const double alpha = a_pat ? *a_pat : c.alpha;
  const double scale = c.lokr || c.loha ? alpha / static_cast<double>(r)
                   : c.rslora       ? alpha / std::sqrt(static_cast<double>(r))
                                    : alpha / static_cast<double>(r);
  auto check_rank = [&](int64_t actual, const std::string& key) {
    if (actual != r)
      fail("'", file, "': module '", module, "' has rank ", actual, " (tensor '", key, "') but the config gives r = ",
           r, r_pat ? " (rank_pattern)" : " (r)", "; expected the tensors' rank to match the resolved r");
  };
  AdapterTarget t;
  t.module = module;
  t.keys = mk.all;
  if (c.dora && !mk.magnitude.empty() && mk.a.empty() && mk.b.empty() && mk.ea.empty() && mk.eb.empty())
    fail("'", file, "': tensor '", mk.magnitude, "' is a DoRA magnitude of a module without LoRA factors; expected "
         "lora_A / lora_B beside it");
  if (c.loha) {
    HadamardUpdate u = read_hadamard(f, module, mk.lokr);
    check_rank(u.w1a.shape[1], mk.lokr.at("hada_w1_a"));
    check_rank(u.w2a.shape[1], mk.lokr.at("hada_w2_a"));
    u.scale = static_cast<float>(scale);
    t.update = std::move(u);
  } else if (c.lokr) {
    KroneckerUpdate u = read_kronecker(f, module, mk.lokr);
    if (u.w1_a.data) check_rank(u.w1_a.shape[1], mk.lokr.at("lokr_w1_a"));
    if (u.w2_a.data) check_rank(u.w2_a.shape[1], mk.lokr.at("lokr_w2_a"));
    u.scale = static_cast<float>(scale);
    t.update = std::move(u);
  } else if (!mk.ea.empty() || !mk.eb.empty()) {
    if (!mk.a.empty() || !mk.b.empty())
      fail("'", file, "': module '", module, "' has both linear (lora_A/lora_B) and embedding (lora_embedding_A/B) "
           "factors; expected one kind");
    if (c.dora)
      fail("'", file, "': module '", module, "' is a DoRA embedding (lora_embedding_A/B with use_dora): PEFT "
           "normalizes it per hidden column over the whole vocabulary, which graft does not implement; expected "
           "DoRA on Linear layers only");
    auto [ea, eb] = read_factor_pair(f, file, {mk.ea, "lora_embedding_A", "lora_embedding_A [r, num_embeddings]"},
                                     {mk.eb, "lora_embedding_B", "lora_embedding_B [dim, r]"});
    check_rank(ea.shape[0], mk.ea);
    // ΔW = s·(B_e·A_e)ᵀ = s·A_eᵀ·B_eᵀ → normalized B = A_eᵀ [num_emb, r], A = B_eᵀ [r, dim].
    t.update = LowRankUpdate{transpose_2d(eb), transpose_2d(ea), static_cast<float>(scale)};
    t.embedding = true;
  } else {
    auto [a, b] = read_factor_pair(f, file, {mk.a, "lora_A.weight", "lora_A.weight [r, in]"},
                                   {mk.b, "lora_B.weight", "lora_B.weight [out, r]"});
    check_rank(a.shape[0], mk.a);
    if (c.dora) {
      if (mk.magnitude.empty())
        fail("'", file, "': module '", module, "' has no DoRA magnitude (lora_magnitude_vector) but "
             "adapter_config.json sets use_dora; expected one beside every LoRA pair");
      Tensor m = read_checked(f, mk.magnitude);
      if (m.numel() != b.shape[0] || m.shape.empty() || m.shape.size() > 2 ||
          (m.shape.size() == 2 && m.shape[1] != 1 && m.shape[0] != 1))
        fail("'", file, "': tensor '", mk.magnitude, "' has shape ", shape_str(m.shape), " but module '", module,
             "' has ", b.shape[0], " output rows; expected a DoRA magnitude [", b.shape[0], "]");
      m.shape = {b.shape[0]};
      t.update = DoraUpdate{LowRankUpdate{a, b, static_cast<float>(scale)}, m};
    } else {
      t.update = LowRankUpdate{a, b, static_cast<float>(scale)};
    }
  }
  return t;
}

// Base-layer copies PEFT saved beside adapted modules: kept (with their module) once their shape
// matches the update's.
void take_base_copies(const io::SafetensorsFile& f, const std::string& file,
                      const std::vector<std::pair<std::string, std::string>>& base_keys, WeightAdapter& out) {
  for (const auto& [module, key] : base_keys) {
    const std::string param = ends_with(key, ".bias") ? "bias" : "weight";
    const AdapterTarget* adapted = nullptr;
    for (const auto& t : out.targets)
      if (t.module == module && !std::holds_alternative<Replacement>(t.update)) adapted = &t;
    if (!adapted)
      fail("'", file, "': tensor '", key, "' is a base-layer copy of a module without adapter factors; expected "
           "base_layer weights only beside an adapted module");
    Tensor v = read_checked(f, key);
    if (param == "weight") {
      Shape delta;
      delta = update_delta_shape(adapted->update);
      if (v.shape != delta)
        fail("'", file, "': tensor '", key, "' has shape ", shape_str(v.shape), " but the adapter's update of module '",
             module, "' is ", shape_str(delta), "; expected the base-layer copy to match the update's shape");
    }
    out.base_copies.push_back(BaseWeightCopy{module, param, v, key});
  }
}

}  // namespace

WeightAdapter import_peft(const std::string& dir, const std::string& config_path, const Json& cfg) {
  WeightAdapter out;
  out.path = dir;
  out.format = AdapterFormat::Peft;
  PeftConfig c = read_config(config_path, cfg, out.metadata);
  const std::string file = peft_weights_file(dir);
  out.metadata["file"] = file;
  auto f = io::SafetensorsFile::open(file);

  PeftKeys keys = sort_peft_keys(*f, file, c, out.targets);
  if (!c.target_parameters.empty()) {
    auto named = [&c, &config_path](const std::string& name) -> std::optional<bool> {
      if (c.target_module_regex) {
        if (*c.target_module_regex == "all-linear") return std::nullopt;
        return regex_full_match(*c.target_module_regex, name, config_path, "target_modules");
      }
      for (const auto& t : c.target_module_list)
        if (name == t || ends_with(name, "." + t)) return true;
      return false;
    };
    PeftParamConfig pc{c.target_parameters, named, c.r, c.alpha, c.rslora, &c.rank_pattern, &c.alpha_pattern};
    take_parameter_targets(*f, file, config_path, pc, keys.modules, out.targets);
  }
  for (const auto& [module, mk] : keys.modules) out.targets.push_back(read_peft_module(*f, file, config_path, c, module, mk));
  c.rank_pattern.require_all_used(config_path);
  c.alpha_pattern.require_all_used(config_path);
  take_base_copies(*f, file, keys.base_keys, out);
  if (out.targets.empty())
    fail("'", file, "': no adapter tensors; expected at least one LoRA/LoKr/LoHa factor set");
  finalize_targets(out, file);
  return out;
}

}  // namespace graft::adapter::detail
