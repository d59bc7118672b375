#include "cli/adapter_args.h"

#include <cmath>
#include <filesystem>

#include "cli/model_args.h"
#include "graft/core/error.h"

namespace graft::cli {

namespace {

// arg split at `colon` into PATH and a scale that must be a finite number.
AdapterArg split_scaled(const std::string& arg, size_t colon, const char* expected) {
  const std::string path = arg.substr(0, colon), num = arg.substr(colon + 1);
  size_t used = 0;
  float scale = 0;
  try {
    scale = std::stof(num, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (num.empty() || used != num.size() || !std::isfinite(scale))
    fail_as(ErrorKind::kBadRequest, "adapter argument '", arg, "': scale '", num, "' is not a finite number (expected ", expected, ")");
  return {path, scale};
}

}  // namespace

AdapterArg parse_adapter_arg(const std::string& arg, bool allow_scale) {
  if (!allow_scale || std::filesystem::exists(arg)) return {arg, 1.0f};
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos || (colon == 2 && arg.rfind("hf:", 0) == 0)) return {arg, 1.0f};
  return split_scaled(arg, colon, "PATH or PATH:SCALE");
}

AdapterArg parse_scaled_adapter_arg(const std::string& arg) {
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos || colon == 0 || (colon == 2 && arg.rfind("hf:", 0) == 0))
    fail_as(ErrorKind::kBadRequest, "adapter argument '", arg, "': expected PATH:SCALE (split on the last colon)");
  return split_scaled(arg, colon, "PATH:SCALE");
}

std::vector<std::string> split_adapter_list(const std::vector<std::string>& values, const char* option) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    size_t start = 0;
    for (;;) {
      const size_t comma = v.find(',', start);
      const std::string item = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (item.empty()) fail_as(ErrorKind::kBadRequest, option, " '", v, "': empty entry in the comma-separated list");
      out.push_back(item);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

std::optional<DType> parse_float_dtype(const std::string& value) {
  if (value.empty()) return std::nullopt;
  if (value == "f32" || value == "F32") return DType::F32;
  if (value == "f16" || value == "F16") return DType::F16;
  if (value == "bf16" || value == "BF16") return DType::BF16;
  fail_as(ErrorKind::kBadRequest, "--dtype '", value, "' is not one of F32, F16, BF16");
}

std::string default_adapter_name(const std::string& path) {
  const auto ref = hub::parse_hf_ref(path);
  return ref ? ref->name() : "";
}

std::vector<adapter::AdapterUse> read_adapters(const std::vector<AdapterArg>& args) {
  std::vector<adapter::AdapterUse> uses;
  for (const auto& a : args) {
    // hf:ORG/NAME[@REV]: the adapter's files from the Hub, into the Hugging Face cache first.
    const std::string path = hub::parse_hf_ref(a.path) ? hub::resolve_adapter(hub_from_environment(), a.path) : a.path;
    uses.push_back({std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(path)), a.scale});
  }
  return uses;
}

}  // namespace graft::cli
