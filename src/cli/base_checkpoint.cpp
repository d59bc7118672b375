#include "cli/base_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/core/error.h"
#include "graft/model/adapter_bindings.h"
#include "graft/model/family.h"
#include "graft/model/loader.h"
#include "graft/model/model_adapters.h"
#include "graft/model/quantized_source.h"

namespace graft::cli {

namespace fs = std::filesystem;

namespace {
// A directory whose config.json names a family graft runs (other checkpoints are bound generically).
bool is_llama_family_dir(const fs::path& dir) {
  std::ifstream in(dir / "config.json");
  if (!in) return false;
  try {
    auto j = nlohmann::json::parse(in);
    if (!j.contains("model_type") || !j["model_type"].is_string()) return false;
    for (const auto& f : model::families())
      if (j["model_type"] == f.model_type) return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return false;
}
}  // namespace

BaseCheckpoint open_base_checkpoint(const std::string& path) {
  if (!fs::exists(path)) fail("base model '", path, "' does not exist");
  BaseCheckpoint b;
  b.path = path;
  b.is_directory = fs::is_directory(path);
  if (!b.is_directory && path.size() > 12 && path.substr(path.size() - 12) == ".safetensors") {
    auto src = io::open_safetensors_source(path);
    b.kind = "safetensors file";
    b.bindings = adapter::bindings_for_source(*src);
    b.source = src;
    return b;
  }
  if (b.is_directory && !is_llama_family_dir(path)) {
    auto src = io::open_safetensors_checkpoint(path);
    b.kind = "safetensors checkpoint";
    b.bindings = adapter::bindings_for_source(*src);
    b.source = src;
    return b;
  }
  model::ModelSource m = model::open_model_source(path);
  b.kind = m.config.model_type + " (" + m.format + ")";
  b.bindings = model::bindings_for_model(m.config, *m.source);
  b.source = m.source;
  b.config = m.config;
  if (auto q = std::dynamic_pointer_cast<const model::QuantizedCheckpointSource>(m.source))
    b.quantized_weights = q->quantized_weights();
  return b;
}

std::shared_ptr<adapter::WeightAdapterPlan> bind_for_fuse(const BaseCheckpoint& base,
                                                          const std::vector<adapter::AdapterUse>& adapters,
                                                          bool allow_quantized) {
  if (!base.config) {
    for (const auto& a : adapters)
      if (a.adapter->format == adapter::AdapterFormat::Gguf)
        fail("GGUF adapter '", a.adapter->path, "' binds to Llama-family models only (llama.cpp tensor names and ",
             "q/k row order need the family); '", base.path, "' is a ", base.kind, " without a supported config.json");
    return adapter::bind_weight_adapter(adapters, base.bindings, *base.source);
  }
  return model::bind_model_adapters(*base.config, *base.source, adapters, model::AdapterPath::Fused,
                                    base.quantized_weights, allow_quantized);
}

}  // namespace graft::cli
