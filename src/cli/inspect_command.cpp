// graft inspect: what an adapter file contains, as graft reads it; with --base, whether it binds
// to that model and which base tensors it changes.
#include <cstdio>
#include <iostream>

#include "cli/adapter_args.h"
#include "cli/base_checkpoint.h"
#include "cli/model_args.h"
#include "cli/subcommands.h"
#include "graft/cli/commands.h"
#include "graft/adapter/describe.h"
#include "graft/core/error.h"

namespace graft::cli {

namespace {

struct InspectArgs {
  std::string adapter, base;
  bool json = false, verbose = false;
};

// "8", "4-16", "2, 0.5": a set of numbers as a person reads it.
std::string numbers(const nlohmann::json& set) {
  std::string out;
  for (const auto& v : set) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v.get<double>());
    out += (out.empty() ? "" : ", ") + std::string(b);
  }
  return out.empty() ? "-" : out;
}

std::string joined(const nlohmann::json& set, size_t at_most = 10) {
  std::string out;
  size_t n = 0;
  for (const auto& v : set) {
    if (n++ == at_most) return out + ", ... (" + std::to_string(set.size()) + " in all)";
    out += (out.empty() ? "" : ", ") + v.get<std::string>();
  }
  return out;
}

// The summary a person reads first; the per-tensor table and the file's metadata with --verbose.
void print_human(const nlohmann::json& d, const nlohmann::json* plan, const std::string& base, bool verbose) {
  const nlohmann::json& s = d["summary"];
  std::string kinds;
  for (auto it = s["kinds"].begin(); it != s["kinds"].end(); ++it)
    kinds += (kinds.empty() ? "" : ", ") + it.key() + " x" + std::to_string(it->get<int64_t>());
  std::printf("adapter:  %s\nformat:   %s\ntargets:  %zu (%s)\n", d["path"].get<std::string>().c_str(),
              d["format"].get<std::string>().c_str(), s["targets"].get<size_t>(), kinds.c_str());
  if (s.contains("layers"))
    std::printf("layers:   %lld-%lld (%lld layers)\n", static_cast<long long>(s["layers"][0].get<int64_t>()),
                static_cast<long long>(s["layers"][1].get<int64_t>()), static_cast<long long>(s["layers"][2].get<int64_t>()));
  std::printf("modules:  %s\nrank:     %s\nscale:    %s (effective: the factor the update is multiplied by)\n"
              "dtype:    %s\nsize:     %.2f MB\n",
              joined(s["modules"]).c_str(), numbers(s["ranks"]).c_str(), numbers(s["scales"]).c_str(),
              joined(s["dtypes"]).c_str(), d["size_bytes"].get<double>() / 1e6);
  if (d["metadata"].contains("base_model_name_or_path"))
    if (const auto& b = d["metadata"]["base_model_name_or_path"]; b.is_string())
      std::printf("trained:  on %s\n", b.get<std::string>().c_str());
  if (plan) std::printf("base:     binds to %s: %zu base tensor(s) change\n", base.c_str(), (*plan)["tensors"].size());
  for (const auto& t : d["targets"])
    if (t.value("dora_magnitude", false)) {
      std::printf("\nDoRA: every 'dora' target carries a magnitude m (one value per output row): W' = m / ||W + s*B*A||_row "
                  "* (W + s*B*A)\n");
      break;
    }
  if (!verbose) {
    std::printf("\n(--verbose: every tensor and the file's metadata; --json: all of it as JSON)\n");
    return;
  }
  std::printf("\nmetadata:\n");
  for (auto it = d["metadata"].begin(); it != d["metadata"].end(); ++it)
    std::printf("  %s: %s\n", it.key().c_str(), it->is_string() ? it->get<std::string>().c_str() : it->dump().c_str());
  std::printf("\n%-60s %-8s %-6s %5s %10s %-5s %s\n", "module", "param", "kind", "rank", "scale", "dtype", "delta");
  for (const auto& t : d["targets"]) {
    std::string shape;
    for (const auto& x : t["delta_shape"]) shape += (shape.empty() ? "" : "x") + std::to_string(x.get<int64_t>());
    std::printf("%-60s %-8s %-6s %5s %10.6g %-5s %s\n", t["module"].get<std::string>().c_str(),
                t["param"].get<std::string>().c_str(), t["kind"].get<std::string>().c_str(),
                t.contains("rank") ? std::to_string(t["rank"].get<int64_t>()).c_str() : "-", t["scale"].get<double>(),
                t["dtype"].get<std::string>().c_str(), shape.c_str());
  }
  if (plan) {
    std::printf("\nbase tensors that change:\n");
    for (const auto& t : (*plan)["tensors"]) std::printf("  %s\n", t["tensor"].get<std::string>().c_str());
  }
}

int run_inspect(const InspectArgs& a) {
  const nlohmann::json d = inspect_json(a.adapter, a.base);
  if (a.json) {
    std::cout << d.dump(2) << std::endl;
  } else {
    print_human(d, a.base.empty() ? nullptr : &d["binding"], a.base, a.verbose);
  }
  return 0;
}

}  // namespace

nlohmann::json inspect_json(const std::string& adapter_path, const std::string& base_path) {
  auto uses = read_adapters({parse_adapter_arg(adapter_path, false)});
  nlohmann::json d = adapter::describe_adapter(*uses[0].adapter);
  if (!base_path.empty()) {
    BaseCheckpoint base = open_base_checkpoint(local_model_path(base_path));
    auto plan = bind_for_fuse(base, uses, /*allow_quantized=*/true);
    nlohmann::json binding = adapter::describe_plan(*plan);
    binding["base"] = base_path;
    binding["base_kind"] = base.kind;
    binding["valid"] = true;
    d["binding"] = std::move(binding);
  }
  return d;
}

Runner add_inspect_command(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  app.add_option("adapter", a->adapter, "Adapter directory (mlx-lm, PEFT) or file (ComfyUI/kohya/LyCORIS .safetensors, llama.cpp .gguf)")
      ->required();
  app.add_option("--base", a->base, "Also validate against this base model and list the tensors it changes");
  app.add_flag("--json", a->json, "Print JSON instead of text (numbers as numbers; targets in layer order)");
  app.add_flag("-v,--verbose", a->verbose, "Also list every tensor (rank, effective scale, dtype, shape) and the metadata");
  app.footer("Shows a summary first: the format, targets by kind, layers, modules, ranks, effective scales, dtype and\n"
             "size, and with --base whether it binds. --verbose adds the per-tensor list.");
  return [a] { return run_inspect(*a); };
}

}  // namespace graft::cli
