// cli::ModelFlags (graft/cli/commands.h): `graft generate`'s model and adapter options for the
// Python package, parsed by the same option table.
#include "cli/model_args.h"
#include "graft/cli/commands.h"

namespace graft::cli {

struct ModelFlags::Parsed {
  ModelArgs model;
  AdapterOptions adapters;
};

ModelFlags::ModelFlags(const std::vector<std::string>& args) {
  auto p = std::make_shared<Parsed>();
  CLI::App app("graft.load", "graft.load");
  add_model_options(app, p->model);
  add_adapter_options(app, p->adapters);
  try {
    app.parse(std::vector<std::string>(args.rbegin(), args.rend()));  // CLI11 takes them last first
  } catch (const CLI::ParseError& e) {
    fail_as(ErrorKind::kBadRequest, e.what());
  }
  p_ = std::move(p);
}

engine::EngineOptions ModelFlags::engine_options() const {
  engine::EngineOptions o = cli::engine_options(p_->model);
  apply_adapter_options(p_->adapters, o);
  return o;
}

int64_t ModelFlags::context(const model::ModelConfig& config) const { return context_size(p_->model, config, 4096); }
DType ModelFlags::cache_type() const { return cli::cache_type(p_->model); }
const std::string& ModelFlags::model() const { return p_->model.model; }
std::string resolve_adapter_path(const std::string& path_or_hf) {
  return hub::resolve_adapter(hub_from_environment(), path_or_hf);
}

void ModelFlags::report(engine::Engine& e, const engine::EngineOptions& o) const { report_run(e, o); }

}  // namespace graft::cli
