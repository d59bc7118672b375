// Request parsing for graft serve (request.h): fields typed and checked, llama-server's defaults.
#include "server/request.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>

#include "graft/core/error.h"

namespace graft::server {

namespace {

// Sampling fields are floats: a value beyond float's range is refused here (the conversion of such
// a double to float would be undefined behaviour).
float number(const json& b, const char* field, double dflt) {
  const json* v = find_field(b, field);
  if (!v) return static_cast<float>(dflt);
  if (!v->is_number()) bad_field(field, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max()) bad_field(field, "a finite number");
  return static_cast<float>(d);
}

bool boolean(const json& b, const char* field, bool dflt) {
  const json* v = find_field(b, field);
  if (!v) return dflt;
  if (!v->is_boolean()) bad_field(field, "true or false");
  return v->get<bool>();
}

std::vector<std::string> stop_strings(const json& b) {
  const json* v = find_field(b, "stop");
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
  const json* v = find_field(b, "prompt");
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
  const json* v = find_field(b, "messages");
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

void refuse_unimplemented(const json& b, Route route) {
  // OpenAI's deprecated functions API (no peer serves it either): tools say the same.
  for (const char* f : {"functions", "function_call"})
    if (find_field(b, f))
      fail_as(ErrorKind::kUnsupported, "field '", f, "' (OpenAI's deprecated functions API) is not supported; use "
                                       "'tools' and 'tool_choice'");
  if (route == Route::OaiChat) return;
  for (const char* f : {"tools", "tool_choice", "parallel_tool_calls"})
    if (const json* v = find_field(b, f); v && !(v->is_array() && v->empty()))
      fail_as(ErrorKind::kBadRequest, "field '", f, "' is only taken by /v1/chat/completions");
}

// A bias value: a number in [-100, 100] (OpenAI's range), or false for -inf (llama-server's ban).
float bias_value(const json& v, const std::string& where) {
  if (v.is_boolean() && !v.get<bool>()) return -INFINITY;
  if (!v.is_number()) fail_as(ErrorKind::kBadRequest, where, " must be a number in [-100, 100] or false");
  const double d = v.get<double>();
  if (!(d >= -100.0 && d <= 100.0)) fail_as(ErrorKind::kBadRequest, where, " must be in [-100, 100], got ", v.dump());
  return static_cast<float>(d);
}

// OpenAI's {"token id": bias} (also llama-server's), or llama-server's [[id or string, bias], ...]
// (a string biases each of its tokens). Later entries for one token replace earlier ones.
std::vector<std::pair<int32_t, float>> logit_bias(const json& b, const text::Tokenizer& tok) {
  const json* v = find_field(b, "logit_bias");
  if (!v) return {};
  std::map<int32_t, float> out;
  auto id_in_vocab = [&](int64_t id, const std::string& where) {
    if (id < 0 || id >= tok.vocab_size())
      fail_as(ErrorKind::kBadRequest, where, ": token id ", id, " is out of range [0, ", tok.vocab_size(), ")");
    return static_cast<int32_t>(id);
  };
  if (v->is_object()) {
    for (const auto& [key, bias] : v->items()) {
      const std::string where = "field 'logit_bias' key '" + key + "'";
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (key.empty() || used != key.size()) fail_as(ErrorKind::kBadRequest, where, " is not a token id");
      out[id_in_vocab(id, where)] = bias_value(bias, where);
    }
  } else if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      const json& e = (*v)[i];
      const std::string where = "field 'logit_bias[" + std::to_string(i) + "]'";
      if (!e.is_array() || e.size() != 2) fail_as(ErrorKind::kBadRequest, where, " must be [token id or string, bias]");
      const float bias = bias_value(e[1], where);
      if (e[0].is_number_integer()) {
        out[id_in_vocab(e[0].get<int64_t>(), where)] = bias;
      } else if (e[0].is_string()) {
        for (int32_t id : tok.encode(e[0].get<std::string>(), /*parse_special=*/false, false)) out[id] = bias;
      } else {
        fail_as(ErrorKind::kBadRequest, where, " must be [token id or string, bias]");
      }
    }
  } else {
    bad_field("logit_bias", "an object {\"token id\": bias} or an array [[token id, bias], ...]");
  }
  int64_t banned = 0;
  for (const auto& [id, bias] : out) banned += bias == -INFINITY;
  if (banned >= tok.vocab_size()) fail_as(ErrorKind::kBadRequest, "field 'logit_bias' bans every token");
  return {out.begin(), out.end()};
}

}  // namespace

[[noreturn]] void bad_field(const std::string& field, const std::string& expected) {
  fail_as(ErrorKind::kBadRequest, "field '", field, "' must be ", expected);
}

