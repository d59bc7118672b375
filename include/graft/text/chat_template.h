// Chat templates: renders a model's own Jinja chat template (as shipped in tokenizer_config.json
// or GGUF metadata) for a list of messages. A small Jinja interpreter covering what real chat
// templates use; anything outside it is an error naming the construct, never a silent guess.
#pragma once
#include <memory>
#include <string>
#include <vector>

namespace graft::text {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;
};

struct ChatTemplateOptions {
  bool add_generation_prompt = true;
  std::string bos_token;
  std::string eos_token;
};

class ChatTemplate {
 public:
  // Parses the template source; throws graft::Error with line/column on a syntax error.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  std::string render(const std::vector<ChatMessage>& messages,
                     const ChatTemplateOptions& options) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace graft::text
