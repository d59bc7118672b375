#include "graft/text/chat_template.h"

#include <new>
#include <stdexcept>

#include "graft/core/error.h"
#include "text/jinja/eval.h"
#include "text/jinja/lexer.h"
#include "text/jinja/parser.h"

namespace graft::text {

// Real chat templates are a few KiB; the largest known are under 64 KiB.
constexpr size_t kMaxTemplateBytes = size_t{1} << 20;

struct ChatTemplate::Impl {
  std::string source;
  std::string origin;
  jinja::Body body;
};

namespace {
// Runs f; a graft::Error from it is rethrown with the template's origin in front (same kind).
template <class F>
auto naming(const std::string& origin, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (origin == "chat template") throw;
    throw Error(origin + ": " + e.what(), e.kind());
  }
}
}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, const std::string& origin) : impl_(std::make_unique<Impl>()) {
  impl_->source = source;
  impl_->origin = origin;
  if (source.size() > kMaxTemplateBytes)
    fail_as(ErrorKind::kLimit, origin, ": a chat template of ", source.size(), " bytes (limit ", kMaxTemplateBytes, ")");
  impl_->body = naming(origin, [&] { return jinja::Parser(jinja::lex(source)).parse_template(); });
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

const std::string& ChatTemplate::source() const {
  if (!impl_) fail("chat template: used after move");
  return impl_->source;
}

static std::string render_with(const jinja::Body& body, jinja::Value messages, const ChatTemplateOptions& o) {
  using jinja::Value;
  std::vector<std::pair<std::string, Value>> ctx;
  ctx.emplace_back("messages", std::move(messages));
  ctx.emplace_back("tools", Value::none());
  ctx.emplace_back("documents", Value::none());
  ctx.emplace_back("add_generation_prompt", Value::boolean(o.add_generation_prompt));
  ctx.emplace_back("bos_token", Value::string(o.bos_token));
  ctx.emplace_back("eos_token", Value::string(o.eos_token));
  if (!o.extra_context.is_null()) {
    if (!o.extra_context.is_object()) fail("chat template: extra_context must be a JSON object");
    for (const auto& [k, v] : o.extra_context.items()) {
      Value val = Value::from_json(v);
      bool replaced = false;
      for (auto& [name, old] : ctx)
        if (name == k) {
          old = val;
          replaced = true;
        }
      if (!replaced) ctx.emplace_back(k, std::move(val));
    }
  }
  try {
    return jinja::Evaluator::render(body, std::move(ctx));
  } catch (const std::bad_alloc&) {
    fail_as(ErrorKind::kLimit, "chat template: out of memory while rendering (a value grew too large)");
  } catch (const std::length_error&) {
    fail_as(ErrorKind::kLimit, "chat template: a value grew too large while rendering");
  }
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, const ChatTemplateOptions& options) const {
  if (!impl_) fail("chat template: used after move");
  jinja::ValueList list;
  list.reserve(messages.size());
  for (const auto& m : messages) {
    jinja::Dict d;
    d.items.emplace_back(jinja::Value::string("role"), jinja::Value::string(m.role));
    d.items.emplace_back(jinja::Value::string("content"), jinja::Value::string(m.content));
    list.push_back(jinja::Value::dict(std::move(d)));
  }
  return naming(impl_->origin, [&] { return render_with(impl_->body, jinja::Value::list(std::move(list)), options); });
}

std::string ChatTemplate::render_json(const nlohmann::ordered_json& messages, const ChatTemplateOptions& options) const {
  if (!impl_) fail("chat template: used after move");
  if (!messages.is_array()) fail("chat template: messages must be a JSON array");
  return naming(impl_->origin, [&] { return render_with(impl_->body, jinja::Value::from_json(messages), options); });
}

}  // namespace graft::text
