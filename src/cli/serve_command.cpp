// graft serve: the llama-server compatible HTTP server (src/server/). Options follow
// llama-server's spellings; the model options are generate's.
#include <filesystem>

#include "cli/subcommands.h"
#include "cli/model_args.h"
#include "graft/core/error.h"
#include "graft/server/server.h"

namespace graft::cli {

namespace {

struct ServeArgs {
  ModelArgs model;
  server::ServerOptions server;
  std::vector<std::string> loras, loras_scaled;
  bool init_without_apply = false;
  int64_t max_loras_resident = 0, lora_memory_mb = 0;
  std::string pooling;
};

// "NAME=PATH" (vLLM's --lora-modules form) when the part before '=' is a plain name and the whole
// argument is not itself an existing path; else the argument is a path with no name.
std::pair<std::string, std::string> named(const std::string& arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || std::filesystem::exists(arg)) return {"", arg};
  const std::string name = arg.substr(0, eq);
  if (name.find('/') != std::string::npos) return {"", arg};
  return {name, arg.substr(eq + 1)};
}

int run_serve(ServeArgs& a) {
  // A model from the Hub is served under its repo id, as vLLM names it (--alias overrides).
  if (!a.model.hf_repo.empty() && a.server.alias.empty()) a.server.alias = a.model.hf_repo.substr(0, a.model.hf_repo.find(':'));
  engine::EngineOptions o = engine_options(a.model);
  // Every adapter argument and file is read and checked before anything is bound. One starting
  // scale for every --lora adapter of a server, whatever its form: where adapters go by name (any
  // NAME=DIR, runtime loading, --lora-dir: requests pick them with `model`) 0, so a request gets
  // only the adapters it names and a budget can evict the idle ones; where they do not (llama-server's
  // --lora FILE) 1, as llama-server applies them. --lora-scaled gives its own; under --lora-fuse there
  // is no per-request choice: every adapter is baked in at its scale.
  std::vector<std::pair<std::string, std::string>> loras, scaled;  // (name or "", the rest)
  for (const auto& item : split_adapter_list(a.loras, "--lora")) loras.push_back(named(item));
  for (const auto& item : split_adapter_list(a.loras_scaled, "--lora-scaled")) scaled.push_back(named(item));
  bool by_name = a.server.allow_runtime_lora || !a.server.lora_dir.empty();
  for (const auto* list : {&loras, &scaled})
    for (const auto& [name, rest] : *list) by_name = by_name || !name.empty();
  std::vector<AdapterArg> args;
  for (const auto& [name, path] : loras) {
    args.push_back({path, !by_name || a.server.fuse ? 1.0f : 0.0f});
    o.adapter_names.push_back(name.empty() ? default_adapter_name(path) : name);
  }
  for (const auto& [name, rest] : scaled) {
    args.push_back(parse_scaled_adapter_arg(rest));
    o.adapter_names.push_back(name.empty() ? default_adapter_name(args.back().path) : name);
  }
  o.adapters = read_adapters(args);
  if (a.max_loras_resident < 0 || a.lora_memory_mb < 0)
    fail_as(ErrorKind::kBadRequest, "--max-loras-resident and --lora-memory must be >= 0 (0: no limit)");
  o.residency.max_adapters = a.max_loras_resident;
  o.residency.max_bytes = a.lora_memory_mb << 20;
  o.fuse = a.server.fuse;
  o.init_without_apply = a.init_without_apply;
  a.server.ctx_size = a.model.ctx_size;
  a.server.cache_type = cache_type(a.model);
  if (!a.pooling.empty()) a.server.pooling = engine::parse_pooling(a.pooling);
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
  app.add_option("--threads-http", s.http_threads,
                 "HTTP worker threads, each answering one request at a time; connections between requests wait "
                 "without one (0: parallel + queue-size + 16)")
      ->capture_default_str();
  app.add_option("--timeout-keep-alive", s.keep_alive_s,
                 "Seconds an idle keep-alive connection is kept open (an idle connection costs no thread)")
      ->capture_default_str();
  app.add_option("--api-key", s.api_key, "Require 'Authorization: Bearer KEY' (or X-Api-Key) on every route but /health");
  app.add_option("--alias", s.alias, "The base model's id in /v1/models, responses and `model` (default: the file's name without .gguf, or the "
                 "directory's name)");
  app.add_option("--timeout", s.timeout_s, "Seconds a request may run, and the HTTP read/write timeouts")
      ->capture_default_str();
  app.add_option("--body-limit", s.body_limit, "Largest request body in bytes")->capture_default_str();
  app.add_flag("--metrics", s.metrics, "Serve Prometheus metrics at GET /metrics");
  app.add_option("--log-format", s.log_format,
                 "The access log on stderr, one line per request (time, method, path, status, adapters, prompt and "
                 "generated tokens, ms): text | json | none")
      ->check(CLI::IsMember({"text", "json", "none"}))
      ->capture_default_str();
  app.add_flag("--webui,!--no-webui", s.webui,
               "Serve the web page at / (chat, adapter sliders, base vs adapted; default on)");
  app.add_option("--lora,--adapter", a->loras,
                 "Adapter(s) served with live scales (ids in command-line order): DIR[,DIR...] (PEFT, mlx-lm, "
                 "kohya/ComfyUI, LyCORIS, GGUF) named by the last path component, or NAME=DIR, chosen per request "
                 "with \"model\": \"NAME\". Default scale, the same for every --lora: 1 (llama-server's form), or 0 "
                 "where adapters go by name (any NAME=DIR, --allow-runtime-lora, --lora-dir: a request gets what "
                 "it names)");
  app.add_option("--lora-scaled", a->loras_scaled,
                 "Adapter(s) with a default scale: [NAME=]DIR:SCALE[,[NAME=]DIR:SCALE...]");
  app.add_flag("--allow-runtime-lora", s.allow_runtime_lora,
               "Enable POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's routes; needs --lora-root)");
  app.add_option("--lora-root", s.lora_root,
                 "Directory every runtime lora_path must resolve inside (relative paths are taken from it)");
  app.add_option("--lora-dir", s.lora_dir,
                 "Resolve an unknown \"model\" name NAME to the adapter DIR/NAME, loaded on first use");
  app.add_option("--max-loras-resident", a->max_loras_resident,
                 "Adapters whose terms stay built in memory (0: all); beyond it the least recently used idle "
                 "ones keep only their mapped files and are rebuilt on use")
      ->capture_default_str();
  app.add_option("--lora-memory", a->lora_memory_mb, "Megabytes of built adapter terms kept resident (0: no limit)")
      ->capture_default_str();
  app.add_flag("--lora-init-without-apply", a->init_without_apply,
               "Load the adapters with every default scale at 0 (set them with POST /lora-adapters)");
  app.add_flag("--embeddings,--embedding", s.embeddings,
               "Serve POST /v1/embeddings, /embedding and /embeddings (hidden states after the final norm, pooled)");
  app.add_option("--pooling", a->pooling,
                 "Embedding pooling: none|mean|cls|last (default: the model's GGUF pooling_type, else last)")
      ->check(CLI::IsMember({"none", "mean", "cls", "last"}));
  app.add_option("--kv-events", s.kv_events,
                 "Publish KV-cache events in vLLM's format (ZeroMQ PUB) for llm-d's prefix-cache scorer and Dynamo's "
                 "KV router: tcp://*:PORT binds, tcp://HOST:PORT connects, ipc://PATH binds");
  app.add_option("--kv-events-replay", s.kv_events_replay,
                 "ZeroMQ ROUTER endpoint (bound) answering replay requests for the last 10,000 event batches");
  app.add_option("--kv-events-topic", s.kv_events_topic,
                 "Topic of every event message (default: kv@<hostname>@<model name>; llm-d reads kv@<pod>@<model>)");
  app.add_option("--kv-block-size", s.kv_block_size,
                 "Tokens per KV block in events and vllm:cache_config_info (graft's KV is contiguous per slot; blocks "
                 "are how routers count it)")
      ->capture_default_str();
  app.add_flag("--lora-fuse", s.fuse,
               "Bake the adapters into the weights at load (no decode cost; scales fixed for the process)");
  app.footer(
      "Routes: /health /completion /v1/completions /v1/chat/completions /v1/models /tokenize /detokenize /props\n"
      "/lora-adapters /metrics /v1/load_lora_adapter /v1/unload_lora_adapter /v1/completions/render\n"
      "/v1/chat/completions/render /version, with --embeddings /v1/embeddings /embedding, the web page at /\n"
      "(docs/SERVER.md; scale-out: docs/DEPLOY.md).\n"
      "Example: graft serve -m models/SmolLM2-135M-Instruct.Q4_1.gguf --lora demo/adapters/pirate-peft --port 8080");
  return [a] { return run_serve(*a); };
}

}  // namespace graft::cli
