// The answers of graft serve's llama-server compatible JSON surface: errors with their HTTP status
// and llama-server type, and the bodies of native /completion and the OpenAI routes, whole and
// streamed. Nothing here knows about slots or threads.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "server/job.h"
#include "server/request.h"

namespace graft::server {

// {"error": {"code", "message", "type"}} with llama-server's type for the kind, and its HTTP status.
struct ApiError {
  int status;
  json body;
};
// An error with its HTTP status and llama-server type decided where it is raised (403 for a path
// outside --lora-root, 404 for an unknown model name, ...).
class HttpError : public std::runtime_error {
 public:
  HttpError(int status, std::string type, const std::string& message)
      : std::runtime_error(message), status_(status), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string type_;
};
ApiError api_error(int status, const std::string& type, const std::string& message);
ApiError api_error(const std::exception& e);  // graft::Error by kind; anything else a 500

// Response shapes. `final` is the generation's last event; `text`/`tokens` the whole output.
struct Completed {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<std::vector<engine::TokenProb>> probs;
  std::vector<float> token_probs;  // the drawn tokens' probabilities (with n_probs or OpenAI logprobs)
  JobEvent final;
};
json timings_json(const JobEvent& final);
json completion_response(const Completed& c, const CompletionRequest& req, const text::Tokenizer& tok,
                         const std::string& model_name);
json completion_stream_chunk(const JobEvent& e, const text::Tokenizer& tok);
json completion_stream_final(const Completed& c, const CompletionRequest& req, const text::Tokenizer& tok,
                             const std::string& model_name);
const char* finish_reason(engine::StopReason r);
// With tools: "tool_calls" when the answer holds a call and was not cut by a limit ("length" then).
const char* finish_reason(engine::StopReason r, bool has_tool_calls);
// OpenAI's logprobs object for `tokens` (chat: {content: [{token, logprob, bytes, top_logprobs}]};
// completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}, with
// text_offset counted from and advancing `text_offset`, in bytes). logprob: log softmax of the raw
// logits (before bias, penalties, grammar and temperature), floored at log(1e-30).
json oai_logprobs(Route route, const std::vector<int32_t>& tokens, const std::vector<std::vector<engine::TokenProb>>& probs,
                  const std::vector<float>& chosen, int32_t k, const text::Tokenizer& tok, int64_t& text_offset);
// One choice per element of `choices` (index = position).
json oai_response(const std::vector<Completed>& choices, const CompletionRequest& req, const text::Tokenizer& tok,
                  Route route, const std::string& id, int64_t created, const std::string& model);
json oai_chunk(Route route, const std::string& id, int64_t created, const std::string& model, const std::string* text,
               const char* finish, bool role, int index = 0, json logprobs = nullptr);
// A chat chunk with any `delta` (content or tool_calls pieces) and an optional finish_reason.
json oai_chat_delta_chunk(const std::string& id, int64_t created, const std::string& model, json delta, int index,
                          json logprobs = nullptr, const char* finish = nullptr);
json oai_usage_chunk(const std::vector<Completed>& choices, Route route, const std::string& id, int64_t created,
                     const std::string& model);

}  // namespace graft::server
