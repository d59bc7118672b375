// graft serve: HTTP routes (cpp-httplib) over the scheduler. Each request is parsed and checked
// completely, its adapter scales resolved (its admission snapshot), then queued; its events come
// back through its job's channel, as one JSON response or as server-sent events.
#include <httplib.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <ctime>
#include <random>
#include <thread>

#include "graft/core/error.h"
#include "graft/text/chat_prompt.h"
#include "server/api.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "graft/server/server.h"
#include "server/state.h"
#include "server/web_assets.h"

namespace graft::server {

namespace {

using Clock = std::chrono::steady_clock;

std::string truncated(const std::string& s, size_t n = 200) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

}  // namespace

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

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string s = prefix;
  for (int i = 0; i < 24; ++i) s += hex[rng() % 16];
  return s;
}

std::string sse(const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; }

void accumulate(Completed& c, JobEvent& e) {
  c.text += e.text;
  c.tokens.insert(c.tokens.end(), e.tokens.begin(), e.tokens.end());
  for (auto& p : e.probs) c.probs.push_back(std::move(p));
  c.token_probs.insert(c.token_probs.end(), e.token_probs.begin(), e.token_probs.end());
}

// One streamed response in progress: its choices' jobs (one but with OpenAI's n), sharing a channel.
struct StreamState {
  std::vector<std::shared_ptr<CompletionJob>> jobs;
  CompletionRequest req;
  Route route;
  std::vector<Completed> done;
  std::vector<int64_t> offsets;  // completions logprobs' text_offset, per choice
  std::vector<ToolCallStream> tool_streams;  // chat with tools: per choice, its text parsed as it comes
  std::string id;
  int finals = 0;
  bool role_sent = false, finished = false;
  void cancel() {
    for (auto& j : jobs) j->cancelled = true;
  }
};

// Refuses what the slots cannot hold (more choices than slots, a prompt over a slot's context, an
// empty prompt); true when it answered.
bool refuse_request(State& st, const CompletionRequest& req, httplib::Response& res) {
  const int parallel = st.scheduler->options().parallel;
  if (req.n > parallel) {
    send_error(res, api_error(400, "invalid_request_error",
                              "field 'n' must be in [1, " + std::to_string(parallel) +
                                  "]: at most --parallel choices, each decoded in its own slot"));
    return true;
  }
  if (static_cast<int64_t>(req.prompt.size()) >= st.slot_ctx) {
    send_error(res, api_error(400, "exceed_context_size_error",
                              "the request (" + std::to_string(req.prompt.size()) +
                                  " tokens) exceeds the available context size (" + std::to_string(st.slot_ctx) +
                                  " tokens per slot, with room for one generated token); raise --ctx-size or "
                                  "shorten the prompt"));
    return true;
  }
  if (req.prompt.empty()) {
    send_error(res, api_error(400, "invalid_request_error", "the prompt is empty"));
    return true;
  }
  return false;
}

