// graft serve: the llama-server compatible HTTP server (src/server/). Options follow
// llama-server's spellings; the model options are generate's.
#include "cli/commands.h"
#include "cli/model_args.h"
#include "graft/core/error.h"
#include "server/server.h"

namespace graft::cli {

namespace {

struct ServeArgs {
  ModelArgs model;
  server::ServerOptions server;
  std::vector<std::string> loras, loras_scaled;
  bool init_without_apply = false;
};

int run_serve(ServeArgs& a) {
  engine::EngineOptions o = engine_options(a.model);
  // Every adapter argument and file is read and checked before anything is bound.
  o.adapters = read_adapters(adapter_args(a.loras, "--lora", a.loras_scaled, "--lora-scaled"));
  o.fuse = a.server.fuse;
  o.init_without_apply = a.init_without_apply;
  a.server.ctx_size = a.model.ctx_size;
  a.server.cache_type = cache_type(a.model);
  return server::run_server(a.server, o);
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  add_model_options(app, a->model,
                    "Total context in tokens, shared evenly by the --parallel slots (0 = the model's maximum)");
  auto& s = a->server;
  app.add_option("--host", s.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", s.port, "Port to listen on (0: any free port, printed at start)")->capture_default_str();
  app.add_option("--parallel", s.parallel, "Slots: requests decoded together in one batch")->capture_default_str();
  app.add_option("-b,--batch-size", s.batch_size,
                 "Rows of one batched step at most (prompts are evaluated in chunks so decoding never stalls)")
      ->capture_default_str();
  app.add_option("--queue-size", s.queue_size, "Requests that may wait beyond the slots (more get 503)")
      ->capture_default_str();
  app.add_option("--api-key", s.api_key, "Require 'Authorization: Bearer KEY' (or X-Api-Key) on every route but /health");
  app.add_option("--alias", s.alias, "Model name reported by /v1/models and responses (default: the model path)");
  app.add_option("--timeout", s.timeout_s, "Seconds a request may run, and the HTTP read/write timeouts")
      ->capture_default_str();
  app.add_option("--body-limit", s.body_limit, "Largest request body in bytes")->capture_default_str();
  app.add_flag("--metrics", s.metrics, "Serve Prometheus metrics at GET /metrics");
  app.add_option("--lora,--adapter", a->loras,
                 "Adapter(s) served with live scales (ids in command-line order): DIR[,DIR...] (PEFT, mlx-lm, "
                 "kohya/ComfyUI, LyCORIS)");
  app.add_option("--lora-scaled", a->loras_scaled, "Adapter(s) with a default scale: DIR:SCALE[,DIR:SCALE...]");
  app.add_flag("--lora-init-without-apply", a->init_without_apply,
               "Load the adapters with every default scale at 0 (set them with POST /lora-adapters)");
  app.add_flag("--lora-fuse", s.fuse,
               "Bake the adapters into the weights at load (no decode cost; scales fixed for the process)");
  app.footer(
      "Routes: /health /completion /v1/completions /v1/chat/completions /v1/models /tokenize /detokenize /props\n"
      "/lora-adapters /metrics (docs/SERVER.md).\n"
      "Example: graft serve -m models/SmolLM2-135M-Instruct.Q4_1.gguf --lora demo/adapters/pirate-peft --port 8080");
  return [a] { return run_serve(*a); };
}

}  // namespace graft::cli
