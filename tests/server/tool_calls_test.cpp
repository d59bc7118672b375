// Tool calls (server/tool_calls.h): the output parsers per style (whole, streamed piece by piece,
// malformed, several calls, text around calls), the request checks, the tool grammar, and the
// rendering of OpenAI-shaped tool history against python jinja2's output for the same conversation
// (tests/fixtures/chat_templates/reference.json, tools/gen_chat_template_fixtures.py).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "graft/core/error.h"
#include "graft/engine/grammar.h"
#include "graft/text/chat_template.h"
#include "server/tool_calls.h"
#include "test_paths.h"

using nlohmann::ordered_json;
using namespace graft::server;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const ordered_json& reference() {
  static const ordered_json r = ordered_json::parse(read_file(graft::test::fixture("chat_templates/reference.json")));
  return r;
}

std::string template_source(const std::string& name) {
  return read_file(graft::test::fixture("chat_templates/" + name + ".jinja"));
}

const ordered_json kTools = ordered_json::parse(R"([{"type": "function", "function": {
  "name": "get_weather", "description": "Get the current weather in a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                 "required": ["city"], "additionalProperties": false}}},
 {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
  "properties": {"zone": {"$ref": "#/$defs/zone"}}, "required": ["zone"], "additionalProperties": false,
  "$defs": {"zone": {"enum": ["UTC", "CET"]}}}}}])");

// What a client assembles from a stream's deltas (as the openai package does).
ParsedOutput assemble(const std::vector<ordered_json>& deltas) {
  ParsedOutput out;
  for (const auto& d : deltas) {
    if (d.contains("content")) out.content += d["content"].get<std::string>();
    if (!d.contains("tool_calls")) continue;
    for (const auto& tc : d["tool_calls"]) {
      const size_t i = tc["index"].get<size_t>();
      if (i == out.calls.size()) {
        EXPECT_TRUE(tc.contains("id") && tc["id"].get<std::string>().rfind("call_", 0) == 0) << tc.dump();
        EXPECT_EQ(tc["type"], "function");
        out.calls.push_back({tc["function"]["name"].get<std::string>(), "", true});
      }
      EXPECT_LT(i, out.calls.size()) << "a delta for a call never opened: " << tc.dump();
      if (i < out.calls.size() && tc["function"].contains("arguments"))
        out.calls[i].arguments += tc["function"]["arguments"].get<std::string>();
    }
  }
  return out;
}

// Streams `text` in pieces of `step` bytes and checks the assembled deltas equal the whole parse.
void expect_stream_matches(ToolStyle style, const std::string& text, size_t max_calls = SIZE_MAX, bool cut = false) {
  const ParsedOutput whole = parse_tool_output(style, text, true, max_calls, cut);
  for (size_t step : {1, 2, 3, 7, 1000}) {
    SCOPED_TRACE("piece size " + std::to_string(step));
    ToolCallStream stream(style, max_calls);
    std::vector<ordered_json> deltas;
    for (size_t p = 0; p < text.size(); p += step)
      for (auto& d : stream.feed(text.substr(p, step))) deltas.push_back(std::move(d));
    for (auto& d : stream.finish(cut)) deltas.push_back(std::move(d));
    const ParsedOutput got = assemble(deltas);
    EXPECT_EQ(got.content, whole.content);
    ASSERT_EQ(got.calls.size(), whole.calls.size());
    for (size_t i = 0; i < got.calls.size(); ++i) {
      EXPECT_EQ(got.calls[i].name, whole.calls[i].name);
      EXPECT_EQ(got.calls[i].arguments, whole.calls[i].arguments);
    }
    EXPECT_EQ(stream.has_calls(), !whole.calls.empty());
  }
}

ParsedOutput parse(ToolStyle style, const std::string& text, bool final = true, size_t max_calls = SIZE_MAX) {
  return parse_tool_output(style, text, final, max_calls);
}

}  // namespace

// ---- Hermes / Qwen <tool_call> ---------------------------------------------------------------------

