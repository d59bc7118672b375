#include "graft/text/chat_prompt.h"

namespace graft::text {

ChatPrompt::ChatPrompt(const Tokenizer& tokenizer, const std::string& template_source, const std::string& origin)
    : tokenizer_(tokenizer), template_(template_source, origin) {}

std::string ChatPrompt::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                               const nlohmann::ordered_json& extra_context) const {
  ChatTemplateOptions o;
  o.add_generation_prompt = add_generation_prompt;
  if (auto b = tokenizer_.bos_id()) o.bos_token = tokenizer_.token_text(*b);
  if (auto e = tokenizer_.eos_id()) o.eos_token = tokenizer_.token_text(*e);
  o.extra_context = extra_context;
  return template_.render_json(messages, o);
}

std::vector<int32_t> ChatPrompt::encode(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra_context) const {
  return tokenizer_.encode(render(messages, add_generation_prompt, extra_context), /*parse_special=*/true,
                           /*add_bos=*/false);
}

}  // namespace graft::text