const json* find_field(const json& b, const char* field) {
  auto it = b.find(field);
  if (it == b.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t integer_field(const json& b, const char* field, int64_t dflt, int64_t lo, int64_t hi) {
  const json* v = find_field(b, field);
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

const std::string& string_field(const json& b, const char* field) {
  const json* v = find_field(b, field);
  if (!v || !v->is_string() || v->get_ref<const std::string&>().empty()) bad_field(field, "a non-empty string");
  return v->get_ref<const std::string&>();
}

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
  if (route != Route::Completion) refuse_unimplemented(b, route);
  std::shared_ptr<const engine::Grammar> tool_grammar;
  if (route == Route::OaiChat) {
    if (!chat) fail_as(ErrorKind::kUnsupported, "this model has no chat template; use /v1/completions");
    const ToolStyle style = tool_style_of(chat->source());
    const std::optional<ToolRequest> tools = parse_tool_request(b, style);
    const ToolPrompt tp = tool_prompt(chat_messages(b), tools ? &*tools : nullptr, style);
    r.prompt = chat->encode(tp.messages, /*add_generation_prompt=*/true, tp.extra_context);
    if (tools && tools->parses()) {
      r.tools = std::make_shared<const ToolRequest>(*tools);
      tool_grammar = tool_call_grammar(*tools);
    }
  } else {
    r.prompt = prompt_tokens(b, tok);
  }
  if (const json* m = find_field(b, "model"); m && m->is_string()) r.model = m->get<std::string>();
  auto& p = r.params;
  auto& s = p.sampling;
  s.temperature = number(b, "temperature", 0.8);
  if (s.temperature < 0) bad_field("temperature", ">= 0 (0 is greedy)");
  s.top_k = static_cast<int32_t>(integer_field(b, "top_k", 40, INT32_MIN, INT32_MAX));
  s.top_p = number(b, "top_p", 0.95);
  s.min_p = number(b, "min_p", 0.05);
  s.repeat_penalty = number(b, "repeat_penalty", 1.0);
  s.repeat_last_n = static_cast<int32_t>(integer_field(b, "repeat_last_n", 64, -1, INT32_MAX));
  if (s.repeat_last_n < 0) s.repeat_last_n = INT32_MAX;  // llama-server: -1 = the whole context
  s.presence_penalty = number(b, "presence_penalty", 0.0);
  s.frequency_penalty = number(b, "frequency_penalty", 0.0);
  for (const char* f : {"presence_penalty", "frequency_penalty"})
    if (const float v = f[0] == 'p' ? s.presence_penalty : s.frequency_penalty; !(v >= -2.0f && v <= 2.0f))
      bad_field(f, "in [-2, 2]");
  s.logit_bias = logit_bias(b, tok);
  const int64_t seed = integer_field(b, "seed", -1, INT64_MIN, INT64_MAX);
  s.seed = seed < 0 ? std::random_device{}() : static_cast<uint64_t>(seed);
  try {
    runtime::validate(s);
  } catch (const Error& e) {
    fail_as(ErrorKind::kBadRequest, e.what());
  }
  // n_predict (native) or max_tokens / max_completion_tokens (OpenAI); -1: until EOS or the
  // context is full (the context caps it either way).
  int64_t n = integer_field(b, "n_predict", -1, -1, INT64_MAX);
  n = integer_field(b, "max_tokens", n, -1, INT64_MAX);
  n = integer_field(b, "max_completion_tokens", n, -1, INT64_MAX);
  p.max_tokens = n;
  p.stop = stop_strings(b);
  if (!boolean(b, "ignore_eos", false)) p.eos_ids = eos_ids;
  p.n_probs = static_cast<int32_t>(integer_field(b, "n_probs", 0, 0, 100));
  if (route == Route::OaiChat) {
    // logprobs: true, top_logprobs: k (0..20): the drawn token's logprob and the k most likely.
    r.logprobs = boolean(b, "logprobs", false);
    r.top_logprobs = static_cast<int32_t>(integer_field(b, "top_logprobs", 0, 0, 20));
    if (find_field(b, "top_logprobs") && !r.logprobs)
      fail_as(ErrorKind::kBadRequest, "field 'top_logprobs' needs 'logprobs': true");
  } else if (route == Route::OaiCompletion) {
    // logprobs: k (0..5): the drawn token's logprob and the k most likely (null: none).
    if (find_field(b, "logprobs")) {
      r.logprobs = true;
      r.top_logprobs = static_cast<int32_t>(integer_field(b, "logprobs", 0, 0, 5));
    }
  }
  if (r.logprobs) {
    p.token_prob = true;
    p.n_probs = std::max(p.n_probs, r.top_logprobs);
  }
  if (route != Route::Completion) r.n = static_cast<int32_t>(integer_field(b, "n", 1, 1, 128));
  r.stream = boolean(b, "stream", false);
  r.cache_prompt = boolean(b, "cache_prompt", true);
  if (const json* so = find_field(b, "stream_options")) {
    if (!so->is_object()) bad_field("stream_options", "an object");
    r.include_usage = boolean(*so, "include_usage", false);
  }
  if (const json* l = find_field(b, "lora")) r.lora = parse_lora_list(*l, "lora");
  p.grammar = request_grammar(b);
  if (tool_grammar) {
    if (p.grammar)
      fail_as(ErrorKind::kBadRequest, "field 'tool_choice' (required or a named function) constrains the output to a "
                                      "tool call: it excludes 'grammar', 'json_schema' and 'response_format'");
    p.grammar = std::move(tool_grammar);
  }
  return r;
}

}  // namespace graft::server