TEST(HermesParser, OneCall) {
  const std::string t = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const ParsedOutput o = parse(ToolStyle::Hermes, t);
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].name, "get_weather");
  EXPECT_EQ(o.calls[0].arguments, "{\"city\": \"Paris\"}");  // the model's own text
  EXPECT_EQ(o.content, "");
  expect_stream_matches(ToolStyle::Hermes, t);
}

TEST(HermesParser, TextAroundCalls) {
  const std::string t =
      "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\nDone, see above. ";
  const ParsedOutput o = parse(ToolStyle::Hermes, t);
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.content, "Let me check.\nDone, see above. ");
  expect_stream_matches(ToolStyle::Hermes, t);
}

TEST(HermesParser, SeveralCallsAndTheParallelLimit) {
  const std::string t =
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"s\": \"quote \\\" and </tool_call>\"}}\n</tool_call>";
  const ParsedOutput o = parse(ToolStyle::Hermes, t);
  ASSERT_EQ(o.calls.size(), 2u);
  EXPECT_EQ(o.calls[0].arguments, "{\"x\": [1, {\"y\": \"}\"}]}");
  EXPECT_EQ(o.calls[1].name, "b");
  EXPECT_EQ(ordered_json::parse(o.calls[1].arguments)["s"], "quote \" and </tool_call>");
  EXPECT_EQ(o.content, "");
  expect_stream_matches(ToolStyle::Hermes, t);
  // parallel_tool_calls false: the first call; the rest is text, kept.
  const ParsedOutput one = parse(ToolStyle::Hermes, t, true, 1);
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.content, t.substr(t.find("<tool_call>", 10)));
  expect_stream_matches(ToolStyle::Hermes, t, 1);
}

TEST(HermesParser, MalformedCallsStayContent) {
  for (const std::string& t : {
           std::string("<tool_call>\n{\"name\": \"a\", \"arguments\": }\n</tool_call>"),      // bad JSON
           std::string("<tool_call>\n{\"arguments\": {}}\n</tool_call>"),                    // no name
           std::string("<tool_call>\n{\"name\": \"a\", \"arguments\": \"x\"}\n</tool_call>"),  // not an object
           std::string("<tool_call>\n{\"name\": \"a\", \"arguments\": {}} trailing </tool_call>"),
           std::string("<tool_call> plain words"),
           std::string("I use <tool_call> tags like <tool_"),
       }) {
    SCOPED_TRACE(t);
    const ParsedOutput o = parse(ToolStyle::Hermes, t);
    EXPECT_TRUE(o.calls.empty());
    EXPECT_EQ(o.content, t);
  }
  // A call cut off (the text ends inside it, max_tokens): dropped, flagged, the text before kept; a
  // partial opening tag only at a cut (else it is text, as above); the same streamed.
  for (const bool cut : {false, true}) {
    const std::string in_call = "Sure.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": 1";
    const ParsedOutput c = parse_tool_output(ToolStyle::Hermes, in_call, true, SIZE_MAX, cut);
    EXPECT_TRUE(c.calls.empty() && c.unfinished);
    EXPECT_EQ(c.content, "Sure.");
    expect_stream_matches(ToolStyle::Hermes, in_call, SIZE_MAX, cut);
    const std::string in_tag = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_ca";
    const ParsedOutput t2 = parse_tool_output(ToolStyle::Hermes, in_tag, true, SIZE_MAX, cut);
    ASSERT_EQ(t2.calls.size(), 1u);
    EXPECT_EQ(t2.content, cut ? "" : "<tool_ca");
    EXPECT_EQ(t2.unfinished, cut);
    expect_stream_matches(ToolStyle::Hermes, in_tag, SIZE_MAX, cut);
  }
  // A malformed block before a good one: both kept, the bad one as text.
  const std::string t = "<tool_call>oops</tool_call>\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>";
  const ParsedOutput o = parse(ToolStyle::Hermes, t);
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.content, "<tool_call>oops</tool_call>");
  // Streams of malformed text: nothing lost, nothing sent twice.
  expect_stream_matches(ToolStyle::Hermes, "<tool_call>\n{\"arguments\": {}}\n</tool_call> and more");
  expect_stream_matches(ToolStyle::Hermes, "Hi <tool_call> not json </tool_call> bye");
  expect_stream_matches(ToolStyle::Hermes, t);
}

