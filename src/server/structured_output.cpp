// Structured output fields of a completion request: llama-server's `grammar` (GBNF) and
// `json_schema`, and OpenAI's `response_format` ({type: text | json_object | json_schema}). Each
// becomes one compiled grammar the sequence's sampler enforces (engine/grammar.h); a bad grammar or
// schema is a 400 naming the field and the position.
#include "graft/core/error.h"
#include "graft/engine/grammar.h"
#include "graft/engine/json_schema.h"
#include "server/request.h"

namespace graft::server {

namespace {

// What the request asks for, as GBNF text and the field it came from.
struct Constraint {
  std::string field, gbnf;
};

std::optional<Constraint> constraint_of(const json& b) {
  std::vector<Constraint> found;
  auto schema_field = [&](const std::string& field, const json& schema) {
    if (!schema.is_object() && !schema.is_boolean())
      fail_as(ErrorKind::kBadRequest, "field '", field, "' must be a JSON Schema object");
    try {
      found.push_back({field, engine::json_schema_to_gbnf(schema)});
    } catch (const Error& e) {
      throw Error("field '" + field + "': " + e.what(), ErrorKind::kBadRequest);
    }
  };
  if (auto it = b.find("grammar"); it != b.end() && !it->is_null()) {
    if (!it->is_string()) fail_as(ErrorKind::kBadRequest, "field 'grammar' must be a string (GBNF)");
    if (!it->get_ref<const std::string&>().empty()) found.push_back({"grammar", it->get<std::string>()});
  }
  if (auto it = b.find("json_schema"); it != b.end() && !it->is_null()) schema_field("json_schema", *it);
  if (auto it = b.find("response_format"); it != b.end() && !it->is_null()) {
    const json& rf = *it;
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      fail_as(ErrorKind::kBadRequest, "field 'response_format' must be an object with a string 'type'");
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      // llama-server also takes a schema here.
      if (rf.contains("schema") && !rf["schema"].is_null()) schema_field("response_format.schema", rf["schema"]);
      else found.push_back({"response_format", engine::json_object_gbnf()});
    } else if (type == "json_schema") {
      if (!rf.contains("json_schema") || !rf["json_schema"].is_object())
        fail_as(ErrorKind::kBadRequest, "field 'response_format.json_schema' must be an object with a 'schema'");
      const json& js = rf["json_schema"];
      if (js.contains("strict") && !js["strict"].is_null() && !js["strict"].is_boolean())
        fail_as(ErrorKind::kBadRequest, "field 'response_format.json_schema.strict' must be true or false");
      if (!js.contains("schema")) fail_as(ErrorKind::kBadRequest, "field 'response_format.json_schema.schema' is required");
      // Enforced by the grammar whatever `strict` says: a sampler either constrains or does not.
      schema_field("response_format.json_schema.schema", js["schema"]);
    } else if (type != "text") {
      fail_as(ErrorKind::kBadRequest, "field 'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"",
              type, "\"");
    }
  }
  if (found.size() > 1)
    fail_as(ErrorKind::kBadRequest, "fields '", found[0].field, "' and '", found[1].field,
            "' both constrain the output; give one");
  if (found.empty()) return std::nullopt;
  return found[0];
}

}  // namespace

std::shared_ptr<const engine::Grammar> request_grammar(const json& body) {
  const auto c = constraint_of(body);
  if (!c) return nullptr;
  try {
    return engine::parse_grammar(c->gbnf);
  } catch (const Error& e) {
    // Grammar problems are the request's: 400 with the field, whatever the kind.
    throw Error("field '" + c->field + "': " + e.what(), ErrorKind::kBadRequest);
  }
}

}  // namespace graft::server
