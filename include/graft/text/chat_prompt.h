// A model's chat prompt: its chat template bound to its tokenizer (BOS/EOS texts), rendering a
// conversation and encoding it as transformers' apply_chat_template(tokenize=True) does: special
// tokens in the rendered text become their ids and no BOS is added (the template writes it).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graft/text/chat_template.h"
#include "graft/text/tokenizer.h"

namespace graft::text {

class ChatPrompt {
 public:
  // Parses the template once; throws graft::Error on a syntax error. origin names where the template
  // came from in every error (parse and render).
  ChatPrompt(const Tokenizer& tokenizer, const std::string& template_source,
             const std::string& origin = "chat template");

  // messages: an array of {role, content, ...} objects.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt = true,
                     const nlohmann::ordered_json& extra_context = nullptr) const;
  std::vector<int32_t> encode(const nlohmann::ordered_json& messages, bool add_generation_prompt = true,
                              const nlohmann::ordered_json& extra_context = nullptr) const;
  const std::string& source() const { return template_.source(); }

 private:
  const Tokenizer& tokenizer_;
  ChatTemplate template_;
};

}  // namespace graft::text
