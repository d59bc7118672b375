// PEFT `target_parameters` (LoRA on raw nn.Parameters, chiefly the 3-D expert weights of
// transformers 5 mixture-of-experts blocks), internal to the PEFT importer (import_peft.cpp).
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "import_common.h"

namespace graft::adapter::detail {

// The tensor keys of one module of a PEFT file, by role (import_peft.cpp fills them).
struct PeftModuleKeys {
  std::string a, b, ea, eb, magnitude;
  RoleKeys lokr;
  std::vector<std::string> all;
};

// What the parameter reader needs of adapter_config.json.
struct PeftParamConfig {
  std::vector<std::string> target_parameters;  // as written ("gate_up_proj", "mlp.experts.down_proj")
  // Whether target_modules names a module (stripped of base_model.model.): a list entry equal to
  // it or to a dotted suffix of it, a string by re.fullmatch; nullopt for "all-linear", which
  // names every Linear, and the file does not say which modules are Linear.
  std::function<std::optional<bool>(const std::string&)> named_by_target_modules;
  int64_t r = 8;
  double alpha = 8;
  bool rslora = false;
  PatternTable* rank_pattern = nullptr;
  PatternTable* alpha_pattern = nullptr;
};

// Takes every ParamWrapper level out of `modules` (the module a target parameter names, and the
// `.base_layer` chain PEFT nests when it wraps several parameters of one module) and appends its
// per-expert LoRA pairs to `out`. Throws naming the file, module and key for anything it cannot
// read exactly.
void take_parameter_targets(const io::SafetensorsFile& f, const std::string& file, const std::string& config_path,
                            const PeftParamConfig& pc, std::map<std::string, PeftModuleKeys>& modules,
                            std::vector<AdapterTarget>& out);

}  // namespace graft::adapter::detail