TEST(HermesParser, UnclosedCallAtTheEndAndOtherKeyOrders) {
  // Models stop at EOS without the closing tag (llama.cpp and vLLM accept it too).
  const ParsedOutput o = parse(ToolStyle::Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": 1}}");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].arguments, "{\"k\": 1}");
  // "arguments" before "name": re-serialised; "parameters" is taken for "arguments".
  const ParsedOutput r = parse(ToolStyle::Hermes, "<tool_call>{\"parameters\": {\"k\": 2}, \"name\": \"b\"}</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "b");
  EXPECT_EQ(r.calls[0].arguments, "{\"k\":2}");
  expect_stream_matches(ToolStyle::Hermes, "<tool_call>{\"parameters\": {\"k\": 2}, \"name\": \"b\"}</tool_call>");
}

TEST(HermesParser, PartialTextIsHeldBackUntilDecided) {
  auto partial = [](const std::string& t) { return parse(ToolStyle::Hermes, t, false); };
  EXPECT_EQ(partial("Hello <tool").content, "Hello");
  EXPECT_EQ(partial("Hello <tools are").content, "Hello <tools are");
  EXPECT_EQ(partial("Hello\n").content, "Hello");  // blanks may precede a call
  ParsedOutput o = partial("Hi\n<tool_call>\n{\"na");
  EXPECT_EQ(o.content, "Hi");
  EXPECT_TRUE(o.calls.empty());
  o = partial("Hi\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_FALSE(o.calls[0].complete);
  EXPECT_EQ(o.calls[0].name, "get_weather");
  EXPECT_EQ(o.calls[0].arguments, "{\"city\": \"Pa");
  // The arguments value complete, the call object not yet: exactly the value.
  o = partial("<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": 1}\n");
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].arguments, "{\"k\": 1}");
}

TEST(HermesParser, GenericStyleParsesTheSameSyntax) {
  const std::string t = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>";
  EXPECT_EQ(parse(ToolStyle::Generic, t).calls.size(), 1u);
}

// ---- Llama 3.x JSON ----------------------------------------------------------------------------------

TEST(Llama3Parser, BareObjectAndPythonTag) {
  for (const std::string& t : {std::string("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"),
                              std::string("<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"),
                              std::string("  {\"type\": \"function\", \"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}")}) {
    SCOPED_TRACE(t);
    const ParsedOutput o = parse(ToolStyle::Llama3Json, t);
    ASSERT_EQ(o.calls.size(), 1u);
    EXPECT_EQ(o.calls[0].name, "get_weather");
    EXPECT_EQ(o.calls[0].arguments, "{\"city\": \"Paris\"}");
    EXPECT_EQ(o.content, "");
    expect_stream_matches(ToolStyle::Llama3Json, t);
  }
}

TEST(Llama3Parser, SeveralCallsAndTextAfter) {
  const std::string t = "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": {\"k\": [1]}}\nThat is all.";
  const ParsedOutput o = parse(ToolStyle::Llama3Json, t);
  ASSERT_EQ(o.calls.size(), 2u);
  EXPECT_EQ(o.calls[1].arguments, "{\"k\": [1]}");
  EXPECT_EQ(o.content, "That is all.");
  expect_stream_matches(ToolStyle::Llama3Json, t);
  const ParsedOutput one = parse(ToolStyle::Llama3Json, t, true, 1);
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.content, t.substr(t.find("{\"name\": \"b\"")));
}

