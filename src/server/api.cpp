#include "server/api.h"

#include <cmath>
#include <limits>
#include <random>

#include "graft/core/error.h"

namespace graft::server {

namespace {

[[noreturn]] void bad_field(const std::string& field, const std::string& expected) {
  fail_as(ErrorKind::kBadRequest, "field '", field, "' must be ", expected);
}

const json* find(const json& b, const char* field) {
  auto it = b.find(field);
  if (it == b.end() || it->is_null()) return nullptr;
  return &*it;
}

// Sampling fields are floats: a value beyond float's range is refused here (the conversion of such
// a double to float would be undefined behaviour).
float number(const json& b, const char* field, double dflt) {
  const json* v = find(b, field);
  if (!v) return static_cast<float>(dflt);
  if (!v->is_number()) bad_field(field, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) bad_field(field, "a finite number");
  return static_cast<float>(d);
}

int64_t integer(const json& b, const char* field, int64_t dflt, int64_t lo, int64_t hi) {
  const json* v = find(b, field);
  if (!v) return dflt;
  int64_t n = 0;
  if (v->is_number_integer()) {
    n = v->get<int64_t>();
  } else if (v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e18) {
    n = static_cast<int64_t>(v->get<double>());
  } else {
    bad_field(field, "an integer");
  }
  if (n < lo || n > hi) bad_field(field, "in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return n;
}

bool boolean(const json& b, const char* field, bool dflt) {
  const json* v = find(b, field);
  if (!v) return dflt;
  if (!v->is_boolean()) bad_field(field, "true or false");
  return v->get<bool>();
}

std::vector<std::string> stop_strings(const json& b) {
  const json* v = find(b, "stop");
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) bad_field("stop", "a string or an array of strings");
  std::vector<std::string> out;
  for (const auto& s : *v) {
    if (!s.is_string()) bad_field("stop", "a string or an array of strings");
    if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
  }
  return out;
}

int32_t token_id(const json& v, const std::string& field, const text::Tokenizer& tok) {
  if (!v.is_number_integer()) bad_field(field, "a string or an array of token ids and strings");
  const int64_t id = v.get<int64_t>();
  if (id < 0 || id >= tok.vocab_size())
    fail_as(ErrorKind::kBadRequest, "field '", field, "': token id ", id, " is out of range [0, ", tok.vocab_size(), ")");
  return static_cast<int32_t>(id);
}

// llama-server's prompt: a string, or an array mixing token ids and strings (BOS added when the
// first element is a string and the model adds one).
std::vector<int32_t> prompt_tokens(const json& b, const text::Tokenizer& tok) {
  const json* v = find(b, "prompt");
  if (!v) fail_as(ErrorKind::kBadRequest, "field 'prompt' is required");
  if (v->is_string()) return tok.encode(v->get<std::string>(), /*parse_special=*/true);
  if (!v->is_array()) bad_field("prompt", "a string or an array of token ids and strings");
  if (v->size() == 1 && (*v)[0].is_string()) return tok.encode((*v)[0].get<std::string>(), true);
  std::vector<int32_t> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (e.is_string()) {
      const auto ids = tok.encode(e.get<std::string>(), true, i == 0 ? std::nullopt : std::optional<bool>(false));
      out.insert(out.end(), ids.begin(), ids.end());
    } else if (e.is_array()) {
      fail_as(ErrorKind::kUnsupported, "field 'prompt': several prompts in one request are not supported; send one "
                                       "request per prompt");
    } else {
      out.push_back(token_id(e, "prompt", tok));
    }
  }
  return out;
}

// OpenAI messages: content as a string or as text parts (joined); anything else refused.
json chat_messages(const json& b) {
  const json* v = find(b, "messages");
  if (!v) fail_as(ErrorKind::kBadRequest, "field 'messages' is required");
  if (!v->is_array() || v->empty()) bad_field("messages", "a non-empty array of {role, content} objects");
  json out = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string f = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad_field(f, "an object with 'role' and 'content'");
    if (!m.contains("role") || !m["role"].is_string()) bad_field(f + ".role", "a string");
    json msg = m;
    if (m.contains("content") && m["content"].is_array()) {
      std::string text;
      for (const auto& part : m["content"]) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          fail_as(ErrorKind::kUnsupported, "field '", f, ".content': only text parts are supported");
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    } else if (m.contains("content") && !m["content"].is_string() && !m["content"].is_null()) {
      bad_field(f + ".content", "a string or an array of text parts");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

void refuse_unimplemented(const json& b) {
  for (const char* f : {"presence_penalty", "frequency_penalty"})
    if (const json* v = find(b, f); v && (!v->is_number() || v->get<double>() != 0.0))
      fail_as(ErrorKind::kUnsupported, "field '", f, "' is not supported (only 0); use repeat_penalty");
  if (const json* v = find(b, "n"); v && !(v->is_number_integer() && v->get<int64_t>() == 1))
    fail_as(ErrorKind::kUnsupported, "field 'n': only one choice per request is supported");
  if (const json* v = find(b, "tools"); v && !(v->is_array() && v->empty()))
    fail_as(ErrorKind::kUnsupported, "field 'tools' is not supported");
}

}  // namespace

std::vector<engine::ScaleEntry> parse_lora_list(const json& value, const std::string& field) {
  if (!value.is_array()) fail_as(ErrorKind::kBadRequest, "field '", field, "' must be an array of {id, scale} objects");
  std::vector<engine::ScaleEntry> out;
  for (size_t i = 0; i < value.size(); ++i) {
    const json& e = value[i];
    const std::string f = field + "[" + std::to_string(i) + "]";
    if (!e.is_object()) bad_field(f, "an object {\"id\": N, \"scale\": S}");
    if (!e.contains("id") || !e["id"].is_number_integer()) bad_field(f + ".id", "an integer adapter id");
    if (!e.contains("scale") || !e["scale"].is_number()) bad_field(f + ".scale", "a number");
    out.push_back({e["id"].get<int64_t>(), e["scale"].get<double>()});
  }
  return out;
}

CompletionRequest parse_completion_request(const json& b, Route route, const text::Tokenizer& tok,
                                           const text::ChatPrompt* chat, const std::vector<int32_t>& eos_ids) {
  if (!b.is_object()) fail_as(ErrorKind::kBadRequest, "the request body must be a JSON object");
  CompletionRequest r;
  if (route != Route::Completion) refuse_unimplemented(b);
  if (route == Route::OaiChat) {
    if (!chat) fail_as(ErrorKind::kUnsupported, "this model has no chat template; use /v1/completions");
    r.prompt = chat->encode(chat_messages(b));
  } else {
    r.prompt = prompt_tokens(b, tok);
  }
  if (const json* m = find(b, "model"); m && m->is_string()) r.model = m->get<std::string>();
  auto& p = r.params;
  auto& s = p.sampling;
  s.temperature = number(b, "temperature", 0.8);
  s.top_k = static_cast<int32_t>(integer(b, "top_k", 40, INT32_MIN, INT32_MAX));
  s.top_p = number(b, "top_p", 0.95);
  s.min_p = number(b, "min_p", 0.05);
  s.repeat_penalty = number(b, "repeat_penalty", 1.0);
  s.repeat_last_n = static_cast<int32_t>(integer(b, "repeat_last_n", 64, -1, INT32_MAX));
  if (s.repeat_last_n < 0) s.repeat_last_n = INT32_MAX;  // llama-server: -1 = the whole context
  const int64_t seed = integer(b, "seed", -1, INT64_MIN, INT64_MAX);
  s.seed = seed < 0 ? std::random_device{}() : static_cast<uint64_t>(seed);
  try {
    runtime::validate(s);
  } catch (const Error& e) {
    fail_as(ErrorKind::kBadRequest, e.what());
  }
  // n_predict (native) or max_tokens / max_completion_tokens (OpenAI); -1: until EOS or the
  // context is full (the context caps it either way).
  int64_t n = integer(b, "n_predict", -1, -1, INT64_MAX);
  n = integer(b, "max_tokens", n, -1, INT64_MAX);
  n = integer(b, "max_completion_tokens", n, -1, INT64_MAX);
  p.max_tokens = n;
  p.stop = stop_strings(b);
  if (!boolean(b, "ignore_eos", false)) p.eos_ids = eos_ids;
  p.n_probs = static_cast<int32_t>(integer(b, "n_probs", 0, 0, 100));
  r.stream = boolean(b, "stream", false);
  r.cache_prompt = boolean(b, "cache_prompt", true);
  if (const json* so = find(b, "stream_options")) {
    if (!so->is_object()) bad_field("stream_options", "an object");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  if (const json* l = find(b, "lora")) r.lora = parse_lora_list(*l, "lora");
  p.grammar = request_grammar(b);
  return r;
}

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
                 const text::Tokenizer& tok) {
  json out = json::array();
  auto entry = [&](int32_t id, float p) {
    const std::string piece = tok.token_bytes(id);
    json bytes = json::array();
    for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
    return json{{"id", id}, {"token", piece}, {"logprob", std::log(std::max(p, 1e-30f))}, {"bytes", bytes}};
  };
  for (size_t i = 0; i < tokens.size() && i < probs.size(); ++i) {
    float p = 0;
    json top = json::array();
    for (const auto& tp : probs[i]) {
      if (tp.id == tokens[i]) p = tp.prob;
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
              {"repeat_last_n", s.repeat_last_n}, {"seed", s.seed},         {"stop", req.params.stop},
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
  if (req.params.n_probs > 0) r["completion_probabilities"] = token_probs(c.tokens, c.probs, tok);
  return r;
}

json completion_stream_chunk(const JobEvent& e, const text::Tokenizer& tok) {
  json r{{"index", 0}, {"content", e.text}, {"tokens", e.tokens}, {"stop", false}};
  if (!e.probs.empty()) r["completion_probabilities"] = token_probs(e.tokens, e.probs, tok);
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

json usage(const Completed& c) {
  return json{{"completion_tokens", c.final.predicted},
              {"prompt_tokens", c.final.prompt_tokens},
              {"total_tokens", c.final.predicted + c.final.prompt_tokens}};
}

}  // namespace

json oai_response(const Completed& c, Route route, const std::string& id, int64_t created, const std::string& model) {
  json choice;
  if (route == Route::OaiChat)
    choice = json{{"index", 0},
                  {"message", json{{"role", "assistant"}, {"content", c.text}}},
                  {"logprobs", nullptr},
                  {"finish_reason", finish_reason(c.final.reason)}};
  else
    choice = json{{"index", 0}, {"text", c.text}, {"logprobs", nullptr}, {"finish_reason", finish_reason(c.final.reason)}};
  return json{{"id", id},
              {"object", route == Route::OaiChat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", model},
              {"system_fingerprint", "graft-0.1.0"},
              {"choices", json::array({choice})},
              {"usage", usage(c)},
              {"timings", timings_json(c.final)}};
}

json oai_chunk(Route route, const std::string& id, int64_t created, const std::string& model, const std::string* text,
               const char* finish, bool role) {
  json choice{{"index", 0}};
  if (route == Route::OaiChat) {
    json delta = json::object();
    if (role) delta["role"] = "assistant";
    if (text) delta["content"] = *text;
    else if (role) delta["content"] = nullptr;
    choice["delta"] = delta;
  } else {
    choice["text"] = text ? *text : std::string();
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish ? json(finish) : json(nullptr);
  return json{{"id", id},
              {"object", route == Route::OaiChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"system_fingerprint", "graft-0.1.0"},
              {"choices", json::array({choice})}};
}

json oai_usage_chunk(const Completed& c, Route route, const std::string& id, int64_t created, const std::string& model) {
  return json{{"id", id},
              {"object", route == Route::OaiChat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"system_fingerprint", "graft-0.1.0"},
              {"choices", json::array()},
              {"usage", usage(c)},
              {"timings", timings_json(c.final)}};
}

}  // namespace graft::server
