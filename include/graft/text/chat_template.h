// Chat templates: renders a model's own Jinja chat template (as shipped in tokenizer_config.json
// or GGUF metadata) for a list of messages. A small Jinja interpreter covering what real chat
// templates use; anything outside it is an error naming the construct, never a silent guess.
//
// Rendering matches transformers' apply_chat_template: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks=True, lstrip_blocks=True and the loopcontrols extension, transformers' tojson
// (ensure_ascii=False) and the raise_exception / strftime_now globals; `tools` and `documents` are
// defined as none unless given. Undefined variables behave like jinja2's default Undefined.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace graft::text {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
  // Extra template variables, as apply_chat_template(**kwargs) passes them, e.g.
  // {"tools": [...], "date_string": "26 Jul 2024", "enable_thinking": false}. Null or an object;
  // its keys override the variables above (and the default tools=none, documents=none).
  nlohmann::ordered_json extra_context;
};

class ChatTemplate {
 public:
  // Parses the template source; throws graft::Error with line/column on a syntax error (including
  // unknown tags, filters and tests, which jinja2 also rejects when compiling).
  // origin (a file name, or "chat template") prefixes every parse and render error.
  explicit ChatTemplate(const std::string& source, const std::string& origin = "chat template");
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Throws graft::Error naming the template line on a runtime error, and with the template's own
  // message when it calls raise_exception(...).
  std::string render(const std::vector<ChatMessage>& messages,
                     const ChatTemplateOptions& options) const;

  // Same, with the messages as JSON: an array of objects that may carry more than role/content
  // (tool_calls, tool_call_id, structured content, ...). Key order is kept (it shows in tojson).
  std::string render_json(const nlohmann::ordered_json& messages,
                          const ChatTemplateOptions& options) const;

  const std::string& source() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graft::text
