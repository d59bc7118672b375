// The requests of graft serve's llama-server compatible JSON surface: each field typed, with
// llama-server's defaults, each wrong type a bad request naming the field. Nothing here knows about
// slots or threads; response.h shapes the answers.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graft/engine/adapter_registry.h"
#include "graft/engine/grammar.h"
#include "graft/engine/sequence.h"
#include "graft/text/chat_prompt.h"
#include "graft/text/tokenizer.h"
#include "server/tool_calls.h"

namespace graft::server {

using json = nlohmann::ordered_json;

enum class Route { Completion, OaiCompletion, OaiChat };

struct CompletionRequest {
  std::vector<int32_t> prompt;
  engine::SequenceParams params;                       // adapters left empty (the scheduler sets them)
  std::optional<std::vector<engine::ScaleEntry>> lora;  // absent: the defaults at admission
  bool stream = false;
  bool cache_prompt = true;
  bool include_usage = false;  // OpenAI stream_options.include_usage
  std::string model;           // OpenAI `model`, echoed back
  int32_t n = 1;               // OpenAI `n`: choices, each its own sequence (seed, seed + 1, ...)
  bool logprobs = false;       // OpenAI logprobs (chat `logprobs: true`, completions `logprobs: k`)
  int32_t top_logprobs = 0;    // chat `top_logprobs`, completions `logprobs`
  // Chat with `tools` (and tool_choice other than none): the output is parsed into tool_calls.
  std::shared_ptr<const ToolRequest> tools;
};

// The grammar a request's `grammar`, `json_schema` or `response_format` asks for (none: nullptr).
// A bad grammar or schema, or two of them, is kBadRequest naming the field and position.
std::shared_ptr<const engine::Grammar> request_grammar(const json& body);

// The whole body is parsed and checked here (kBadRequest naming the field; kUnsupported for
// options graft does not implement that would change the output). `chat` is required for OaiChat.
CompletionRequest parse_completion_request(const json& body, Route route, const text::Tokenizer& tokenizer,
                                           const text::ChatPrompt* chat, const std::vector<int32_t>& eos_ids);

// Request-field helpers every route shares (each error a kBadRequest naming the field): a field's
// value (absent or null: nullptr); "field 'F' must be EXPECTED"; an integer in [lo, hi] (an
// integral float such as 3.0 counts), `dflt` when absent; a required non-empty string.
const json* find_field(const json& body, const char* field);
[[noreturn]] void bad_field(const std::string& field, const std::string& expected);
int64_t integer_field(const json& body, const char* field, int64_t dflt, int64_t lo, int64_t hi);
const std::string& string_field(const json& body, const char* field);

// [{"id": N, "scale": S}, ...] as /lora-adapters and the per-request `lora` field take it.
std::vector<engine::ScaleEntry> parse_lora_list(const json& value, const std::string& field);

}  // namespace graft::server