TEST(Llama3Parser, NonCallsStayContent) {
  for (const std::string& t : {std::string("The weather is fine."), std::string("{\"answer\": 42}"),
                              std::string("{\"name\": \"a\", \"parameters\": [1]}"),
                              std::string("Sure: {\"name\": \"a\", \"parameters\": {}}")}) {
    SCOPED_TRACE(t);
    const ParsedOutput o = parse(ToolStyle::Llama3Json, t);
    EXPECT_TRUE(o.calls.empty());
    EXPECT_EQ(o.content, t);
    expect_stream_matches(ToolStyle::Llama3Json, t);
  }
  // Cut off inside the arguments (max_tokens): dropped by the whole answer and by a stream alike
  // (a stream sends a call only once complete): no call, no text, `unfinished` set.
  const std::string cut = "{\"name\": \"a\", \"parameters\": {\"k\": ";
  const ParsedOutput dropped = parse(ToolStyle::Llama3Json, cut);
  EXPECT_TRUE(dropped.calls.empty() && dropped.content.empty() && dropped.unfinished);
  expect_stream_matches(ToolStyle::Llama3Json, cut);
  const std::string one_and_a_cut = "{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"param";
  const ParsedOutput first = parse(ToolStyle::Llama3Json, one_and_a_cut);
  ASSERT_EQ(first.calls.size(), 1u);
  EXPECT_TRUE(first.unfinished && first.content.empty());
  expect_stream_matches(ToolStyle::Llama3Json, one_and_a_cut);
  EXPECT_EQ(parse(ToolStyle::Llama3Json, "<|python", false).content, "");
  EXPECT_EQ(parse(ToolStyle::Llama3Json, "{\"name\": \"a\", \"param", false).content, "");
  const ParsedOutput p = parse(ToolStyle::Llama3Json, "{\"name\": \"a\", \"parameters\": {\"k\"", false);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"k\"");
}

// ---- the assistant message -------------------------------------------------------------------------------

TEST(ToolMessage, NullContentWithCallsAndIds) {
  const ParsedOutput o = parse(ToolStyle::Hermes, "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>");
  const ordered_json m = tool_message(o, {"call_x"});
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["tool_calls"][0]["id"], "call_x");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{}");
  const ordered_json plain = tool_message(parse(ToolStyle::Hermes, "hi"), {});
  EXPECT_EQ(plain["content"], "hi");
  EXPECT_FALSE(plain.contains("tool_calls"));
  EXPECT_NE(new_tool_call_id(), new_tool_call_id());
  EXPECT_EQ(new_tool_call_id().size(), 29u);
}

// ---- request side ------------------------------------------------------------------------------------

TEST(ToolStyle, DetectedFromTheTemplate) {
  EXPECT_EQ(tool_style_of(template_source("qwen2_5")), ToolStyle::Hermes);
  EXPECT_EQ(tool_style_of(template_source("llama3_1")), ToolStyle::Llama3Json);
  for (const char* t : {"smollm2", "smollm2_gguf", "llama3", "mistral_v03", "gemma", "zephyr"})
    EXPECT_EQ(tool_style_of(template_source(t)), ToolStyle::Generic) << t;
}

