// graft serve's completion routes (/completion, /v1/completions, /v1/chat/completions): each
// request is parsed and checked completely, its adapter scales resolved (its admission snapshot),
// then queued; its events come back through its job's channel, as one JSON response or as
// server-sent events.
#include <httplib.h>

#include <chrono>
#include <ctime>
#include <random>

#include "graft/core/error.h"
#include "server/access_log.h"
#include "server/response.h"
#include "server/scheduler.h"
#include "server/state.h"

namespace graft::server {

namespace {

using Clock = std::chrono::steady_clock;

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
// The access log's token counts (server/access_log.h): the prompt once, the tokens of every choice.
void note_tokens(const std::vector<Completed>& cs) {
  AccessNote& n = access_note();
  n.prompt_tokens = cs.empty() ? 0 : cs[0].final.prompt_tokens;
  n.generated_tokens = 0;
  for (const Completed& c : cs) n.generated_tokens += c.final.predicted;
}

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
  note_tokens(cs);
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
      const bool cut = e.reason == engine::StopReason::MaxTokens || e.reason == engine::StopReason::ContextFull;
      if (!write_deltas(tools->finish(cut), nullptr)) return false;
      const char* why = finish_reason(e.reason, tools->has_calls());
      if (!write(sse(oai_chat_delta_chunk(ss.id, created, model, json::object(), index, nullptr, why)))) return false;
    } else if (!write(sse(oai_chunk(ss.route, ss.id, created, model, nullptr, finish_reason(e.reason), false,
                                    index)))) {
      return false;
    }
    if (ss.finals == static_cast<int>(ss.jobs.size())) {
      note_tokens(ss.done);
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
  for (const engine::AdapterPick& p : job->adapters.picks) {
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", p.scale);
    access_note().adapters += (access_note().adapters.empty() ? "" : ",") + p.name + ":" + scale;
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

// POST /v1/completions/render and /v1/chat/completions/render (vLLM's): the token ids graft would
// evaluate for the request, its whole body checked as the completion routes check it, for routers
// that hash prompts into KV blocks themselves (llm-d's precise prefix-cache scorer). Completions
// answer a list (one entry per prompt), chat one object.
void handle_render(State& st, Route route, const httplib::Request& http, httplib::Response& res) {
  engine::Engine& eng = *st.engine;
  try {
    const CompletionRequest req = parse_completion_request(parse_body(http), route, eng.tokenizer(), st.chat.get(),
                                                           eng.model().config.eos_token_ids);
    const json one{{"token_ids", req.prompt}, {"model", req.model.empty() ? st.model_name : req.model}};
    send_json(res, 200, route == Route::OaiChat ? one : json::array({one}));
  } catch (const std::exception& e) {
    send_error(res, api_error(e));
  }
}

}  // namespace

void add_completion_routes(httplib::Server& svr, State& st) {
  for (const char* path : {"/completion", "/completions"})
    st.routes.post(svr, path, [&st](const httplib::Request& q, httplib::Response& r) { handle_completion(st, Route::Completion, q, r); });
  st.routes.post(svr, "/v1/completions",
           [&st](const httplib::Request& q, httplib::Response& r) { handle_completion(st, Route::OaiCompletion, q, r); });
  for (const char* path : {"/v1/chat/completions", "/chat/completions"})
    st.routes.post(svr, path, [&st](const httplib::Request& q, httplib::Response& r) { handle_completion(st, Route::OaiChat, q, r); });
  st.routes.post(svr, "/v1/completions/render",
                 [&st](const httplib::Request& q, httplib::Response& r) { handle_render(st, Route::OaiCompletion, q, r); });
  st.routes.post(svr, "/v1/chat/completions/render",
                 [&st](const httplib::Request& q, httplib::Response& r) { handle_render(st, Route::OaiChat, q, r); });
}

}  // namespace graft::server
