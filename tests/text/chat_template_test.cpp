// Chat templates: graft's Jinja interpreter against python jinja2's renders of real chat templates
// (tests/fixtures/chat_templates/reference.json, made by tools/gen_chat_template_fixtures.py with
// transformers' environment), plus error behaviour.
#include "graft/text/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "graft/core/error.h"
#include "test_paths.h"
#include "support/errors.h"

namespace graft::text {
namespace {

using nlohmann::ordered_json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const ordered_json& reference() {
  static const ordered_json ref = [] {
    try {
      return ordered_json::parse(read_file(graft::test::fixture("chat_templates/reference.json")));
    } catch (const std::exception&) {
      return ordered_json::object();
    }
  }();
  return ref;
}

const ChatTemplate& template_named(const std::string& name) {
  static std::map<std::string, ChatTemplate> cache;
  auto it = cache.find(name);
  if (it == cache.end())
    it = cache.emplace(name, ChatTemplate(read_file(graft::test::fixture("chat_templates/" + name + ".jinja")))).first;
  return it->second;
}

ChatTemplateOptions options_for(const ordered_json& c) {
  ChatTemplateOptions o;
  o.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
  o.bos_token = c.at("bos_token").get<std::string>();
  o.eos_token = c.at("eos_token").get<std::string>();
  if (c.contains("extra")) o.extra_context = c.at("extra");
  return o;
}

// Messages as ChatMessage when they are plain role/content string pairs.
bool plain_messages(const ordered_json& msgs, std::vector<ChatMessage>& out) {
  for (const auto& m : msgs) {
    if (m.size() != 2 || !m.contains("role") || !m.contains("content") || !m["content"].is_string()) return false;
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return true;
}

class ReferenceCase : public ::testing::TestWithParam<size_t> {};

TEST_P(ReferenceCase, MatchesJinja2) {
  const ordered_json& c = reference()["cases"][GetParam()];
  const ordered_json& msgs = reference()["message_sets"][c["messages"].get<std::string>()];
  SCOPED_TRACE(c["template"].get<std::string>() + " / " + c["messages"].get<std::string>() +
               " / add_generation_prompt=" + (c["add_generation_prompt"].get<bool>() ? "true" : "false"));
  const ChatTemplate& tmpl = template_named(c["template"].get<std::string>());
  ChatTemplateOptions opts = options_for(c);
  std::vector<ChatMessage> plain;
  bool is_plain = plain_messages(msgs, plain);
  if (c.contains("error")) {
    std::string want = c["error"].get<std::string>();
    try {
      tmpl.render_json(msgs, opts);
      ADD_FAILURE() << "expected an error containing: " << want;
    } catch (const graft::Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
    if (is_plain) {
      EXPECT_THROW(tmpl.render(plain, opts), graft::Error);
    }
    return;
  }
  std::string want = c["expected"].get<std::string>();
  EXPECT_EQ(tmpl.render_json(msgs, opts), want);
  if (is_plain) {
    EXPECT_EQ(tmpl.render(plain, opts), want);
  }
}

std::vector<size_t> case_indices() {
  std::vector<size_t> out;
  if (reference().contains("cases"))
    for (size_t i = 0; i < reference()["cases"].size(); ++i) out.push_back(i);
  return out;
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  const ordered_json& c = reference()["cases"][info.param];
  std::string name = c["template"].get<std::string>() + "_" + c["messages"].get<std::string>() +
                     (c["add_generation_prompt"].get<bool>() ? "_gen" : "_nogen") + "_" + std::to_string(info.param);
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(ChatTemplates, ReferenceCase, ::testing::ValuesIn(case_indices()), case_name);

TEST(ChatTemplateFixtures, ReferenceIsPresent) {
  ASSERT_TRUE(reference().contains("cases")) << "missing tests/fixtures/chat_templates/reference.json";
  EXPECT_GT(reference()["cases"].size(), 100u);
}

TEST(ChatTemplateFixtures, GgufTemplateIsSmolLM2) {
  // The template in the SmolLM2 GGUF is the ChatML-with-default-system one.
  std::string gguf = read_file(graft::test::fixture("chat_templates/smollm2_gguf.jinja"));
  EXPECT_NE(gguf.find("You are a helpful AI assistant named SmolLM, trained by Hugging Face"), std::string::npos);
}

// ---------------------------------------------------------------- direct checks

std::string render(const std::string& src, const std::vector<ChatMessage>& msgs = {{"user", "hi"}},
                   bool gen = true) {
  ChatTemplateOptions o;
  o.add_generation_prompt = gen;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  return ChatTemplate(src).render(msgs, o);
}

std::string error_of(const std::function<void()>& f) { return test::message_of(f); }

std::string parse_error(const std::string& src) {
  return error_of([&] { ChatTemplate t(src); });
}

std::string render_error(const std::string& src) {
  return error_of([&] { render(src); });
}

TEST(ChatTemplate, BasicRender) {
  EXPECT_EQ(render("{% for m in messages %}<{{ m.role }}>{{ m['content'] }}{% endfor %}"), "<user>hi");
  EXPECT_EQ(render("{{ bos_token }}x{{ eos_token }}{% if add_generation_prompt %}!{% endif %}"), "<s>x</s>!");
  EXPECT_EQ(render("{% if add_generation_prompt %}!{% endif %}", {}, false), "");
  EXPECT_EQ(render("plain text\n"), "plain text");  // one trailing newline dropped, as jinja2 does
  EXPECT_EQ(render("text\n\n"), "text\n");
}

TEST(ChatTemplate, ToolsAndDocumentsDefaultToNone) {
  EXPECT_EQ(render("{{ tools is none }} {{ documents is none }} {{ tools is defined }}"), "True True True");
}

TEST(ChatTemplate, ExtraContextOverridesAndAdds) {
  ChatTemplate t("{{ date_string }}|{{ tools | length }}|{{ flag }}|{{ bos_token }}");
  ChatTemplateOptions o;
  o.bos_token = "<s>";
  o.extra_context = {{"date_string", "01 Jan 2025"}, {"tools", ordered_json::array({1, 2})}, {"flag", true},
                     {"bos_token", "<B>"}};
  EXPECT_EQ(t.render({}, o), "01 Jan 2025|2|True|<B>");
  o.extra_context = ordered_json::array();
  EXPECT_THROW(t.render({}, o), graft::Error);
}

TEST(ChatTemplate, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(render("[{{ nope }}]{% if nope %}x{% endif %}{{ nope is defined }}{{ nope | length }}"), "[]False0");
  EXPECT_EQ(render("{% for x in nope %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{{ messages[0].nope }}|{{ messages[5] }}|{{ messages[0].nope is defined }}"), "||False");
  EXPECT_NE(render_error("{{ nope.attr }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ nope + 1 }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ nope() }}").find("'nope' is undefined"), std::string::npos);
  EXPECT_NE(render_error("{{ messages[0].nope.deeper }}").find("has no attribute 'nope'"), std::string::npos);
}

TEST(ChatTemplate, Scoping) {
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = x + i %}{{ x }}{% endfor %}{{ x }}"), "231");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}{{ ns.x }}"),
            "4");
  EXPECT_EQ(render("{% macro m() %}{{ y }}{% endmacro %}{% set y = 5 %}{{ m() }}"), "5");
  EXPECT_EQ(render("{% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ m('x') }}|{{ m(b='2', a='1') }}"),
            "xx!|12");
}

TEST(ChatTemplate, SyntaxErrorsNameTheLine) {
  std::string e = parse_error("{% for m in messages %}\nabc\n{% endif %}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("endif"), std::string::npos) << e;
  e = parse_error("line1\n{% if x %}\nno end");
  EXPECT_NE(e.find("expected 'elif' or 'else' or 'endif'"), std::string::npos) << e;
  e = parse_error("a\nb\n{{ 1 + }}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  e = parse_error("{{ 'unterminated }}");
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  e = parse_error("\n\n{{ x ) }}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  e = parse_error("{# never closed");
  EXPECT_NE(e.find("comment"), std::string::npos) << e;
  e = parse_error("{{ x }");
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  e = parse_error("{% break %}");
  EXPECT_NE(e.find("outside of a for loop"), std::string::npos) << e;
  e = parse_error("{% if x is frobbed %}{% endif %}");
  EXPECT_NE(e.find("unknown test 'frobbed'"), std::string::npos) << e;
}

TEST(ChatTemplate, UnknownAndUnsupportedConstructsAreErrors) {
  std::string e = parse_error("ok\n{{ messages | frobnicate }}");
  EXPECT_NE(e.find("unknown filter 'frobnicate'"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  e = parse_error("{{ x | wordwrap(10) }}");
  EXPECT_NE(e.find("filter 'wordwrap' is not supported"), std::string::npos) << e;
  e = parse_error("{% include 'other.jinja' %}");
  EXPECT_NE(e.find("tag 'include' is not supported"), std::string::npos) << e;
  e = parse_error("{% frob %}");
  EXPECT_NE(e.find("unknown or unexpected tag 'frob'"), std::string::npos) << e;
  e = parse_error("{% macro m() %}\n{{ varargs | length }}{% endmacro %}");
  EXPECT_NE(e.find("uses 'varargs'"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  e = parse_error("{% for x in y recursive %}{% endfor %}");
  EXPECT_NE(e.find("recursive"), std::string::npos) << e;
  e = render_error("\n{{ 'abc'.zfill(5) }}");
  EXPECT_NE(e.find("str method 'zfill' is not supported"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  e = render_error("{{ messages.append(1) }}");
  EXPECT_NE(e.find("list method 'append'"), std::string::npos) << e;
  e = render_error("{{ '%s' % 'x' }}");
  EXPECT_NE(e.find("not supported"), std::string::npos) << e;
  e = render_error("{{ cycler(1, 2) }}");
  EXPECT_NE(e.find("'cycler' is not supported"), std::string::npos) << e;
}

TEST(ChatTemplate, RuntimeErrorsNameTheLine) {
  std::string e = render_error("a\nb\n{{ 'x' + 1 }}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("can only concatenate str"), std::string::npos) << e;
  e = render_error("{% for x in 5 %}{% endfor %}");
  EXPECT_NE(e.find("'int' object is not iterable"), std::string::npos) << e;
  e = render_error("{{ 1 // 0 }}");
  EXPECT_NE(e.find("division"), std::string::npos) << e;
  e = render_error("{% set a, b = [1] %}");
  EXPECT_NE(e.find("not enough values to unpack"), std::string::npos) << e;
  e = render_error("{% set x = 1 %}{% set x.y = 2 %}");
  EXPECT_NE(e.find("not a namespace"), std::string::npos) << e;
}

TEST(ChatTemplate, RaiseExceptionSurfacesTheMessage) {
  std::string e = render_error("line one\n{{ raise_exception('Roles must alternate!') }}");
  EXPECT_NE(e.find("Roles must alternate!"), std::string::npos) << e;
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  ChatTemplate mistral(read_file(graft::test::fixture("chat_templates/mistral_v01.jinja")));
  ChatTemplateOptions o;
  e = error_of([&] { mistral.render({{"user", "a"}, {"user", "b"}}, o); });
  EXPECT_NE(e.find("Conversation roles must alternate user/assistant/user/assistant/..."), std::string::npos) << e;
}

TEST(ChatTemplate, MoveKeepsTheTemplate) {
  ChatTemplate a("{{ messages | length }}");
  ChatTemplate b(std::move(a));
  ChatTemplateOptions o;
  EXPECT_EQ(b.render({{"user", "x"}, {"assistant", "y"}}, o), "2");
  ChatTemplate c("x");
  c = std::move(b);
  EXPECT_EQ(c.render({}, o), "0");
  EXPECT_EQ(c.source(), "{{ messages | length }}");
}

TEST(ChatTemplate, RenderJsonKeepsKeyOrderAndExtraFields) {
  ChatTemplate t("{% for m in messages %}{{ m | tojson }}{{ m.tool_calls is defined }}{% endfor %}");
  ChatTemplateOptions o;
  auto msgs = ordered_json::parse(R"([{"role": "assistant", "zeta": 1, "alpha": [1.5, null], "tool_calls": []}])");
  EXPECT_EQ(t.render_json(msgs, o), R"({"role": "assistant", "zeta": 1, "alpha": [1.5, null], "tool_calls": []}True)");
  EXPECT_THROW(t.render_json(ordered_json::object(), o), graft::Error);
}

TEST(ChatTemplate, DeepRecursionIsAnErrorNotACrash) {
  EXPECT_NE(parse_error("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(parse_error("{{ " + std::string(5000, '-') + "1 }}").find("nested too deeply"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  EXPECT_NE(parse_error(ifs).find("nested too deeply"), std::string::npos);
  std::string e = render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(e.find("recursion"), std::string::npos) << e;
}

}  // namespace
}  // namespace graft::text
