// What the routes of graft serve share (server.cpp and the *_routes.cpp files): the options, the
// engine and scheduler once the model is loaded, and the JSON helpers every route answers with.
#pragma once
#include <httplib.h>

#include <atomic>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "graft/text/chat_prompt.h"
#include "server/response.h"
#include "server/scheduler.h"
#include "graft/server/server.h"

namespace graft::server {

// Every route's path and methods, recorded as the routes are added (then only read), so that a
// known path asked with another method is answered 405 with its Allow header instead of 404.
class Routes {
 public:
  void get(httplib::Server& svr, const std::string& path, httplib::Server::Handler h);
  void post(httplib::Server& svr, const std::string& path, httplib::Server::Handler h);
  // "GET, POST": the methods `path` is served with; "" for a path no route has.
  std::string allowed(const std::string& path) const;

 private:
  void record(const std::string& path, const char* method);
  std::map<std::string, std::string> methods_;  // path -> "GET, POST"
};

struct State {
  ServerOptions opts;
  std::string model_path, model_name;
  // `model` is the adapter routing key (vLLM's rule): some startup adapter was given a NAME=, or
  // adapters load at run time. Then an unknown name is a 404; otherwise it is ignored (llama-server).
  bool routes_by_name = false;
  std::atomic<bool> ready{false};
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<KvEventPublisher> kv_events;  // --kv-events; outlives the scheduler that publishes
  std::unique_ptr<Scheduler> scheduler;
  std::unique_ptr<text::ChatPrompt> chat;
  int64_t slot_ctx = 0;
  int64_t created = std::time(nullptr);
  std::string lora_dtype = "auto";  // --lora-dtype
  std::string activations = "q8";   // --activations
  std::mutex resolve_mu;            // one --lora-dir first use at a time (no duplicate builds)
  // The vocabulary for constrained decoding, built at the first request with a grammar.
  std::once_flag vocab_once;
  std::shared_ptr<const engine::TokenTrie> vocab;
  engine::Pooling pooling = engine::Pooling::Last;  // --pooling, else the model's (resolved at load)
  Routes routes;
};

void send_json(httplib::Response& res, int status, const json& body);
void send_error(httplib::Response& res, const ApiError& e);
// Parses a request body as JSON (kBadRequest naming the problem).
json parse_body(const httplib::Request& req);
// Errors from the adapter registry: under --lora-fuse a change of scales is a 400
// not_supported_error (the request is wrong for this server, not the server incapable).
ApiError registry_error(const std::exception& e);
// A client's value quoted in an error message, cut to n bytes ("..." after).
std::string truncated(const std::string& s, size_t n = 200);
// The registered adapters in a one-line message: the first 8 as `item` writes each, separated by
// ", ", then ", ... N more<more_tail>" (the startup line, a 404's known names).
std::string adapter_list(const State& st, const std::function<std::string(const engine::AdapterInfo&)>& item,
                         const std::string& more_tail = "");

// POST /completion(s), /v1/completions, /v1/chat/completions (completion_route.cpp).
void add_completion_routes(httplib::Server& svr, State& st);
// GET /health, /v1/models, /props, /lora-adapters, /metrics; POST /tokenize, /detokenize,
// /lora-adapters (info_routes.cpp).
void add_info_routes(httplib::Server& svr, State& st);

// POST /v1/load_lora_adapter, POST /v1/unload_lora_adapter (vLLM's lifecycle routes).
void add_adapter_routes(httplib::Server& svr, State& st);
// POST /v1/embeddings, /embedding and /embeddings (embeddings.cpp; 501 without --embeddings).
void add_embedding_routes(httplib::Server& svr, State& st);
// The adapter an OpenAI `model` name selects: none for the base's names (and, on a server without
// runtime adapters, for any unknown name, as llama-server ignores it); a registered adapter's id;
// with --lora-dir an unknown name loaded from there on first use. Throws HttpError (404 unknown
// name in fleet mode, 403 a path escaping --lora-dir) or what loading throws.
std::optional<int64_t> model_adapter(State& st, const std::string& model);
// The `/v1/models` entries of the adapters (id = name, parent = the base id, root = the path).
json adapter_model_entries(const State& st);

}  // namespace graft::server
