// allOf (and $ref with constraining siblings) as one schema. Only merges whose result is exactly the
// conjunction are done; anything else is refused rather than approximated, since a looser grammar
// would let the model write documents the schema rejects.
#include <algorithm>
#include <optional>
#include <set>

#include "engine/json_schema_gbnf.h"
#include "graft/core/error.h"

namespace graft::engine::json_schema_detail {

bool is_annotation(const std::string& k) {
  static const std::set<std::string> kAnnotations = {
      "title", "description", "default", "examples", "$schema", "$comment", "deprecated", "readOnly", "writeOnly",
      "contentMediaType", "contentEncoding", "contentSchema", "discriminator", "$defs", "definitions", "$vocabulary"};
  return kAnnotations.count(k) > 0 || k.rfind("x-", 0) == 0;
}

namespace {

// Nesting of $ref/allOf resolved while flattening; deeper is a cycle in practice.
constexpr int kMaxMergeDepth = 64;

using Resolver = std::function<json(const std::string&, const std::string&)>;

[[noreturn]] void refuse(const std::string& pointer, const std::string& what) {
  fail_as(ErrorKind::kUnsupported, "json_schema: ", pointer_text(pointer), ": allOf: ", what);
}

[[noreturn]] void contradict(const std::string& pointer, const std::string& what) {
  fail_as(ErrorKind::kBadRequest, "json_schema: ", pointer_text(pointer), ": allOf: ", what);
}

// The parts' plain schemas (no $ref, no allOf at their top level), in order.
void flatten(const json& part, const std::string& pointer, const Resolver& resolve, int depth, std::vector<json>& out) {
  if (depth > kMaxMergeDepth) contradict(pointer, "'$ref'/'allOf' nest too deep (a cycle?)");
  if (part.is_boolean()) {
    if (!part.get<bool>()) contradict(pointer, "includes the schema false: no document is valid");
    return;  // true adds nothing
  }
  if (!part.is_object()) contradict(pointer, "a schema must be an object or a boolean");
  json rest = part;
  if (rest.contains("$ref")) {
    if (!rest["$ref"].is_string()) contradict(pointer, "'$ref' must be a string");
    const std::string ref = rest["$ref"].get<std::string>();
    rest.erase("$ref");
    flatten(resolve(ref, pointer), ref.size() > 1 ? ref.substr(1) : "", resolve, depth + 1, out);
  }
  if (rest.contains("allOf")) {
    const json all = rest["allOf"];
    rest.erase("allOf");
    if (!all.is_array() || all.empty()) contradict(pointer, "'allOf' must be a non-empty array");
    for (size_t i = 0; i < all.size(); ++i)
      flatten(all[i], pointer_child(pointer_child(pointer, "allOf"), std::to_string(i)), resolve, depth + 1, out);
  }
  out.push_back(std::move(rest));
}

std::vector<std::string> type_names(const json& t) {
  std::vector<std::string> out;
  if (t.is_string())
    out.push_back(t.get<std::string>());
  else if (t.is_array())
    for (const auto& x : t)
      if (x.is_string()) out.push_back(x.get<std::string>());
  return out;
}

json intersect_types(const json& a, const json& b, const std::string& pointer) {
  const auto ta = type_names(a), tb = type_names(b);
  std::vector<std::string> both;
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (const auto& t : ta) {
    if (has(tb, t))
      both.push_back(t);
    else if (t == "integer" && has(tb, "number"))
      both.push_back(t);
    else if (t == "number" && has(tb, "integer"))
      both.push_back("integer");
  }
  std::sort(both.begin(), both.end());
  both.erase(std::unique(both.begin(), both.end()), both.end());
  if (both.empty()) contradict(pointer, "the parts' types have nothing in common");
  return both.size() == 1 ? json(both[0]) : json(both);
}

bool restricts_extras(const json& s) {
  return s.contains("additionalProperties") && s["additionalProperties"] != json(true);
}

void merge_keyword(json& r, const std::string& k, const json& v, const std::string& pointer) {
  if (!r.contains(k)) {
    r[k] = v;
    return;
  }
  json& cur = r[k];
  if (is_annotation(k) || k == "$id" || cur == v) return;
  if (k == "required" && cur.is_array() && v.is_array()) {
    for (const auto& name : v)
      if (std::find(cur.begin(), cur.end(), name) == cur.end()) cur.push_back(name);
  } else if (k == "properties" && cur.is_object() && v.is_object()) {
    for (const auto& [name, sub] : v.items()) {
      if (!cur.contains(name))
        cur[name] = sub;
      else if (cur[name] != sub)
        cur[name] = json{{"allOf", json::array({cur[name], sub})}};
    }
  } else if (k == "type") {
    cur = intersect_types(cur, v, pointer);
  } else if ((k == "minLength" || k == "minItems" || k == "minimum" || k == "exclusiveMinimum") && cur.is_number() &&
             v.is_number()) {
    if (v > cur) cur = v;
  } else if ((k == "maxLength" || k == "maxItems" || k == "maximum" || k == "exclusiveMaximum") && cur.is_number() &&
             v.is_number()) {
    if (v < cur) cur = v;
  } else if (k == "enum" && cur.is_array() && v.is_array()) {
    json kept = json::array();
    for (const auto& x : cur)
      if (std::find(v.begin(), v.end(), x) != v.end()) kept.push_back(x);
    if (kept.empty()) contradict(pointer, "no 'enum' value is in every part");
    cur = kept;
  } else if (k == "const") {
    contradict(pointer, "the parts have different 'const' values");
  } else if (k == "items" && !cur.is_array() && !v.is_array()) {
    cur = json{{"allOf", json::array({cur, v})}};
  } else if (k == "additionalProperties" && (cur == json(true) || v == json(true))) {
    if (cur == json(true)) cur = v;
  } else {
    refuse(pointer, "cannot merge different values of '" + k + "'");
  }
}

}  // namespace

json merge_schemas(const std::vector<json>& parts, const std::string& pointer, const Resolver& resolve) {
  std::vector<json> flat;
  for (const auto& p : parts) flatten(p, pointer, resolve, 0, flat);
  // A part that restricts extra properties also constrains the properties other parts add: merging
  // their `properties` would drop that constraint, so it is allowed only when it adds nothing.
  for (const auto& p : flat) {
    if (!restricts_extras(p)) continue;
    for (const auto& q : flat) {
      if (!q.contains("properties") || !q["properties"].is_object()) continue;
      for (const auto& [name, sub] : q["properties"].items()) {
        (void)sub;
        if (!p.contains("properties") || !p["properties"].is_object() || !p["properties"].contains(name))
          refuse(pointer, "property '" + name + "' is added where another part restricts 'additionalProperties'");
      }
    }
  }
  // `items` (and additionalItems) cover the elements after the part's own prefix: parts with
  // different prefixes cannot share them.
  std::optional<json> prefix;
  for (const auto& p : flat) {
    if (!p.contains("items") && !p.contains("prefixItems") && !p.contains("additionalItems")) continue;
    json mine = p.contains("prefixItems") ? p["prefixItems"]
                : p.contains("items") && p["items"].is_array() ? p["items"]
                                                                : json();
    if (prefix && *prefix != mine) refuse(pointer, "cannot merge array parts with different prefixes ('prefixItems')");
    prefix = std::move(mine);
  }
  // nullable (OpenAPI) widens its own part's type only.
  for (const auto& p : flat)
    if (p.value("nullable", false))
      for (const auto& q : flat)
        if (q.value("nullable", false) != true && q.contains("type"))
          refuse(pointer, "'nullable' in only some of the parts is not supported");
  json r = json::object();
  for (const auto& p : flat)
    for (const auto& [k, v] : p.items()) merge_keyword(r, k, v, pointer);
  return r;
}

}  // namespace graft::engine::json_schema_detail