// The request's jobs: choice 0 (`job`, its adapters resolved) and its followers.
std::vector<std::shared_ptr<CompletionJob>> make_jobs(State& st, const CompletionRequest& req,
                                                      std::shared_ptr<CompletionJob> job) {
  engine::Engine& eng = *st.engine;
  job->prompt = req.prompt;
  job->params = req.params;
  if (job->params.grammar) {
    std::call_once(st.vocab_once, [&] { st.vocab = engine::grammar_vocabulary(eng.tokenizer()); });
    job->params.grammar_vocab = st.vocab;
  }
  job->cache_prompt = req.cache_prompt;
  job->deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(st.opts.timeout_s * 1e3));
  // n > 1: choice i is its own sequence with seed + i, started once choice 0 has evaluated the
  // prompt, whose KV it copies (Scheduler::start).
  std::vector<std::shared_ptr<CompletionJob>> jobs{job};
  for (int32_t i = 1; i < req.n; ++i) {
    auto j = std::make_shared<CompletionJob>();
    j->prompt = job->prompt;
    j->params = job->params;
    j->params.sampling.seed = job->params.sampling.seed + static_cast<uint64_t>(i);
    j->adapters = job->adapters;
    j->cache_prompt = job->cache_prompt;
    j->deadline = job->deadline;
    j->index = i;
    j->leader = job;
    j->channel = job->channel;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

// Admits every job, or none: a refusal cancels those already admitted and is rethrown.
void submit_all(State& st, const std::vector<std::shared_ptr<CompletionJob>>& jobs) {
  for (size_t i = 0; i < jobs.size(); ++i) {
    try {
      st.scheduler->submit(jobs[i]);
    } catch (...) {
      for (size_t k = 0; k < i; ++k) jobs[k]->cancelled = true;
      throw;
    }
  }
}

// The whole answer at once (stream: false): waits for every choice's final event.
void answer_whole(const std::vector<std::shared_ptr<CompletionJob>>& jobs, const CompletionRequest& req, Route route,
                  const text::Tokenizer& tok, const std::string& id, const std::string& model, httplib::Response& res) {
  const auto& job = jobs[0];
  std::vector<Completed> cs(jobs.size());
  const Completed* failed = nullptr;
  for (size_t finals = 0; finals < jobs.size();) {
    JobEvent e;
    if (!job->pop(e, std::chrono::milliseconds(100))) continue;
    Completed& c = cs.at(static_cast<size_t>(e.index));
    const bool last = e.final;
    if (last) {
      c.final = e;
      ++finals;
      if (e.failed && !failed) failed = &c;
    }
    accumulate(c, e);
  }
  if (failed) {
    const Error err(failed->final.error, failed->final.error_kind);
    return send_error(res, api_error(err));
  }
  if (route == Route::Completion) return send_json(res, 200, completion_response(cs[0], req, tok, model));
  return send_json(res, 200, oai_response(cs, req, tok, route, id, std::time(nullptr), model));
}

// One step of a streamed answer (server-sent events): the next event of any choice as its chunks;
// false ends the stream (the client went away, or a write failed).
bool stream_step(StreamState& ss, const std::string& model, int64_t created, const text::Tokenizer& tok,
                 httplib::DataSink& sink) {
  auto write = [&](const std::string& s) {
    if (!sink.write(s.data(), s.size())) {
      ss.cancel();
      return false;
    }
    return true;
  };
  if (ss.finished) return false;
  if (!sink.is_writable()) {  // the client went away: free the slots at the next token
    ss.cancel();
    return false;
  }
  if (ss.route == Route::OaiChat && !ss.role_sent) {
    ss.role_sent = true;
    for (size_t i = 0; i < ss.jobs.size(); ++i)
      if (!write(sse(oai_chunk(ss.route, ss.id, created, model, nullptr, nullptr, true, static_cast<int>(i)))))
        return false;
  }
  JobEvent e;
  if (!ss.jobs[0]->pop(e, std::chrono::milliseconds(50))) return true;
  if (e.final && e.failed) {
    const Error err(e.error, e.error_kind);
    write(sse(api_error(err).body));
    ss.cancel();
    ss.finished = true;
    sink.done();
    return true;
  }
  const int index = e.index;
  Completed& done = ss.done.at(static_cast<size_t>(index));
  const bool last = e.final;
  if (last) done.final = e;
  auto write_deltas = [&](std::vector<json> deltas, json lp) {
    if (deltas.empty() && !lp.is_null()) deltas.push_back(json::object());
    for (size_t k = 0; k < deltas.size(); ++k)
      if (!write(sse(oai_chat_delta_chunk(ss.id, created, model, std::move(deltas[k]), index,
                                          k == 0 ? std::move(lp) : json(nullptr)))))
        return false;
    return true;
  };
  ToolCallStream* tools = ss.tool_streams.empty() ? nullptr : &ss.tool_streams.at(static_cast<size_t>(index));
  if (tools && (!e.text.empty() || !e.tokens.empty())) {
    json lp = nullptr;
    if (ss.req.logprobs)
      lp = oai_logprobs(ss.route, e.tokens, e.probs, e.token_probs, ss.req.top_logprobs, tok,
                        ss.offsets[static_cast<size_t>(index)]);
    accumulate(done, e);
    if (!write_deltas(tools->feed(e.text), std::move(lp))) return false;
  } else if (!e.text.empty() || !e.tokens.empty()) {
    json chunk;
    if (ss.route == Route::Completion) {
      chunk = completion_stream_chunk(e, tok);
    } else {
      json lp = nullptr;
      if (ss.req.logprobs)
        lp = oai_logprobs(ss.route, e.tokens, e.probs, e.token_probs, ss.req.top_logprobs, tok,
                          ss.offsets[static_cast<size_t>(index)]);
      chunk = oai_chunk(ss.route, ss.id, created, model, &e.text, nullptr, false, index, std::move(lp));
    }
    accumulate(done, e);
    if (!write(sse(chunk))) return false;
  } else {
    accumulate(done, e);
  }
  if (last) {
    ++ss.finals;
    if (ss.route == Route::Completion) {
      if (!write(sse(completion_stream_final(done, ss.req, tok, model)))) return false;
    } else if (tools) {
      if (!write_deltas(tools->finish(), nullptr)) return false;
      const char* why = finish_reason(e.reason, tools->has_calls());
      if (!write(sse(oai_chat_delta_chunk(ss.id, created, model, json::object(), index, nullptr, why)))) return false;
    } else if (!write(sse(oai_chunk(ss.route, ss.id, created, model, nullptr, finish_reason(e.reason), false,
                                    index)))) {
      return false;
    }
    if (ss.finals == static_cast<int>(ss.jobs.size())) {
      if (ss.route != Route::Completion) {
        if (ss.req.include_usage && !write(sse(oai_usage_chunk(ss.done, ss.route, ss.id, created, model))))
          return false;
        if (!write("data: [DONE]\n\n")) return false;
      }
      ss.finished = true;
      sink.done();
    }
  }
  return true;
}

void handle_completion(State& st, Route route, const httplib::Request& http, httplib::Response& res) {
  engine::Engine& eng = *st.engine;
  CompletionRequest req;
  auto job = std::make_shared<CompletionJob>();
  try {
    req = parse_completion_request(parse_body(http), route, eng.tokenizer(), st.chat.get(),
                                   eng.model().config.eos_token_ids);
  } catch (const std::exception& e) {
    return send_error(res, api_error(e));
  }
  if (refuse_request(st, req, res)) return;
  try {
    // `model` naming an adapter selects it (vLLM); `lora` scales override (docs/SERVER.md).
    job->adapters = eng.adapters().select(model_adapter(st, req.model), req.lora);
  } catch (const std::exception& e) {
    return send_error(res, registry_error(e));
  }
  const std::vector<std::shared_ptr<CompletionJob>> jobs = make_jobs(st, req, job);
  try {
    submit_all(st, jobs);
  } catch (const std::exception& e) {
    return send_error(res, api_error(e));
  }
  const std::string model = req.model.empty() ? st.model_name : req.model;
  const std::string id = random_id(route == Route::OaiChat ? "chatcmpl-" : "cmpl-");
  if (!req.stream) return answer_whole(jobs, req, route, eng.tokenizer(), id, model, res);

  auto ss = std::make_shared<StreamState>();
  ss->jobs = jobs;
  ss->req = std::move(req);
  ss->route = route;
  ss->id = id;
  ss->done.resize(jobs.size());
  ss->offsets.assign(jobs.size(), 0);
  if (ss->req.tools)
    ss->tool_streams.assign(jobs.size(), ToolCallStream(ss->req.tools->style, ss->req.tools->max_calls()));
  const int64_t created = std::time(nullptr);
  const text::Tokenizer* tok = &eng.tokenizer();
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [ss, model, created, tok](size_t, httplib::DataSink& sink) { return stream_step(*ss, model, created, *tok, sink); },
      [ss](bool success) {
        if (!success || !ss->finished) ss->cancel();
      });
}