namespace {
std::string request_error(const std::string& body) {
  try {
    (void)parse_tool_request(ordered_json::parse(body), ToolStyle::Hermes);
  } catch (const graft::Error& e) {
    EXPECT_EQ(e.kind(), graft::ErrorKind::kBadRequest) << e.what();
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ToolRequest, ChoicesAndLimits) {
  ordered_json b{{"tools", kTools}};
  auto tr = parse_tool_request(b, ToolStyle::Hermes);
  ASSERT_TRUE(tr);
  EXPECT_EQ(tr->choice, ToolChoice::Auto);
  EXPECT_EQ(tr->names, (std::vector<std::string>{"get_weather", "get_time"}));
  EXPECT_GT(tr->max_calls(), 1u);
  b["parallel_tool_calls"] = false;
  EXPECT_EQ(parse_tool_request(b, ToolStyle::Hermes)->max_calls(), 1u);
  b["tool_choice"] = ordered_json{{"type", "function"}, {"function", {{"name", "get_time"}}}};
  b.erase("parallel_tool_calls");
  tr = parse_tool_request(b, ToolStyle::Hermes);
  EXPECT_EQ(tr->choice, ToolChoice::Named);
  EXPECT_EQ(tr->forced, "get_time");
  EXPECT_EQ(tr->max_calls(), 1u);
  b["tool_choice"] = "none";
  EXPECT_FALSE(parse_tool_request(b, ToolStyle::Hermes)->parses());
  EXPECT_FALSE(parse_tool_request(ordered_json{{"tools", ordered_json::array()}}, ToolStyle::Hermes));
  EXPECT_FALSE(parse_tool_request(ordered_json{{"tool_choice", "auto"}}, ToolStyle::Hermes));
}

TEST(ToolRequest, BadToolsNameTheField) {
  EXPECT_NE(request_error(R"({"tools": {}})").find("'tools'"), std::string::npos);
  EXPECT_NE(request_error(R"({"tools": [{"type": "function"}]})").find("'tools[0].function'"), std::string::npos);
  EXPECT_NE(request_error(R"({"tools": [{"type": "code", "function": {"name": "a"}}]})").find("'tools[0].type'"),
            std::string::npos);
  EXPECT_NE(request_error(R"({"tools": [{"type": "function", "function": {"name": "a b"}}]})").find("'tools[0].function.name'"),
            std::string::npos);
  EXPECT_NE(request_error(R"({"tools": [{"type": "function", "function": {"name": "a"}},
                                        {"type": "function", "function": {"name": "a"}}]})")
                .find("'tools[1].function.name'"),
            std::string::npos);
  const std::string e = request_error(R"({"tools": [{"type": "function", "function": {"name": "a", "parameters":
      {"type": "object", "properties": {"s": {"type": "string", "pattern": "^x"}}}}}]})");
  EXPECT_NE(e.find("'tools[0].function.parameters'"), std::string::npos) << e;
  EXPECT_NE(e.find("/properties/s"), std::string::npos) << e;
  EXPECT_NE(request_error(R"({"tools": [{"type": "function", "function": {"name": "a", "parameters": 3}}]})")
                .find("'tools[0].function.parameters'"),
            std::string::npos);
  EXPECT_NE(request_error(R"({"tools": [{"type": "function", "function": {"name": "a"}}],
                             "tool_choice": {"type": "function", "function": {"name": "b"}}})")
                .find("'tool_choice.function.name'"),
            std::string::npos);
  EXPECT_NE(request_error(R"({"tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "any"})")
                .find("'tool_choice'"),
            std::string::npos);
  EXPECT_NE(request_error(R"({"tool_choice": "required"})").find("'tool_choice'"), std::string::npos);
  EXPECT_NE(request_error(R"({"tools": [{"type": "function", "function": {"name": "a"}}], "parallel_tool_calls": 1})")
                .find("'parallel_tool_calls'"),
            std::string::npos);
}

