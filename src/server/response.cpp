// Response shaping for graft serve (response.h): errors, native and OpenAI bodies, stream chunks.
#include "server/response.h"

#include <algorithm>
#include <cmath>

#include "graft/core/error.h"

namespace graft::server {

ApiError api_error(int status, const std::string& type, const std::string& message) {
  return {status, json{{"error", json{{"code", status}, {"message", message}, {"type", type}}}}};
}

ApiError api_error(const std::exception& e) {
  if (const auto* he = dynamic_cast<const HttpError*>(&e)) return api_error(he->status(), he->type(), e.what());
  if (const auto* ge = dynamic_cast<const Error*>(&e)) {
    switch (ge->kind()) {
      case ErrorKind::kBadInput:
      case ErrorKind::kBadRequest: return api_error(400, "invalid_request_error", e.what());
      case ErrorKind::kUnsupported: return api_error(501, "not_supported_error", e.what());
      case ErrorKind::kLimit: return api_error(503, "unavailable_error", e.what());
      case ErrorKind::kIo:
      case ErrorKind::kInternal: break;
    }
  }
  return api_error(500, "server_error", e.what());
}

const char* finish_reason(engine::StopReason r) {
  switch (r) {
    case engine::StopReason::MaxTokens:
    case engine::StopReason::ContextFull: return "length";
    default: return "stop";
  }
}

const char* finish_reason(engine::StopReason r, bool has_tool_calls) {
  const char* plain = finish_reason(r);
  return has_tool_calls && std::string_view(plain) != "length" ? "tool_calls" : plain;
}

json timings_json(const JobEvent& f) {
  const int64_t prompt_n = f.prompt_tokens - f.tokens_cached;
  auto per = [](double ms, int64_t n) { return n > 0 ? ms / static_cast<double>(n) : 0.0; };
  auto rate = [](double ms, int64_t n) { return ms > 0 ? 1e3 * static_cast<double>(n) / ms : 0.0; };
  return json{{"cache_n", f.tokens_cached},
              {"prompt_n", prompt_n},
              {"prompt_ms", f.prompt_ms},
              {"prompt_per_token_ms", per(f.prompt_ms, prompt_n)},
              {"prompt_per_second", rate(f.prompt_ms, prompt_n)},
              {"predicted_n", f.predicted},
              {"predicted_ms", f.predicted_ms},
              {"predicted_per_token_ms", per(f.predicted_ms, f.predicted)},
              {"predicted_per_second", rate(f.predicted_ms, f.predicted)}};
}

namespace {

const char* stop_type(engine::StopReason r) {
  switch (r) {
    case engine::StopReason::Eos: return "eos";
    case engine::StopReason::StopString: return "word";
    case engine::StopReason::MaxTokens:
    case engine::StopReason::ContextFull: return "limit";
    default: return "none";
  }
}

json token_probs(const std::vector<int32_t>& tokens, const std::vector<std::vector<engine::TokenProb>>& probs,
                 const std::vector<float>& chosen, const text::Tokenizer& tok) {
  json out = json::array();
  auto entry = [&](int32_t id, float p) {
    const std::string piece = tok.token_bytes(id);
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
    return json{{"id", id}, {"token", piece}, {"logprob", std::log(std::max(p, 1e-30f))}, {"bytes", bytes}};
  };
  for (size_t i = 0; i < tokens.size() && i < probs.size(); ++i) {
    float p = i < chosen.size() ? chosen[i] : 0.0f;
    json top = json::array();
    for (const auto& tp : probs[i]) {
      if (tp.id == tokens[i] && i >= chosen.size()) p = tp.prob;
      top.push_back(entry(tp.id, tp.prob));
    }
    json e = entry(tokens[i], p);
    e["top_logprobs"] = top;
    out.push_back(std::move(e));
  }
  return out;
}

json generation_settings(const CompletionRequest& req) {
  const auto& s = req.params.sampling;
  return json{{"n_predict", req.params.max_tokens}, {"temperature", s.temperature}, {"top_k", s.top_k},
              {"top_p", s.top_p},           {"min_p", s.min_p},             {"repeat_penalty", s.repeat_penalty},
              {"repeat_last_n", s.repeat_last_n}, {"presence_penalty", s.presence_penalty},
              {"frequency_penalty", s.frequency_penalty}, {"seed", s.seed},  {"stop", req.params.stop},
              {"n_probs", req.params.n_probs},    {"cache_prompt", req.cache_prompt}};
}

}  // namespace

json completion_response(const Completed& c, const CompletionRequest& req, const text::Tokenizer& tok,
                         const std::string& model_name) {
  const JobEvent& f = c.final;
  json r{{"index", 0},
         {"content", c.text},
         {"tokens", c.tokens},
         {"id_slot", f.slot},
         {"stop", true},
         {"model", model_name},
         {"tokens_predicted", f.predicted},
         {"tokens_evaluated", f.prompt_tokens},
         {"generation_settings", generation_settings(req)},
         {"prompt", tok.decode(req.prompt)},
         {"has_new_line", c.text.find('\n') != std::string::npos},
         {"truncated", false},
         {"stop_type", stop_type(f.reason)},
         {"stopping_word", f.stopping_word},
         {"tokens_cached", f.tokens_cached},
         {"timings", timings_json(f)}};
  if (req.params.n_probs > 0) r["completion_probabilities"] = token_probs(c.tokens, c.probs, c.token_probs, tok);
  return r;
}

json completion_stream_chunk(const JobEvent& e, const text::Tokenizer& tok) {
  json r{{"index", 0}, {"content", e.text}, {"tokens", e.tokens}, {"stop", false}};
  if (!e.probs.empty()) r["completion_probabilities"] = token_probs(e.tokens, e.probs, e.token_probs, tok);
  return r;
}

json completion_stream_final(const Completed& c, const CompletionRequest& req, const text::Tokenizer& tok,
                             const std::string& model_name) {
  // The whole response's fields, less what the stream already carried (text, tokens, prompt).
  json r = completion_response(c, req, tok, model_name);
  r["content"] = "";
  r["tokens"] = json::array();
  r.erase("prompt");
  r.erase("completion_probabilities");
  return r;
}

namespace {

json usage(const std::vector<Completed>& cs) {
  int64_t completion = 0;
  for (const auto& c : cs) completion += c.final.predicted;
  const int64_t prompt = cs.empty() ? 0 : cs[0].final.prompt_tokens;  // one prompt, counted once
  return json{{"completion_tokens", completion}, {"prompt_tokens", prompt}, {"total_tokens", completion + prompt}};
}

float logprob_of(float p) { return std::log(std::max(p, 1e-30f)); }

json byte_list(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

}  // namespace

json oai_logprobs(Route route, const std::vector<int32_t>& tokens, const std::vector<std::vector<engine::TokenProb>>& probs,
                  const std::vector<float>& chosen, int32_t k, const text::Tokenizer& tok, int64_t& text_offset) {
  const size_t n = std::min(tokens.size(), chosen.size());
  if (route == Route::OaiChat) {
    json content = json::array();
    for (size_t i = 0; i < n; ++i) {
      const std::string piece = tok.token_bytes(tokens[i]);
      json top = json::array();
      if (i < probs.size())
        for (size_t j = 0; j < probs[i].size() && static_cast<int32_t>(j) < k; ++j) {
          const std::string p = tok.token_bytes(probs[i][j].id);
          top.push_back(json{{"token", p}, {"logprob", logprob_of(probs[i][j].prob)}, {"bytes", byte_list(p)}});
        }
      content.push_back(json{{"token", piece}, {"logprob", logprob_of(chosen[i])}, {"bytes", byte_list(piece)},
                             {"top_logprobs", top}});
    }
    return json{{"content", content}, {"refusal", nullptr}};
  }
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = 0; i < n; ++i) {
    const std::string piece = tok.token_bytes(tokens[i]);
    toks.push_back(piece);
    lps.push_back(logprob_of(chosen[i]));
    json top = json::object();  // the k most likely, and the drawn token (OpenAI: up to k + 1)
    if (i < probs.size())
      for (size_t j = 0; j < probs[i].size() && static_cast<int32_t>(j) < k; ++j)
        top[tok.token_bytes(probs[i][j].id)] = logprob_of(probs[i][j].prob);
    top[piece] = logprob_of(chosen[i]);
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(piece.size());
  }
  return json{{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json oai_response(const std::vector<Completed>& cs, const CompletionRequest& req, const text::Tokenizer& tok, Route route,
                  const std::string& id, int64_t created, const std::string& model) {
  json choices = json::array();
  for (size_t i = 0; i < cs.size(); ++i) {
    const Completed& c = cs[i];
    json lp = nullptr;
    int64_t offset = 0;
    if (req.logprobs) lp = oai_logprobs(route, c.tokens, c.probs, c.token_probs, req.top_logprobs, tok, offset);
    if (route == Route::OaiChat && req.tools) {
      const bool cut = c.final.reason == engine::StopReason::MaxTokens || c.final.reason == engine::StopReason::ContextFull;
      const ParsedOutput out = parse_tool_output(req.tools->style, c.text, /*final=*/true, req.tools->max_calls(), cut);
      choices.push_back(json{{"index", i},
                             {"message", tool_message(out, {})},
                             {"logprobs", lp},
                             {"finish_reason", finish_reason(c.final.reason, !out.calls.empty())}});
    } else if (route == Route::OaiChat)
      choices.push_back(json{{"index", i},
                             {"message", json{{"role", "assistant"}, {"content", c.text}}},
                             {"logprobs", lp},
                             {"finish_reason", finish_reason(c.final.reason)}});
    else
      choices.push_back(json{{"index", i}, {"text", c.text}, {"logprobs", lp}, {"finish_reason", finish_reason(c.final.reason)}});
  }
  return json{{"id", id},
              {"object", route == Route::OaiChat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model},
              {"system_fingerprint", "graft-0.1.0"},
              {"choices", choices},
              {"usage", usage(cs)},
              {"timings", timings_json(cs.at(0).final)}};
}

json oai_chunk(Route route, const std::string& id, int64_t created, const std::string& model, const std::string* text,
               const char* finish, bool role, int index, json logprobs) {
  json choice{{"index", index}};
  if (route == Route::OaiChat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (text) delta["content"] = *text;
    else if (role) delta["content"] = nullptr;
    choice["delta"] = delta;
  } else {
    choice["text"] = text ? *text : std::string();
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish ? json(finish) : json(nullptr);
  return json{{"id", id},
              {"object", route == Route::OaiChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"system_fingerprint", "graft-0.1.0"},
              {"choices", json::array({choice})}};
}

json oai_chat_delta_chunk(const std::string& id, int64_t created, const std::string& model, json delta, int index,
                          json logprobs, const char* finish) {
  json choice{{"index", index},
              {"delta", std::move(delta)},
              {"logprobs", std::move(logprobs)},
              {"finish_reason", finish ? json(finish) : json(nullptr)}};
  return json{{"id", id},
              {"object", "chat.completion.chunk"},
              {"created", created},
              {"model", model},
              {"system_fingerprint", "graft-0.1.0"},
              {"choices", json::array({choice})}};
}

json oai_usage_chunk(const std::vector<Completed>& cs, Route route, const std::string& id, int64_t created,
                     const std::string& model) {
  return json{{"id", id},
              {"object", route == Route::OaiChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"system_fingerprint", "graft-0.1.0"},
              {"choices", json::array()},
              {"usage", usage(cs)},
              {"timings", timings_json(cs.at(0).final)}};
}

}  // namespace graft::server