int64_t parameter_count(const model::ModelConfig& c) {
  const int64_t H = c.hidden_size, L = c.num_layers;
  int64_t n = c.vocab_size * H * (c.tie_word_embeddings ? 1 : 2) + H;
  n += L * (H * c.q_dim() * 2 + H * c.kv_dim() * 2 + 2 * H);
  for (int64_t l = 0; l < L; ++l)  // a sparse layer: the router and every expert
    n += c.layer_is_sparse(l) ? c.num_experts * (H + 3 * H * c.moe_intermediate_size) : 3 * H * c.intermediate_size;
  return n;
}

void add_routes(httplib::Server& svr, State& st) {
  for (const char* path : {"/health", "/v1/health"})
    svr.Get(path, [&st](const httplib::Request&, httplib::Response& res) {
      if (!st.ready) return send_error(res, api_error(503, "unavailable_error", "Loading model"));
      send_json(res, 200, json{{"status", "ok"}});
    });
  for (const char* path : {"/completion", "/completions"})
    svr.Post(path, [&st](const httplib::Request& q, httplib::Response& r) { handle_completion(st, Route::Completion, q, r); });
  svr.Post("/v1/completions",
           [&st](const httplib::Request& q, httplib::Response& r) { handle_completion(st, Route::OaiCompletion, q, r); });
  for (const char* path : {"/v1/chat/completions", "/chat/completions"})
    svr.Post(path, [&st](const httplib::Request& q, httplib::Response& r) { handle_completion(st, Route::OaiChat, q, r); });

  for (const char* path : {"/v1/models", "/models"})
    svr.Get(path, [&st](const httplib::Request&, httplib::Response& res) {
      const auto& m = st.engine->model();
      int64_t bytes = m.weights.lm_head.nbytes() + m.weights.embed.nbytes();
      for (const auto& L : m.weights.layers)
        for (const model::Matrix* t : L.matrices()) bytes += t->nbytes();
      json meta{{"vocab_type", 2},
                {"n_vocab", m.config.vocab_size},
                {"n_ctx", st.slot_ctx},
                {"n_ctx_train", m.config.max_position_embeddings},
                {"n_embd", m.config.hidden_size},
                {"n_params", parameter_count(m.config)},
                {"size", bytes}};
      json entry{{"id", st.model_name}, {"object", "model"}, {"created", st.created}, {"owned_by", "llamacpp"},
                 {"root", st.model_path}, {"parent", nullptr}, {"meta", meta}};
      json data = json::array({entry});
      for (auto& a : adapter_model_entries(st)) data.push_back(std::move(a));
      send_json(res, 200, json{{"object", "list"}, {"data", data}});
    });

  svr.Get("/props", [&st](const httplib::Request&, httplib::Response& res) {
    json params{{"n_predict", -1}, {"temperature", 0.8}, {"top_k", 40}, {"top_p", 0.95}, {"min_p", 0.05},
                {"repeat_penalty", 1.0}, {"repeat_last_n", 64}, {"seed", -1}, {"cache_prompt", true}};
    send_json(res, 200,
              json{{"default_generation_settings", json{{"n_ctx", st.slot_ctx}, {"params", params}}},
                   {"total_slots", st.scheduler->options().parallel},
                   {"cache_type", std::string(runtime::kv_cache_type_name(st.scheduler->options().cache_type))},
                   {"lora_dtype", st.lora_dtype},
                   {"activations", st.activations},
                   {"model_alias", st.model_name},
                   {"model_path", st.model_path},
                   {"chat_template", st.chat ? st.chat->source() : std::string()},
                   {"modalities", json{{"vision", false}, {"audio", false}}},
                   {"build_info", "graft 0.1.0"}});
  });

  svr.Post("/tokenize", [&st](const httplib::Request& q, httplib::Response& res) {
    try {
      const json b = parse_body(q);
      if (!b.is_object() || !b.contains("content") || !b["content"].is_string())
        fail_as(ErrorKind::kBadRequest, "field 'content' must be a string");
      auto flag = [&](const char* f, bool d) {
        if (!b.contains(f)) return d;
        if (!b[f].is_boolean()) fail_as(ErrorKind::kBadRequest, "field '", f, "' must be true or false");
        return b[f].get<bool>();
      };
      const auto& tok = st.engine->tokenizer();
      const auto ids = tok.encode(b["content"].get<std::string>(), flag("parse_special", true), flag("add_special", false));
      if (!flag("with_pieces", false)) return send_json(res, 200, json{{"tokens", ids}});
      json out = json::array();
      for (int32_t id : ids) {
        const std::string piece = tok.token_bytes(id);
        json p = json::array();
        bool utf8 = true;
        try {
          (void)json(piece).dump();
        } catch (const json::type_error&) {
          utf8 = false;
        }
        if (utf8) {
          p = piece;
        } else {
          for (unsigned char c : piece) p.push_back(static_cast<int>(c));
        }
        out.push_back(json{{"id", id}, {"piece", p}});
      }
      send_json(res, 200, json{{"tokens", out}});
    } catch (const std::exception& e) {
      send_error(res, api_error(e));
    }
  });

  svr.Post("/detokenize", [&st](const httplib::Request& q, httplib::Response& res) {
    try {
      const json b = parse_body(q);
      if (!b.is_object() || !b.contains("tokens") || !b["tokens"].is_array())
        fail_as(ErrorKind::kBadRequest, "field 'tokens' must be an array of token ids");
      const auto& tok = st.engine->tokenizer();
      std::vector<int32_t> ids;
      for (const auto& v : b["tokens"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tok.vocab_size())
          fail_as(ErrorKind::kBadRequest, "field 'tokens': ", truncated(v.dump()), " is not a token id in [0, ",
                  tok.vocab_size(), ")");
        ids.push_back(v.get<int32_t>());
      }
      send_json(res, 200, json{{"content", tok.decode(ids)}});
    } catch (const std::exception& e) {
      send_error(res, api_error(e));
    }
  });

  svr.Get("/lora-adapters", [&st](const httplib::Request&, httplib::Response& res) {
    json out = json::array();
    for (const auto& a : st.engine->adapters().list())
      out.push_back(json{{"id", a.id}, {"name", a.name}, {"path", a.path}, {"scale", a.scale},
                         {"task_name", a.task_name}, {"prompt_prefix", a.prompt_prefix},
                         {"generation", a.generation}, {"resident", a.resident}, {"rank", a.rank},
                         {"bytes", a.bytes}, {"digest", "sha256:" + engine::digest_hex(a.content_digest)}});
    send_json(res, 200, out);
  });
  svr.Post("/lora-adapters", [&st](const httplib::Request& q, httplib::Response& res) {
    try {
      const json b = parse_body(q);
      if (!b.is_array()) fail_as(ErrorKind::kBadRequest, "Request body must be an array");
      st.engine->adapters().set_defaults(parse_lora_list(b, "lora-adapters"));
      send_json(res, 200, json{{"success", true}});
    } catch (const std::exception& e) {
      send_error(res, registry_error(e));
    }
  });

  svr.Get("/metrics", [&st](const httplib::Request&, httplib::Response& res) {
    if (!st.opts.metrics)
      return send_error(res, api_error(501, "not_supported_error",
                                       "This server does not support metrics endpoint. Start it with `--metrics`"));
    const auto& reg = st.engine->adapters();
    const int64_t max_lora = reg.limits().max_adapters > 0 ? reg.limits().max_adapters : st.opts.parallel;
    res.set_content(prometheus_text(st.scheduler->stats(), reg.list(), reg.stats(), max_lora),
                    "text/plain; version=0.0.4");
  });
}

