// graft serve: a llama-server compatible HTTP server over the engine (src/server/: the server in
// server.cpp, routes in *_routes.cpp, the scheduler in scheduler.h, the JSON surface in request.h
// and response.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "graft/engine/embedding.h"
#include "graft/engine/engine.h"
#include "graft/runtime/kv_cache.h"

namespace graft::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;
  int64_t ctx_size = 0;          // total context, shared evenly by the slots (0: the model's maximum)
  int64_t batch_size = 512;      // rows of one batching step at most
  size_t queue_size = 64;        // requests waiting beyond the slots
  std::string api_key;
  std::string alias;             // the model name reported (default: the model path)
  double timeout_s = 600;        // per request, and the HTTP read/write timeouts
  size_t body_limit = 8u << 20;  // bytes
  bool metrics = false;
  bool fuse = false;             // adapters fused at load (--lora-fuse)
  DType cache_type = runtime::kDefaultKVCacheType;  // KV cache storage of every slot (--cache-type)
  int http_threads = 0;             // HTTP worker threads (0: slots and queue, plus 16)
  int keep_alive_s = 65;            // idle keep-alive connections are closed after this (--timeout-keep-alive)
  bool allow_runtime_lora = false;  // POST /v1/load_lora_adapter, /v1/unload_lora_adapter
  std::string lora_root;            // runtime lora_path values must resolve inside it
  std::string lora_dir;             // an unknown `model` name loads <lora_dir>/<name> on first use
  bool webui = true;                // the web page at "/" (--no-webui turns it off)
  bool embeddings = false;          // serve /v1/embeddings and /embedding(s) (llama-server's --embeddings)
  std::string log_format = "text";  // the access log on stderr: text | json | none (server/access_log.h)
  std::optional<engine::Pooling> pooling;  // --pooling (default: the model's, else last)
  // KV-cache events in vLLM's format (server/kv_events.h): a ZeroMQ endpoint ("" none), the
  // replay socket ("" none), the topic ("" : kv@<hostname>@<model name>), tokens per block.
  std::string kv_events, kv_events_replay, kv_events_topic;
  int64_t kv_block_size = 16;
};

// Checks the model and adapters, listens (answering /health with 503 while the model loads),
// loads, serves until SIGINT/SIGTERM, then stops admitting, cancels in-flight requests and
// returns 0. A startup error throws before anything is bound.
int run_server(const ServerOptions& options, engine::EngineOptions engine_options);

}  // namespace graft::server
