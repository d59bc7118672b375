// graft's commands for front ends other than the executable (the Python package, src/python/):
// the same option tables, checks and messages, in process.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graft/core/error.h"
#include "graft/engine/engine.h"

namespace graft::cli {

// What a failed command reports: graft::Error's kind and message; of the other exceptions,
// bad_alloc and length_error are kLimit, system_error (filesystem errors among them) kIo, and the
// rest kInternal. The executable's exit code and the Python exception follow from the kind.
struct Failure {
  ErrorKind kind;
  std::string message;
};
Failure failure_of(const std::exception& e);

// Runs a command line (without the program name: {"fuse", "--base", ...}). A usage error throws
// kBadRequest with CLI11's message; the command's own errors propagate. --help prints and returns 0.
int run_command(const std::vector<std::string>& args);

// What `graft inspect ADAPTER [--base BASE] --json` prints: the adapter's description, and with a
// base its binding under "binding" (what it changes). Throws what inspect reports.
nlohmann::json inspect_json(const std::string& adapter_path, const std::string& base_path = "");

// An adapter argument's local path: hf:ORG/NAME[@REV] fetched from the Hugging Face Hub into its
// cache (graft/hub/hub.h, configured by the environment), anything else unchanged.
std::string resolve_adapter_path(const std::string& path_or_hf);

// `graft generate`'s model and adapter options (-m or --hf-repo, --dtype, --ctx-size, --lora, --adapter, ...),
// parsed from its flags by its own option table. A bad flag or value throws kBadRequest.
class ModelFlags {
 public:
  explicit ModelFlags(const std::vector<std::string>& args);
  // The engine options (every adapter named is read and checked here, before the model; a model
  // or adapter named on the Hub is fetched into the Hugging Face cache first).
  engine::EngineOptions engine_options() const;
  // The context a generation gets: --ctx-size, or min(4096, the model's maximum).
  int64_t context(const model::ModelConfig& config) const;
  DType cache_type() const;
  const std::string& model() const;
  // What the run computes with, on stderr (as `graft generate` prints it).
  void report(engine::Engine& e, const engine::EngineOptions& o) const;

 private:
  struct Parsed;
  std::shared_ptr<Parsed> p_;  // engine_options() writes a Hub model's local path into it
};

}  // namespace graft::cli
