#include "cli/adapter_args.h"

#include <cmath>
#include <filesystem>

#include "graft/core/error.h"

namespace graft::cli {

AdapterArg parse_adapter_arg(const std::string& arg, bool allow_scale) {
  if (!allow_scale || std::filesystem::exists(arg)) return {arg, 1.0f};
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos) return {arg, 1.0f};
  const std::string path = arg.substr(0, colon), num = arg.substr(colon + 1);
  size_t used = 0;
  float scale = 0;
  try {
    scale = std::stof(num, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (num.empty() || used != num.size() || !std::isfinite(scale))
    fail("adapter argument '", arg, "': scale '", num, "' is not a finite number (expected PATH or PATH:SCALE)");
  return {path, scale};
}

std::vector<adapter::AdapterUse> read_adapters(const std::vector<AdapterArg>& args) {
  std::vector<adapter::AdapterUse> uses;
  for (const auto& a : args)
    uses.push_back({std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(a.path)), a.scale});
  return uses;
}

}  // namespace graft::cli