void add_guards(httplib::Server& svr, State& st) {
  svr.set_pre_routing_handler([&st](const httplib::Request& q, httplib::Response& res) {
    if (q.method == "OPTIONS" || q.path == "/health" || q.path == "/v1/health") return httplib::Server::HandlerResponse::Unhandled;
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
  svr.set_error_handler([&st](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) return send_error(res, api_error(404, "not_found_error", "File Not Found"));
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

}  // namespace

int run_server(const ServerOptions& o, engine::EngineOptions eo) {
  // SIGINT/SIGTERM are taken by this thread alone (sigtimedwait below): block them before any
  // thread starts, so every thread inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  if (o.parallel < 1) fail_as(ErrorKind::kBadRequest, "--parallel must be >= 1, got ", o.parallel);
  if (o.port < 0 || o.port > 65535) fail_as(ErrorKind::kBadRequest, "--port must be in [0, 65535], got ", o.port);
  if (!(o.timeout_s > 0)) fail_as(ErrorKind::kBadRequest, "--timeout must be > 0 seconds");
  if (o.batch_size < 1) fail_as(ErrorKind::kBadRequest, "--batch-size must be >= 1, got ", o.batch_size);
  if (o.allow_runtime_lora && o.lora_root.empty())
    fail_as(ErrorKind::kBadRequest, "--allow-runtime-lora needs --lora-root DIR: the directory runtime adapter paths must "
                                    "stay inside");
  if (!o.lora_root.empty() && !o.allow_runtime_lora)
    fail_as(ErrorKind::kBadRequest, "--lora-root is only used with --allow-runtime-lora");
  for (const auto& [opt, dir] : {std::pair{"--lora-root", o.lora_root}, std::pair{"--lora-dir", o.lora_dir}})
    if (!dir.empty() && !std::filesystem::is_directory(dir))
      fail_as(ErrorKind::kBadRequest, opt, " '", dir, "' is not a directory");
  if (o.pooling && !o.embeddings)
    fail_as(ErrorKind::kBadRequest, "--pooling is only used with --embeddings");
  if (o.fuse && (o.allow_runtime_lora || !o.lora_dir.empty() || eo.residency.max_adapters || eo.residency.max_bytes))
    fail_as(ErrorKind::kBadRequest, "--lora-fuse bakes the startup adapters into the weights: it excludes "
                                    "--allow-runtime-lora, --lora-dir, --max-loras-resident and --lora-memory");
  engine::Engine::check(eo);  // bad adapters are startup errors, before anything is bound

  State st;
  st.opts = o;
  st.model_path = eo.model;
  st.model_name = o.alias.empty() ? eo.model : o.alias;
  httplib::Server svr;
  // cpp-httplib gives each connection a worker thread until it closes. Enough workers for every
  // slot and queued request, plus headroom so a thousand idle keep-alive connections do not starve
  // real ones (threads waiting on a socket cost a little stack, not CPU).
  const size_t threads = o.http_threads > 0 ? static_cast<size_t>(o.http_threads)
                                            : static_cast<size_t>(2 * (o.parallel + static_cast<int>(o.queue_size)) + 1032);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  svr.set_payload_max_length(o.body_limit);
  // Without TCP_NODELAY (cpp-httplib's default is off) a keep-alive client waits for its delayed
  // ACK (~40 ms) on every response written in two segments, and streamed tokens are held back by
  // Nagle's algorithm: measured 43.7 ms per POST /lora-adapters round trip on one connection.
  svr.set_tcp_nodelay(true);
  // Reads wait at most 10 s for a request's next bytes (less with a shorter --timeout): a client
  // that stops in the middle of a request line (slowloris) frees its worker then, instead of after
  // --timeout. Writes (streams to slow readers) keep the whole --timeout.
  const time_t secs = static_cast<time_t>(o.timeout_s);
  svr.set_read_timeout(std::min<time_t>(std::max<time_t>(secs, 1), 10), 0);
  svr.set_write_timeout(secs, 0);
  add_guards(svr, st);
  add_routes(svr, st);
  add_adapter_routes(svr, st);
  if (o.webui) add_web_routes(svr);
  add_embedding_routes(svr, st);
  int port = o.port;
  if (port == 0) {
    port = svr.bind_to_any_port(o.host);
    if (port < 0) fail_as(ErrorKind::kIo, "cannot listen on ", o.host);
  } else if (!svr.bind_to_port(o.host, port)) {
    fail_as(ErrorKind::kIo, "cannot listen on ", o.host, ":", port, " (in use, or not an address of this machine)");
  }
  std::fprintf(stderr, "graft serve: listening on http://%s:%d (loading %s, --activations %s)\n", o.host.c_str(), port,
               eo.model.c_str(), compute::activations_name(eo.activations));
  std::thread http([&svr] { svr.listen_after_bind(); });

  std::atomic<bool> load_done{false};
  std::string load_error;
  std::thread loader([&] {
    try {
      st.engine = std::make_unique<engine::Engine>(eo);
      st.lora_dtype = runtime::lora_dtype_name(eo.lora_dtype);
      const auto& m = st.engine->model();
      st.activations = runtime::activations_in_force(m.weights, eo.activations);  // before ready: /props reads it
      if (m.chat_template) st.chat = std::make_unique<text::ChatPrompt>(st.engine->tokenizer(), *m.chat_template, m.chat_template_origin);
      const int64_t total = o.ctx_size > 0 ? o.ctx_size : m.config.max_position_embeddings;
      st.slot_ctx = std::max<int64_t>(2, total / o.parallel);
      SchedulerOptions so;
      so.parallel = o.parallel;
      so.slot_ctx = st.slot_ctx;
      so.batch_tokens = o.batch_size;
      so.queue_size = o.queue_size;
      so.cache_type = o.cache_type;
      st.scheduler = std::make_unique<Scheduler>(*st.engine, so);
      if (o.embeddings) st.pooling = o.pooling ? *o.pooling : engine::default_pooling(m.config);
      std::string how = st.engine->adapters().fused()       ? ", fused"
                        : st.engine->adapters().size() == 0 ? ""
                                                            : ", factors " + st.lora_dtype;
      const auto& lim = st.engine->adapters().limits();
      if (lim.max_adapters > 0) how += ", at most " + std::to_string(lim.max_adapters) + " resident";
      if (lim.max_bytes > 0) how += ", resident terms <= " + std::to_string(lim.max_bytes >> 20) + " MiB";
      if (o.allow_runtime_lora) how += ", runtime loading from " + o.lora_root;
      if (!o.lora_dir.empty()) how += ", --lora-dir " + o.lora_dir;
      if (o.embeddings) how += std::string(", embeddings (pooling ") + engine::pooling_name(st.pooling) + ")";
      std::fprintf(stderr, "graft serve: ready (%d slots x %lld tokens, kv cache %s, %zu adapter(s)%s) | activations: %s | %s\n",
                   o.parallel, static_cast<long long>(st.slot_ctx),
                   std::string(runtime::kv_cache_type_name(o.cache_type)).c_str(), st.engine->adapters().size(),
                   how.c_str(), st.activations.c_str(), runtime::describe_kernels(m.weights).c_str());
      st.ready = true;  // after the line above, so a client that sees ready also finds the line in the log
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
