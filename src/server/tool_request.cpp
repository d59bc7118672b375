// Tool calls, request side: validating `tools` / `tool_choice`, the prompt in the template's tool
// style, and the grammar of tool_choice required / named (server/tool_calls.h).
#include <algorithm>
#include <cstdint>
#include <set>

#include "graft/core/error.h"
#include "graft/engine/json_schema.h"
#include "server/tool_calls.h"

namespace graft::server {

using json = nlohmann::ordered_json;

namespace {

[[noreturn]] void bad(const std::string& field, const std::string& what) {
  fail_as(ErrorKind::kBadRequest, "field '", field, "' ", what);
}

bool valid_function_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

// A function's arguments schema as the grammar embeds it: absent or {} is any object; a top-level
// $schema/$id (allowed at a document's root, not below it) is dropped.
json arguments_schema(const json& function) {
  auto it = function.find("parameters");
  if (it == function.end() || it->is_null() || (it->is_object() && it->empty())) return json{{"type", "object"}};
  json s = *it;
  if (s.is_object()) {
    s.erase("$schema");
    s.erase("$id");
  }
  return s;
}

// Local "$ref"s of a schema moved to `prefix` (a JSON pointer) inside a bigger document.
void rebase_refs(json& s, const std::string& prefix) {
  if (s.is_object()) {
    for (auto& [k, v] : s.items()) {
      if (k == "$ref" && v.is_string() && !v.get<std::string>().empty() && v.get<std::string>()[0] == '#')
        v = "#" + prefix + v.get<std::string>().substr(1);
      else
        rebase_refs(v, prefix);
    }
  } else if (s.is_array()) {
    for (auto& v : s) rebase_refs(v, prefix);
  }
}

json validated_tool(const json& t, size_t i, std::set<std::string>& seen) {
  const std::string f = "tools[" + std::to_string(i) + "]";
  if (!t.is_object()) bad(f, "must be an object {\"type\": \"function\", \"function\": {...}}");
  if (!t.contains("type") || t["type"] != "function")
    bad(f + ".type", "must be \"function\" (the only tool type OpenAI's chat API and graft define)");
  if (!t.contains("function") || !t["function"].is_object())
    bad(f + ".function", "must be an object {\"name\", \"description\", \"parameters\"}");
  const json& fn = t["function"];
  if (!fn.contains("name") || !fn["name"].is_string() || !valid_function_name(fn["name"].get<std::string>()))
    bad(f + ".function.name", "must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
  const std::string name = fn["name"].get<std::string>();
  if (!seen.insert(name).second) bad(f + ".function.name", "repeats the name '" + name + "' of an earlier tool");
  if (fn.contains("description") && !fn["description"].is_null() && !fn["description"].is_string())
    bad(f + ".function.description", "must be a string");
  if (fn.contains("strict") && !fn["strict"].is_null() && !fn["strict"].is_boolean())
    bad(f + ".function.strict", "must be true or false");
  if (fn.contains("parameters") && !fn["parameters"].is_null()) {
    const json& p = fn["parameters"];
    if (!p.is_object()) bad(f + ".function.parameters", "must be a JSON Schema object");
    try {
      (void)engine::json_schema_to_gbnf(arguments_schema(fn));
    } catch (const Error& e) {
      // Unsupported keywords too: a tool the server could not constrain is the request's problem.
      throw Error("field '" + f + ".function.parameters': " + e.what(), ErrorKind::kBadRequest);
    }
  }
  return t;
}

}  // namespace

ToolStyle tool_style_of(const std::string& src) {
  if (src.find("<tool_call>") != std::string::npos) return ToolStyle::Hermes;
  if (src.find("<|start_header_id|>") != std::string::npos &&
      (src.find("<|python_tag|>") != std::string::npos || src.find("\"parameters\"") != std::string::npos))
    return ToolStyle::Llama3Json;
  return ToolStyle::Generic;
}

const char* tool_style_name(ToolStyle s) {
  switch (s) {
    case ToolStyle::Hermes: return "hermes";
    case ToolStyle::Llama3Json: return "llama3_json";
    case ToolStyle::Generic: return "generic";
  }
  return "?";
}

size_t ToolRequest::max_calls() const { return parallel && choice != ToolChoice::Named ? SIZE_MAX : 1; }

std::optional<ToolRequest> parse_tool_request(const json& b, ToolStyle style) {
  ToolRequest tr;
  tr.style = style;
  tr.tools = json::array();
  if (auto it = b.find("tools"); it != b.end() && !it->is_null()) {
    if (!it->is_array()) bad("tools", "must be an array of {\"type\": \"function\", \"function\": {...}}");
    std::set<std::string> seen;
    for (size_t i = 0; i < it->size(); ++i) {
      tr.tools.push_back(validated_tool((*it)[i], i, seen));
      tr.names.push_back((*it)[i]["function"]["name"].get<std::string>());
    }
  }
  if (auto it = b.find("parallel_tool_calls"); it != b.end() && !it->is_null()) {
    if (!it->is_boolean()) bad("parallel_tool_calls", "must be true or false");
    tr.parallel = it->get<bool>();
  }
  if (auto it = b.find("tool_choice"); it != b.end() && !it->is_null()) {
    const json& c = *it;
    if (c.is_string()) {
      const std::string s = c.get<std::string>();
      if (s == "auto") tr.choice = ToolChoice::Auto;
      else if (s == "none") tr.choice = ToolChoice::None;
      else if (s == "required") tr.choice = ToolChoice::Required;
      else bad("tool_choice", "must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}, got \"" + s + "\"");
    } else if (c.is_object()) {
      if (!c.contains("type") || c["type"] != "function") bad("tool_choice.type", "must be \"function\"");
      if (!c.contains("function") || !c["function"].is_object() || !c["function"].contains("name") ||
          !c["function"]["name"].is_string())
        bad("tool_choice.function.name", "must be a string");
      tr.choice = ToolChoice::Named;
      tr.forced = c["function"]["name"].get<std::string>();
      if (std::find(tr.names.begin(), tr.names.end(), tr.forced) == tr.names.end())
        bad("tool_choice.function.name", "names no function in 'tools': '" + tr.forced + "'");
    } else {
      bad("tool_choice", "must be a string or an object");
    }
  }
  if (tr.tools.empty()) {
    if (tr.choice == ToolChoice::Required) bad("tool_choice", "\"required\" needs a non-empty 'tools'");
    return std::nullopt;
  }
  return tr;
}

std::string python_style_json(const json& v) {
  if (v.is_object()) {
    std::string s = "{";
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      s += (first ? "" : ", ") + json(k).dump() + ": " + python_style_json(x);
      first = false;
    }
    return s + "}";
  }
  if (v.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + python_style_json(v[i]);
    return s + "]";
  }
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string generic_tools_system_text(const ToolRequest& tr) {
  // Qwen 2.5's wording (a Hermes-style template), so small models trained on it recognise it.
  std::string s = "# Tools\n\nYou may call ";
  s += tr.max_calls() == 1 ? "a function" : "one or more functions";
  s += " to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML "
       "tags:\n<tools>";
  for (const auto& t : tr.tools) {
    s += "\n";
    s += python_style_json(t);
  }
  s += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
       "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
       "<args-json-object>}\n</tool_call>";
  return s;
}

namespace {

// An assistant message's tool_calls, checked, with JSON-string arguments parsed into objects.
json normalized_calls(const json& calls, const std::string& f) {
  if (!calls.is_array()) bad(f, "must be an array of {id, type: function, function: {name, arguments}}");
  json out = json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const std::string g = f + "[" + std::to_string(j) + "]";
    json c = calls[j];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
      bad(g + ".function", "must be an object {name, arguments}");
    if (c.contains("type") && c["type"] != "function") bad(g + ".type", "must be \"function\"");
    if (c.contains("id") && !c["id"].is_string()) bad(g + ".id", "must be a string");
    json& fn = c["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) bad(g + ".function.name", "must be a string");
    if (!fn.contains("arguments")) bad(g + ".function.arguments", "is required (a JSON object, as a string)");
    if (fn["arguments"].is_string()) {
      try {
        fn["arguments"] = json::parse(fn["arguments"].get<std::string>());
      } catch (const json::exception&) {
        bad(g + ".function.arguments", "must be a JSON object written as a string");
      }
    }
    if (!fn["arguments"].is_object()) bad(g + ".function.arguments", "must be a JSON object written as a string");
    out.push_back(std::move(c));
  }
  return out;
}

std::string content_text(const json& m) {
  auto it = m.find("content");
  return it != m.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

ToolPrompt tool_prompt(const json& messages, const ToolRequest* tr, ToolStyle style) {
  json msgs = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    json m = messages[i];
    const std::string f = "messages[" + std::to_string(i) + "]";
    const std::string role = m["role"].get<std::string>();
    if (m.contains("tool_calls") && m["tool_calls"].is_null()) m.erase("tool_calls");
    if (m.contains("tool_calls")) {
      if (role != "assistant") bad(f + ".tool_calls", "is only for assistant messages");
      m["tool_calls"] = normalized_calls(m["tool_calls"], f + ".tool_calls");
      if (!m.contains("content") || m["content"].is_null()) m["content"] = "";
    }
    if (role == "tool") {
      if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string())
        bad(f + ".tool_call_id", "must be a string (the id of the call this message answers)");
      if (m.contains("name") && !m["name"].is_string()) bad(f + ".name", "must be a string");
      if (!m.contains("content") || !m["content"].is_string()) bad(f + ".content", "must be a string");
    }
    msgs.push_back(std::move(m));
  }
  const bool offer = tr && tr->choice != ToolChoice::None;
  if (style != ToolStyle::Generic) {
    ToolPrompt p{std::move(msgs), nullptr};
    if (offer) p.extra_context = json{{"tools", tr->tools}};
    return p;
  }
  // Generic: everything as text the template renders like any other message.
  json out = json::array();
  for (auto& m : msgs) {
    const std::string role = m["role"].get<std::string>();
    if (role == "tool") {
      const std::string block = "<tool_response>\n" + content_text(m) + "\n</tool_response>";
      if (!out.empty() && out.back().value("graft_tool_results", false)) {
        out.back()["content"] = out.back()["content"].get<std::string>() + "\n" + block;
      } else {
        out.push_back(json{{"role", "user"}, {"content", block}, {"graft_tool_results", true}});
      }
      continue;
    }
    if (m.contains("tool_calls")) {
      std::string text = content_text(m);
      for (const auto& c : m["tool_calls"]) {
        const json call{{"name", c["function"]["name"]}, {"arguments", c["function"]["arguments"]}};
        text += (text.empty() ? "" : "\n") + std::string("<tool_call>\n") + python_style_json(call) + "\n</tool_call>";
      }
      m.erase("tool_calls");
      m["content"] = text;
    }
    out.push_back(std::move(m));
  }
  for (auto& m : out) m.erase("graft_tool_results");
  if (offer) {
    const std::string text = generic_tools_system_text(*tr);
    if (!out.empty() && out[0]["role"] == "system" && out[0]["content"].is_string())
      out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + text;
    else
      out.insert(out.begin(), json{{"role", "system"}, {"content", text}});
  }
  return {std::move(out), nullptr};
}

ToolGrammar tool_call_gbnf(const ToolRequest& tr) {
  // One JSON Schema for "a call of an allowed function", converted as a whole; the call syntax
  // around it is a rule of our own, named so as not to collide with the converter's rules.
  const char* args_key = tr.style == ToolStyle::Llama3Json ? "parameters" : "arguments";
  std::vector<json> branches;
  for (const auto& t : tr.tools) {
    const json& fn = t["function"];
    const std::string name = fn["name"].get<std::string>();
    if (tr.choice == ToolChoice::Named && name != tr.forced) continue;
    json props = json::object();
    props["name"] = json{{"const", name}};
    props[args_key] = arguments_schema(fn);
    branches.push_back(json{{"type", "object"},
                            {"properties", props},
                            {"required", json::array({"name", args_key})},
                            {"additionalProperties", false}});
  }
  json schema;
  if (branches.size() == 1) {
    schema = branches[0];
    rebase_refs(schema["properties"][args_key], std::string("/properties/") + args_key);
  } else {
    schema = json{{"anyOf", json::array()}};
    for (size_t i = 0; i < branches.size(); ++i) {
      rebase_refs(branches[i]["properties"][args_key],
                  "/anyOf/" + std::to_string(i) + "/properties/" + args_key);
      schema["anyOf"].push_back(branches[i]);
    }
  }
  ToolGrammar g;
  g.gbnf = engine::json_schema_to_gbnf(schema);
  g.root = "tool-call-frame";
  while (g.gbnf.find(g.root + " ::=") != std::string::npos) g.root += "-x";
  std::string call = tr.style == ToolStyle::Llama3Json ? std::string("root")
                                                       : std::string(R"("<tool_call>\n" root "\n</tool_call>")");
  std::string frame = call;
  if (tr.max_calls() > 1 && tr.style != ToolStyle::Llama3Json) frame += " ( \"\\n\" " + call + " )*";
  g.gbnf += "\n" + g.root + " ::= " + frame + "\n";
  return g;
}

std::shared_ptr<const engine::Grammar> tool_call_grammar(const ToolRequest& tr) {
  if (tr.choice != ToolChoice::Required && tr.choice != ToolChoice::Named) return nullptr;
  try {
    const ToolGrammar g = tool_call_gbnf(tr);
    return engine::parse_grammar(g.gbnf, g.root);
  } catch (const Error& e) {
    throw Error(std::string("field 'tools': the grammar of tool_choice: ") + e.what(), ErrorKind::kBadRequest);
  }
}

}  // namespace graft::server
