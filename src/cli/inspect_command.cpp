// graft inspect: what an adapter file contains, as graft reads it; with --base, whether it binds
// to that model and which base tensors it changes.
#include <cstdio>
#include <iostream>

#include "cli/adapter_args.h"
#include "cli/base_checkpoint.h"
#include "cli/commands.h"
#include "graft/adapter/describe.h"
#include "graft/core/error.h"

namespace graft::cli {

namespace {

struct InspectArgs {
  std::string adapter, base;
  bool json = false;
};

void print_human(const nlohmann::json& d, const nlohmann::json* plan, const std::string& base) {
  std::printf("adapter:  %s\nformat:   %s\ntargets:  %zu\nsize:     %.2f MB\n", d["path"].get<std::string>().c_str(),
              d["format"].get<std::string>().c_str(), d["targets"].size(), d["size_bytes"].get<double>() / 1e6);
  for (auto it = d["metadata"].begin(); it != d["metadata"].end(); ++it)
    std::printf("  %s: %s\n", it.key().c_str(), it->get<std::string>().c_str());
  std::printf("\n%-60s %-8s %-6s %5s %10s %-5s %s\n", "module", "param", "kind", "rank", "scale", "dtype", "delta");
  for (const auto& t : d["targets"]) {
    std::string shape;
    for (const auto& s : t["delta_shape"]) shape += (shape.empty() ? "" : "x") + std::to_string(s.get<int64_t>());
    std::printf("%-60s %-8s %-6s %5s %10.6g %-5s %s\n", t["module"].get<std::string>().c_str(),
                t["param"].get<std::string>().c_str(), t["kind"].get<std::string>().c_str(),
                t.contains("rank") ? std::to_string(t["rank"].get<int64_t>()).c_str() : "-", t["scale"].get<double>(),
                t["dtype"].get<std::string>().c_str(), shape.c_str());
  }
  for (const auto& t : d["targets"])
    if (t.value("dora_magnitude", false)) {
      std::printf("\nDoRA: every 'dora' target carries a magnitude m (one value per output row): W' = m / ||W + s*B*A||_row "
                  "* (W + s*B*A)\n");
      break;
    }
  if (plan) {
    std::printf("\nbinds to %s: OK, %zu base tensor(s) change:\n", base.c_str(), (*plan)["tensors"].size());
    for (const auto& t : (*plan)["tensors"]) std::printf("  %s\n", t["tensor"].get<std::string>().c_str());
  }
}

int run_inspect(const InspectArgs& a) {
  auto uses = read_adapters({parse_adapter_arg(a.adapter, false)});
  nlohmann::json d = adapter::describe_adapter(*uses[0].adapter);
  nlohmann::json plan_json;
  if (!a.base.empty()) {
    BaseCheckpoint base = open_base_checkpoint(a.base);
    auto plan = bind_for_fuse(base, uses, /*allow_quantized=*/true);
    plan_json = adapter::describe_plan(*plan);
    plan_json["base"] = a.base;
    plan_json["base_kind"] = base.kind;
    plan_json["valid"] = true;
  }
  if (a.json) {
    if (!a.base.empty()) d["binding"] = plan_json;
    std::cout << d.dump(2) << std::endl;
  } else {
    print_human(d, a.base.empty() ? nullptr : &plan_json, a.base);
  }
  return 0;
}

}  // namespace

Runner add_inspect_command(CLI::App& app) {
  auto a = std::make_shared<InspectArgs>();
  app.add_option("adapter", a->adapter, "Adapter directory (mlx-lm, PEFT) or file (ComfyUI/kohya/LyCORIS .safetensors, llama.cpp .gguf)")
      ->required();
  app.add_option("--base", a->base, "Also validate against this base model and list the tensors it changes");
  app.add_flag("--json", a->json, "Print JSON instead of a table");
  app.footer("Shows the detected format, every target with its rank, effective scale and dtype, and the size.");
  return [a] { return run_inspect(*a); };
}

}  // namespace graft::cli