// The grammar of tool_choice required / named, checked on call texts.
TEST(ToolGrammar, AcceptsExactlyValidCalls) {
  auto grammar_for = [](ordered_json body, ToolStyle style) {
    body["tools"] = kTools;
    return tool_call_grammar(*parse_tool_request(body, style));
  };
  auto accepts = [](const std::shared_ptr<const graft::engine::Grammar>& g, const std::string& text) {
    graft::engine::GrammarMatcher m(g);
    return m.accepts(text) && (m.accept(text), m.can_end());
  };
  const auto req = grammar_for({{"tool_choice", "required"}}, ToolStyle::Hermes);
  ASSERT_TRUE(req);
  const std::string w = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";
  const std::string t = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"UTC\"}}\n</tool_call>";
  EXPECT_TRUE(accepts(req, w));
  EXPECT_TRUE(accepts(req, t));
  EXPECT_TRUE(accepts(req, w + "\n" + t));                                          // parallel
  EXPECT_FALSE(accepts(req, "Sure! " + w));                                         // a call, nothing else
  EXPECT_FALSE(accepts(req, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"PST\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(req, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"celsius\"}}\n</tool_call>"));
  const auto named = grammar_for({{"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}},
                                 ToolStyle::Hermes);
  EXPECT_TRUE(accepts(named, t));
  EXPECT_FALSE(accepts(named, w));
  EXPECT_FALSE(accepts(named, t + "\n" + t));  // one call
  const auto single = grammar_for({{"tool_choice", "required"}, {"parallel_tool_calls", false}}, ToolStyle::Hermes);
  EXPECT_TRUE(accepts(single, w));
  EXPECT_FALSE(accepts(single, w + "\n" + t));
  const auto llama = grammar_for({{"tool_choice", "required"}}, ToolStyle::Llama3Json);
  EXPECT_TRUE(accepts(llama, "{\"name\": \"get_time\", \"parameters\": {\"zone\": \"CET\"}}"));
  EXPECT_FALSE(accepts(llama, "{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}"));
  EXPECT_FALSE(grammar_for({{"tool_choice", "auto"}}, ToolStyle::Hermes));
  // What the grammar accepts, the parser reads back as the same call.
  const ParsedOutput o = parse(ToolStyle::Hermes, w + "\n" + t);
  ASSERT_EQ(o.calls.size(), 2u);
  EXPECT_EQ(ordered_json::parse(o.calls[1].arguments), ordered_json::parse(R"({"zone": "UTC"})"));
}

namespace {
// A reference conversation as an OpenAI client sends it: arguments as JSON strings, null content.
ordered_json wire_messages(const std::string& set) {
  ordered_json wire = reference()["message_sets"][set];
  for (auto& m : wire)
    if (m.contains("tool_calls")) {
      m["content"] = nullptr;
      for (auto& c : m["tool_calls"]) c["function"]["arguments"] = c["function"]["arguments"].dump();
    }
  return wire;
}

std::string render(const std::string& tmpl, const ToolPrompt& tp, const ordered_json& ref_case) {
  graft::text::ChatTemplateOptions o;
  o.add_generation_prompt = ref_case["add_generation_prompt"].get<bool>();
  o.bos_token = ref_case["bos_token"].get<std::string>();
  o.eos_token = ref_case["eos_token"].get<std::string>();
  o.extra_context = tp.extra_context;
  return graft::text::ChatTemplate(template_source(tmpl)).render_json(tp.messages, o);
}
}  // namespace

// OpenAI-shaped history (arguments as a JSON string, null content) rendered by real templates gives
// exactly what jinja2 renders for the transformers-shaped conversation (arguments as objects).
TEST(ToolPrompt, OpenAiHistoryMatchesJinja2) {
  int checked = 0;
  for (const auto& c : reference()["cases"]) {
    const std::string set = c["messages"].get<std::string>(), name = c["template"].get<std::string>();
    if ((set != "tool_use" && set != "tool_use_parallel") || !c.contains("extra") || !c.contains("expected")) continue;
    if ((name != "qwen2_5" && name != "llama3_1") || c["extra"].size() != 1 || !c["extra"].contains("tools")) continue;
    SCOPED_TRACE(name + " / " + set);
    const ToolStyle style = tool_style_of(template_source(name));
    const auto tr = parse_tool_request(ordered_json{{"tools", c["extra"]["tools"]}}, style);
    const ToolPrompt tp = tool_prompt(wire_messages(set), &*tr, style);
    ASSERT_FALSE(tp.extra_context.is_null());
    EXPECT_EQ(render(name, tp, c), c["expected"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 6);  // qwen2_5 x 2 sets, llama3_1 x 1, each with and without the generation prompt
}

// The generic fallback writes tools and history in Qwen 2.5's own words: the plain ChatML template
// (Qwen 2's, which knows no tools) given the generic prompt renders exactly what jinja2 renders with
// Qwen 2.5's tool template.
TEST(ToolPrompt, GenericFallbackMatchesQwen25RenderedByJinja2) {
  int checked = 0;
  for (const auto& c : reference()["cases"]) {
    if (c["template"] != "qwen2_5" || c["messages"] != "tool_use_parallel" || !c.contains("expected")) continue;
    const auto tr = parse_tool_request(ordered_json{{"tools", c["extra"]["tools"]}}, ToolStyle::Generic);
    const ToolPrompt tp = tool_prompt(wire_messages("tool_use_parallel"), &*tr, ToolStyle::Generic);
    graft::text::ChatTemplateOptions o;
    o.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    EXPECT_EQ(graft::text::ChatTemplate(template_source("qwen2")).render_json(tp.messages, o),
              c["expected"].get<std::string>());
    ++checked;
  }
  EXPECT_EQ(checked, 2);
}

TEST(ToolPrompt, NoneLeavesTheToolsOut) {
  ordered_json body{{"tools", kTools}, {"tool_choice", "none"}};
  const auto tr = parse_tool_request(body, ToolStyle::Hermes);
  const ordered_json msgs = ordered_json::parse(R"([{"role": "user", "content": "hi"}])");
  EXPECT_TRUE(tool_prompt(msgs, &*tr, ToolStyle::Hermes).extra_context.is_null());
  EXPECT_EQ(tool_prompt(msgs, &*tr, ToolStyle::Generic).messages, msgs);
}

TEST(ToolPrompt, GenericWritesToolsAndHistoryAsText) {
  ordered_json body{{"tools", kTools}};
  const auto tr = parse_tool_request(body, ToolStyle::Generic);
  const ordered_json msgs = ordered_json::parse(R"([
    {"role": "user", "content": "Weather and time in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
      {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{\"zone\": \"CET\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "21 C"},
    {"role": "tool", "tool_call_id": "call_2", "content": "12:00"}])");
  const ToolPrompt tp = tool_prompt(msgs, &*tr, ToolStyle::Generic);
  EXPECT_TRUE(tp.extra_context.is_null());
  ASSERT_EQ(tp.messages.size(), 4u);
  EXPECT_EQ(tp.messages[0]["role"], "system");
  EXPECT_EQ(tp.messages[0]["content"], generic_tools_system_text(*tr));
  EXPECT_NE(generic_tools_system_text(*tr).find(python_style_json(kTools[1])), std::string::npos);
  EXPECT_EQ(tp.messages[2]["content"],
            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>");
  EXPECT_FALSE(tp.messages[2].contains("tool_calls"));
  EXPECT_EQ(tp.messages[3], ordered_json::parse(R"({"role": "user", "content":
      "<tool_response>\n21 C\n</tool_response>\n<tool_response>\n12:00\n</tool_response>"})"));
  // SmolLM2's template (no tools support) renders it.
  graft::text::ChatTemplateOptions o;
  const std::string text = graft::text::ChatTemplate(template_source("smollm2")).render_json(tp.messages, o);
  EXPECT_NE(text.find("<|im_start|>system\n# Tools"), std::string::npos);
  EXPECT_NE(text.find("<|im_start|>user\n<tool_response>\n21 C"), std::string::npos);
  // An existing system message is extended, not replaced.
  const ordered_json with_sys = ordered_json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "x"}])");
  EXPECT_EQ(tool_prompt(with_sys, &*tr, ToolStyle::Generic).messages[0]["content"],
            "Be brief.\n\n" + generic_tools_system_text(*tr));
}

TEST(ToolPrompt, BadHistoryNamesTheField) {
  auto error_of = [](const char* msgs) {
    try {
      (void)tool_prompt(ordered_json::parse(msgs), nullptr, ToolStyle::Hermes);
    } catch (const graft::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": null, "tool_calls": [
      {"id": "c", "type": "function", "function": {"name": "a", "arguments": "{not json"}}]}])")
                .find("'messages[1].tool_calls[0].function.arguments'"),
            std::string::npos);
  EXPECT_NE(error_of(R"([{"role": "tool", "content": "x"}])").find("'messages[0].tool_call_id'"), std::string::npos);
  EXPECT_NE(error_of(R"([{"role": "user", "content": "x", "tool_calls": []}])").find("'messages[0].tool_calls'"),
            std::string::npos);
  EXPECT_EQ(error_of(R"([{"role": "assistant", "content": "x", "tool_calls": null}])"), "");
}
