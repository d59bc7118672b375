// graft serve: the HTTP server (cpp-httplib) over the scheduler. Checks the options, listens at
// once (503 while loading), loads the model on a thread, installs the guards (readiness, API key,
// error bodies) and every route (completion_route.cpp, info_routes.cpp, adapter_routes.cpp,
// embeddings.cpp, web_routes.cpp), and stops cleanly on SIGINT/SIGTERM.
#include <httplib.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <ctime>
#include <thread>

#include "graft/core/error.h"
#include "graft/text/chat_prompt.h"
#include "server/access_log.h"
#include "server/connections.h"
#include "server/response.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "graft/server/server.h"
#include "server/state.h"
#include "server/web_assets.h"

namespace graft::server {

void Routes::get(httplib::Server& svr, const std::string& path, httplib::Server::Handler h) {
  record(path, "GET");
  svr.Get(path, std::move(h));
}

void Routes::post(httplib::Server& svr, const std::string& path, httplib::Server::Handler h) {
  record(path, "POST");
  svr.Post(path, std::move(h));
}

void Routes::record(const std::string& path, const char* method) {
  std::string& m = methods_[path];
  m += (m.empty() ? "" : ", ") + std::string(method);
}

std::string Routes::allowed(const std::string& path) const {
  auto it = methods_.find(path);
  return it == methods_.end() ? std::string() : it->second;
}

std::string truncated(const std::string& s, size_t n) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

std::string adapter_list(const State& st, const std::function<std::string(const engine::AdapterInfo&)>& item,
                         const std::string& more_tail) {
  constexpr size_t kListed = 8;
  const auto list = st.engine->adapters().list();
  std::string out;
  for (size_t i = 0; i < list.size() && i < kListed; ++i) out += (i ? ", " : "") + item(list[i]);
  if (list.size() > kListed) out += ", ... " + std::to_string(list.size() - kListed) + " more" + more_tail;
  return out;
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json; charset=utf-8");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, e.body); }

json parse_body(const httplib::Request& req) {
  try {
    return json::parse(req.body);
  } catch (const json::exception& e) {  // parse errors, and numbers beyond double (1e999)
    fail_as(ErrorKind::kBadRequest, "the request body is not valid JSON: ", truncated(e.what()));
  }
}

ApiError registry_error(const std::exception& e) {
  const auto* ge = dynamic_cast<const Error*>(&e);
  if (ge && ge->kind() == ErrorKind::kUnsupported) return api_error(400, "not_supported_error", e.what());
  return api_error(e);
}

namespace {

void add_guards(httplib::Server& svr, State& st) {
  const LogFormat log_format = parse_log_format(st.opts.log_format);
  svr.set_logger([log_format](const httplib::Request& q, const httplib::Response& r) { write_access_line(q, r, log_format); });
  svr.set_pre_routing_handler([&st](const httplib::Request& q, httplib::Response& res) {
    start_access_note();
    // curl -d sends JSON as application/x-www-form-urlencoded; cpp-httplib would then parse the body
    // as a form and refuse one over 8 KiB with a 413 (its compiled-in form limit). Every route reads
    // the body as JSON whatever its type (llama-server does too), so the type is set to JSON before
    // the body is read. The Request is the server's own non-const object, passed here as const.
    if (q.get_header_value("Content-Type").rfind("application/x-www-form-urlencoded", 0) == 0) {
      auto& headers = const_cast<httplib::Request&>(q).headers;
      headers.erase("Content-Type");
      headers.emplace("Content-Type", "application/json");
    }
    if (q.method == "OPTIONS") {  // what a known path takes (RFC 9110): 204 with Allow, no key needed
      const std::string allowed = st.routes.allowed(q.path);
      if (allowed.empty()) return httplib::Server::HandlerResponse::Unhandled;  // 404 as any unknown path
      res.status = 204;
      res.set_header("Allow", allowed);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (q.path == "/health" || q.path == "/v1/health") return httplib::Server::HandlerResponse::Unhandled;
    // The page's files hold no data: served while loading and without the key (it asks for one).
    if (st.opts.webui && is_web_path(q.path)) return httplib::Server::HandlerResponse::Unhandled;
    if (!st.ready) {
      send_error(res, api_error(503, "unavailable_error", "Loading model"));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!st.opts.api_key.empty()) {
      const std::string auth = q.get_header_value("Authorization"), key = q.get_header_value("X-Api-Key");
      if (auth != "Bearer " + st.opts.api_key && key != st.opts.api_key) {
        send_error(res, api_error(401, "authentication_error", "Invalid API Key"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_error_handler([&st](const httplib::Request& q, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) {
      const std::string allowed = st.routes.allowed(q.path);
      if (allowed.empty()) return send_error(res, api_error(404, "not_found_error", "File Not Found"));
      res.set_header("Allow", allowed);  // a known path asked with another method
      return send_error(res, api_error(405, "invalid_request_error", q.method + " is not allowed on " +
                                                                         truncated(q.path) + " (allowed: " + allowed + ")"));
    }
    if (res.status == 413)
      return send_error(res, api_error(413, "invalid_request_error",
                                       "the request body is larger than the limit of " +
                                           std::to_string(st.opts.body_limit) + " bytes"));
    send_error(res, api_error(res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                              "HTTP status " + std::to_string(res.status)));
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      send_error(res, api_error(e));
    } catch (...) {
      send_error(res, api_error(500, "server_error", "unknown error"));
    }
  });
}

// Options no route could correct later: refused before anything is loaded or bound (exit 2).
void check_options(const ServerOptions& o, const engine::EngineOptions& eo) {
  if (o.parallel < 1) fail_as(ErrorKind::kBadRequest, "--parallel must be >= 1, got ", o.parallel);
  if (o.port < 0 || o.port > 65535) fail_as(ErrorKind::kBadRequest, "--port must be in [0, 65535], got ", o.port);
  if (!(o.timeout_s > 0)) fail_as(ErrorKind::kBadRequest, "--timeout must be > 0 seconds");
  if (o.keep_alive_s < 1) fail_as(ErrorKind::kBadRequest, "--timeout-keep-alive must be >= 1 second, got ", o.keep_alive_s);
  if (o.http_threads < 0) fail_as(ErrorKind::kBadRequest, "--threads-http must be >= 0, got ", o.http_threads);
  if (o.batch_size < 1) fail_as(ErrorKind::kBadRequest, "--batch-size must be >= 1, got ", o.batch_size);
  parse_log_format(o.log_format);
  if (o.allow_runtime_lora && o.lora_root.empty())
    fail_as(ErrorKind::kBadRequest, "--allow-runtime-lora needs --lora-root DIR: the directory runtime adapter paths must "
                                    "stay inside");
  if (!o.lora_root.empty() && !o.allow_runtime_lora)
    fail_as(ErrorKind::kBadRequest, "--lora-root is only used with --allow-runtime-lora");
  for (const auto& [opt, dir] : {std::pair{"--lora-root", o.lora_root}, std::pair{"--lora-dir", o.lora_dir}})
    if (!dir.empty() && !std::filesystem::is_directory(dir))
      fail_as(ErrorKind::kBadRequest, opt, " '", dir, "' is not a directory");
  if (o.kv_block_size < 1 || o.kv_block_size > 4096)
    fail_as(ErrorKind::kBadRequest, "--kv-block-size must be in [1, 4096], got ", o.kv_block_size);
  if (o.kv_events.empty() && (!o.kv_events_replay.empty() || !o.kv_events_topic.empty()))
    fail_as(ErrorKind::kBadRequest, "--kv-events-replay and --kv-events-topic are only used with --kv-events ENDPOINT");
  if (o.pooling && !o.embeddings)
    fail_as(ErrorKind::kBadRequest, "--pooling is only used with --embeddings");
  if (o.fuse && (o.allow_runtime_lora || !o.lora_dir.empty() || eo.residency.max_adapters || eo.residency.max_bytes))
    fail_as(ErrorKind::kBadRequest, "--lora-fuse bakes the startup adapters into the weights: it excludes "
                                    "--allow-runtime-lora, --lora-dir, --max-loras-resident and --lora-memory");
  engine::Engine::check(eo);  // bad adapters are startup errors, before anything is bound
}

// Every connection is a file descriptor, and idle ones are kept (--timeout-keep-alive): the soft
// limit on open files (often 1,024) is raised to the hard one, as nginx and Go programs do.
void raise_open_files_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= r.rlim_max) return;
  r.rlim_cur = std::min<rlim_t>(r.rlim_max, rlim_t{1} << 20);
  setrlimit(RLIMIT_NOFILE, &r);  // best effort: the old limit still works
}

// HTTP workers: a connection holds one only while a request of it is answered (connections.h), so
// enough for every slot and queued request (each waits on its worker) and a few more for the quick
// routes (health, metrics, adapters) beside them.
size_t http_workers(const ServerOptions& o) {
  return o.http_threads > 0 ? static_cast<size_t>(o.http_threads)
                            : static_cast<size_t>(o.parallel) + o.queue_size + 16;
}

// Limits and timeouts of the HTTP server; then it binds (the port it got: --port 0 picks one).
int configure_and_bind(HttpServer& svr, const ServerOptions& o) {
  svr.set_payload_max_length(o.body_limit);
  // Without TCP_NODELAY (cpp-httplib's default is off) a keep-alive client waits for its delayed
  // ACK (~40 ms) on every response written in two segments, and streamed tokens are held back by
  // Nagle's algorithm: measured 43.7 ms per POST /lora-adapters round trip on one connection.
  svr.set_tcp_nodelay(true);
  // A request that stops arriving for 10 s (less with a shorter --timeout) is dropped: slowloris
  // clients wait parked, costing no worker, and are closed then. Idle keep-alive connections are kept
  // --timeout-keep-alive seconds: 65 by default, longer than the 60 s idle timeout of common load
  // balancers, so that the balancer, not graft, closes a pooled connection (a server closing first
  // races the balancer's next request). Each may carry 1,000 requests (nginx's default).
  // Writes (streams to slow readers) keep the whole --timeout.
  const time_t secs = static_cast<time_t>(o.timeout_s);
  svr.set_read_timeout(std::min<time_t>(std::max<time_t>(secs, 1), 10), 0);
  svr.set_write_timeout(secs, 0);
  svr.set_keep_alive_timeout(o.keep_alive_s);
  svr.set_keep_alive_max_count(1000);
  int port = o.port;
  if (port == 0) {
    port = svr.bind_to_any_port(o.host);
    if (port < 0) fail_as(ErrorKind::kIo, "cannot listen on ", o.host);
  } else if (!svr.bind_to_port(o.host, port)) {
    fail_as(ErrorKind::kIo, "cannot listen on ", o.host, ":", port, " (in use, or not an address of this machine)");
  }
  svr.set_listen_backlog(1024);
  return port;
}

// The base model's id when no --alias names it: the file's name without .gguf, or the directory's
// name ("models/SmolLM2-135M-Instruct.Q4_1.gguf" -> "SmolLM2-135M-Instruct.Q4_1"), as vLLM and
// llama-server show a short name rather than a path.
std::string model_id(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // "dir/"
  return p.extension() == ".gguf" ? p.stem().string() : p.filename().string();
}

// The ready line's adapter part: ", fused (Q4_1 x210)" or ", factors bf16", the residency limits, runtime
// loading, embeddings.
std::string adapter_summary(const State& st, const ServerOptions& o) {
  const auto& reg = st.engine->adapters();
  std::string how = reg.fused() ? ", fused" : reg.size() == 0 ? "" : ", factors " + st.lora_dtype;
  if (reg.fused()) {  // the format the changed matrices are held in (requantized, or --fuse-dense)
    how += " (";
    for (const auto& [format, count] : st.engine->model().fused_formats)
      how += (how.back() == '(' ? "" : ", ") + format + " x" + std::to_string(count);
    how += ")";
  }
  if (reg.limits().max_adapters > 0) how += ", at most " + std::to_string(reg.limits().max_adapters) + " resident";
  if (reg.limits().max_bytes > 0) how += ", resident terms <= " + std::to_string(reg.limits().max_bytes >> 20) + " MiB";
  if (o.allow_runtime_lora) how += ", runtime loading from " + o.lora_root;
  if (!o.lora_dir.empty()) how += ", --lora-dir " + o.lora_dir;
  if (o.embeddings) how += std::string(", embeddings (pooling ") + engine::pooling_name(st.pooling) + ")";
  return how;
}

// The startup adapters with their default scales and what a request gets by default, one line (at
// most 8 listed): where the default scales come from is the first thing a person serving adapters
// needs to see (docs/SERVER.md, `--lora`).
void print_adapters(const State& st) {
  const auto& reg = st.engine->adapters();
  if (reg.fused() || reg.size() == 0) return;
  const std::string names = adapter_list(st, [](const engine::AdapterInfo& a) {
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", static_cast<double>(a.scale));
    return a.name + " (id " + std::to_string(a.id) + ", scale " + scale + ")";
  });
  const char* rule = st.routes_by_name
                         ? "a request gets the adapters it names (\"model\") or lists (\"lora\")"
                         : "a request without \"lora\" gets these scales";
  std::fprintf(stderr, "graft serve: adapters: %s; %s\n", names.c_str(), rule);
}

// Loads the model, its adapters and the scheduler into `st` (on the loader thread, while the server
// answers 503), prints the ready line, then marks the server ready.
void load(State& st, const ServerOptions& o, const engine::EngineOptions& eo) {
  st.engine = std::make_unique<engine::Engine>(eo);
  st.lora_dtype = runtime::lora_dtype_name(eo.lora_dtype);
  const auto& m = st.engine->model();
  st.activations = runtime::activations_in_force(m.weights, eo.activations);  // before ready: /props reads it
  if (m.chat_template) st.chat = std::make_unique<text::ChatPrompt>(st.engine->tokenizer(), *m.chat_template, m.chat_template_origin);
  const int64_t total = o.ctx_size > 0 ? o.ctx_size : m.config.max_position_embeddings;
  st.slot_ctx = std::max<int64_t>(2, total / o.parallel);
  st.scheduler = std::make_unique<Scheduler>(*st.engine, SchedulerOptions{.parallel = o.parallel,
                                                                           .slot_ctx = st.slot_ctx,
                                                                           .batch_tokens = o.batch_size,
                                                                           .queue_size = o.queue_size,
                                                                           .cache_type = o.cache_type,
                                                                           .kv_block_size = o.kv_block_size,
                                                                           .kv_events = st.kv_events.get()});
  if (o.embeddings) st.pooling = o.pooling ? *o.pooling : engine::default_pooling(m.config);
  print_adapters(st);
  std::fprintf(stderr, "graft serve: ready (%d slots x %lld tokens, kv cache %s, %zu adapter(s)%s) | activations: %s | %s\n",
               o.parallel, static_cast<long long>(st.slot_ctx), std::string(runtime::kv_cache_type_name(o.cache_type)).c_str(),
               st.engine->adapters().size(), adapter_summary(st, o).c_str(), st.activations.c_str(),
               runtime::describe_kernels(m.weights).c_str());
  st.ready = true;  // after the line above, so a client that sees ready also finds the line in the log
}

// The KV-event publisher of --kv-events, its sockets open (a refused endpoint is a startup error,
// before the HTTP port is bound). The default topic names this host and the model, as llm-d reads it.
std::unique_ptr<KvEventPublisher> open_kv_events(const ServerOptions& o, const std::string& model_name) {
  std::string topic = o.kv_events_topic;
  if (topic.empty()) {
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    topic = "kv@" + std::string(host) + "@" + model_name;
  }
  auto events = std::make_unique<KvEventPublisher>(KvEventOptions{o.kv_events, o.kv_events_replay, topic});
  std::fprintf(stderr, "graft serve: KV events on %s (%s), topic '%s', blocks of %lld tokens%s%s\n", o.kv_events.c_str(),
               binds(o.kv_events) ? "bound" : "connected", topic.c_str(), static_cast<long long>(o.kv_block_size),
               o.kv_events_replay.empty() ? "" : ", replay on ", o.kv_events_replay.c_str());
  return events;
}

}  // namespace

int run_server(const ServerOptions& o, engine::EngineOptions eo) {
  // SIGINT/SIGTERM are taken by this thread alone (sigtimedwait below): block them before any
  // thread starts, so every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  check_options(o, eo);

  State st;
  st.opts = o;
  st.model_path = eo.model;
  st.model_name = o.alias.empty() ? model_id(eo.model) : o.alias;
  st.routes_by_name = o.allow_runtime_lora || !o.lora_dir.empty() ||
                      std::any_of(eo.adapter_names.begin(), eo.adapter_names.end(), [](const auto& n) { return !n.empty(); });
  if (!o.kv_events.empty()) st.kv_events = open_kv_events(o, st.model_name);
  HttpServer svr(http_workers(o));
  add_guards(svr, st);
  add_completion_routes(svr, st);
  add_info_routes(svr, st);
  add_adapter_routes(svr, st);
  if (o.webui) add_web_routes(svr, st.routes);
  add_embedding_routes(svr, st);
  raise_open_files_limit();
  const int port = configure_and_bind(svr, o);
  std::fprintf(stderr, "graft serve: listening on http://%s:%d (loading %s, --activations %s)\n", o.host.c_str(), port,
               eo.model.c_str(), compute::activations_name(eo.activations));
  std::thread http([&svr] { svr.listen_after_bind(); });

  std::atomic<bool> load_done{false};
  std::string load_error;
  std::thread loader([&] {
    try {
      load(st, o, eo);
    } catch (const std::exception& e) {
      load_error = e.what();
    }
    load_done = true;
  });

  int rc = 0;
  for (;;) {
    timespec wait{0, 100 * 1000 * 1000};
    const int sig = sigtimedwait(&sigs, nullptr, &wait);
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "graft serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      break;
    }
    if (load_done && !load_error.empty()) {
      std::fprintf(stderr, "error: %s\n", load_error.c_str());
      rc = 1;
      break;
    }
  }
  loader.join();
  st.ready = false;                         // new requests get 503 from here on
  if (st.scheduler) st.scheduler->stop();   // in-flight requests end (cancelled) and are answered
  svr.stop();
  http.join();
  return rc;
}

}  // namespace graft::server
