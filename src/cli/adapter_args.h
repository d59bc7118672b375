// Parsing of adapter arguments shared by the subcommands: "DIR" or "DIR:SCALE".
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "graft/adapter/bind.h"

namespace graft::cli {

struct AdapterArg {
  std::string path;
  float scale = 1.0f;
};

// "PATH:SCALE" is split on the last colon, unless PATH:SCALE names an existing file or directory.
// A scale that is not a finite number is an error naming the argument.
AdapterArg parse_adapter_arg(const std::string& arg, bool allow_scale = true);

// "PATH:SCALE" with the scale required (--adapter-scaled / --lora-scaled): split on the last colon.
AdapterArg parse_scaled_adapter_arg(const std::string& arg);

// The entries of comma-separated list options ("a,b" and repeated flags alike), empty ones refused.
std::vector<std::string> split_adapter_list(const std::vector<std::string>& values, const char* option);

// A --dtype value: F32 | F16 | BF16 (either case); empty gives nullopt; anything else is an error.
std::optional<DType> parse_float_dtype(const std::string& value);

// The registry name of an adapter argument that gives none: NAME for hf:ORG/NAME[@REV] (the
// snapshot directory would name it by its commit), "" (the registry's rule: the last path
// component) for a local path.
std::string default_adapter_name(const std::string& path);

// Reads every adapter (import errors name the file) into uses for bind_weight_adapter; a path
// hf:ORG/NAME[@REV] is an adapter on the Hugging Face Hub, fetched into its cache first.
std::vector<adapter::AdapterUse> read_adapters(const std::vector<AdapterArg>& args);

}  // namespace graft::cli
