// Tool calls on /v1/chat/completions (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`).
//
// Request side (tool_request.cpp): the tools are validated (each `parameters` must be a JSON Schema
// the converter of engine/json_schema.h takes), the conversation's tool history is brought into the
// shape chat templates expect (arguments as objects, as transformers users pass them), and the
// prompt is rendered in the template's own tool *style*:
//   Hermes     the template writes `<tool_call>` (Qwen 2.5, Hermes 2/3): calls are
//              `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`;
//   Llama3Json a Llama 3.1+ template (`<|start_header_id|>` with `<|python_tag|>` or `"parameters"`):
//              a call is the bare object `{"name": ..., "parameters": {...}}`;
//   Generic    any other template (it does not know tools, or in a syntax graft does not parse):
//              the tools are described in a system message asking for the Hermes syntax, and tool
//              history is written as text (calls in <tool_call>, results as user messages in
//              <tool_response>), so the template never sees a role or field it does not handle.
// `tool_choice: required` and a named function constrain the output with a grammar: the style's
// call syntax with arguments valid against the function's `parameters`.
//
// Output side (tool_output.cpp): the generated text is parsed back into calls; text that does not
// form a well-formed call stays content, so nothing the model wrote is lost, except a call cut off
// by max_tokens, which is dropped (finish_reason "length" says so). Streams re-parse the text so far
// at each piece and send new content as it comes and each call once complete, so a stream and the
// whole answer carry the same calls.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "graft/engine/grammar.h"

namespace graft::server {

enum class ToolStyle { Hermes, Llama3Json, Generic };
enum class ToolChoice { Auto, None, Required, Named };

// The style a chat template's source implies (the detection rule above).
ToolStyle tool_style_of(const std::string& template_source);
const char* tool_style_name(ToolStyle s);

struct ToolRequest {
  nlohmann::ordered_json tools;    // as given, validated: [{type: function, function: {name, ...}}]
  std::vector<std::string> names;  // the functions' names, in order
  ToolChoice choice = ToolChoice::Auto;
  std::string forced;              // ToolChoice::Named: the function's name
  bool parallel = true;            // parallel_tool_calls: false allows one call at most
  ToolStyle style = ToolStyle::Generic;
  // What the output may hold (1 when !parallel or Named).
  size_t max_calls() const;
  // The output is parsed into tool_calls (not with tool_choice none).
  bool parses() const { return choice != ToolChoice::None; }
};

// `tools`, `tool_choice` and `parallel_tool_calls` of a chat body. nullopt when the body has no tools
// (absent, null or empty); kBadRequest naming the field for anything malformed, including a
// `tool_choice` naming no tool and required/named without tools.
std::optional<ToolRequest> parse_tool_request(const nlohmann::ordered_json& body, ToolStyle style);

// The messages a template renders and the extra template variables (`tools`), for `messages` as
// the server has read them (content already a string): assistant `tool_calls` arguments given as
// JSON strings become objects, null content next to tool calls becomes "", and for the Generic style
// the history and the tools' description become plain text messages. kBadRequest naming
// `messages[i]...` for a malformed tool call or tool message.
struct ToolPrompt {
  nlohmann::ordered_json messages;
  nlohmann::ordered_json extra_context;  // null, or {"tools": [...]}
};
ToolPrompt tool_prompt(const nlohmann::ordered_json& messages, const ToolRequest* tools, ToolStyle style);

// The Generic style's system text for these tools.
std::string generic_tools_system_text(const ToolRequest& tr);

// GBNF for tool_choice required / named (start rule returned in `root`): the style's call syntax,
// each call's "name" one of the allowed functions and its arguments valid against its parameters.
struct ToolGrammar {
  std::string gbnf, root;
};
ToolGrammar tool_call_gbnf(const ToolRequest& tr);
// Parsed; nullptr when the choice does not constrain (auto, none).
std::shared_ptr<const engine::Grammar> tool_call_grammar(const ToolRequest& tr);

// JSON as Python's json.dumps writes it (", " and ": " separators, no ASCII escaping): how tools and
// calls read in the prompts models were trained on.
std::string python_style_json(const nlohmann::ordered_json& v);

// ---- output ---------------------------------------------------------------------------------------

struct ParsedCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object (a prefix of it while incomplete)
  bool complete = true;
};
struct ParsedOutput {
  std::string content;  // text outside the calls (pieces around calls trimmed, joined by "\n")
  std::vector<ParsedCall> calls;
  bool unfinished = false;  // (final) the text ended inside a call: cut off, dropped
};
// `final` false: the text so far of a generation still running. Then text that may yet become a
// call (a partial `<tool_call>`, a call whose name is not complete) is held back from `content`,
// trailing blanks too, and the last call may be incomplete (name known, arguments so far).
// `final` true: every call is complete; malformed call text (one that closed but is no call) is
// content; a call the text ends inside (cut off by max_tokens) is neither: it is dropped and
// `unfinished` set, so no invalid arguments and no half call in the content.
// `cut`: the generation was stopped by max_tokens or the context (with `final`): a trailing part of
// a call's opening tag is then dropped too, as the start of a call that never came.
ParsedOutput parse_tool_output(ToolStyle style, std::string_view text, bool final, size_t max_calls, bool cut = false);

std::string new_tool_call_id();  // "call_" and 24 random alphanumerics

// The assistant message of a finished choice: {role, content (null when empty and there are
// calls), tool_calls?}.
nlohmann::ordered_json tool_message(const ParsedOutput& out, const std::vector<std::string>& ids);

// One streamed choice: feed() the text pieces as they come, finish() at the end; each returns the
// OpenAI `delta` objects to send (possibly none): {"content": ...}, and {"tool_calls": [{index, id,
// type, function: {name, arguments}}]} once a call is complete (its arguments whole, valid JSON).
class ToolCallStream {
 public:
  ToolCallStream(ToolStyle style, size_t max_calls) : style_(style), max_calls_(max_calls) {}
  std::vector<nlohmann::ordered_json> feed(const std::string& piece);
  std::vector<nlohmann::ordered_json> finish(bool cut);  // cut: as parse_tool_output's
  bool has_calls() const { return !calls_.empty(); }

 private:
  std::vector<nlohmann::ordered_json> diff(const ParsedOutput& now);
  struct Sent {
    std::string id, arguments;  // as sent, whole
  };
  ToolStyle style_;
  size_t max_calls_;
  std::string text_, content_sent_;
  std::vector<Sent> calls_;
};

}  // namespace graft::server
