// JSON Schema -> GBNF: a walk over the schema that turns each subschema into a rule. Every keyword
// is classified first (handled, annotation, refused), so an unknown or unimplemented constraint can
// never slip through as "no constraint". Output format decisions are in the public header.
#include "graft/engine/json_schema.h"

#include <cmath>
#include <map>
#include <set>

#include "engine/json_schema_gbnf.h"
#include "graft/core/error.h"

namespace graft::engine {

using namespace json_schema_detail;

namespace {

// Schemas nested deeper than this are refused (kLimit): the walk is recursive.
constexpr int kMaxDepth = 200;

// clang-format off
const std::set<std::string> kHandled = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "format", "anyOf", "oneOf", "allOf", "$ref", "nullable",
    "uniqueItems", "$id"};

const std::set<std::string> kRefused = {
    "pattern", "patternProperties", "propertyNames", "minProperties", "maxProperties", "dependencies",
    "dependentRequired", "dependentSchemas", "not", "if", "then", "else", "contains", "minContains",
    "maxContains", "unevaluatedItems", "unevaluatedProperties", "multipleOf", "$anchor", "$dynamicRef",
    "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor"};

// The keywords that apply to each instance type: a schema without `type` is limited to the types
// its keywords name.
const std::map<std::string, std::set<std::string>> kTypeKeywords = {
    {"string", {"minLength", "maxLength", "format"}},
    {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}},
    {"object", {"properties", "required", "additionalProperties"}},
    {"array", {"items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems"}},
};

const std::set<std::string> kTypes = {"string", "number", "integer", "boolean", "null", "object", "array"};
const std::set<std::string> kFormats = {"date", "time", "date-time", "uuid"};
// clang-format on

std::string grouped(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out;
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out;
}

bool is_rule_name(const std::string& e) {
  if (e.empty()) return false;
  for (char c : e)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  return true;
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) {}

  std::string run() {
    rules_.define("root", body(root_, "", "root"));
    return rules_.render();
  }

 private:
  template <typename... Parts>
  [[noreturn]] void bad(const std::string& ptr, const Parts&... parts) const {
    fail_as(ErrorKind::kBadRequest, "json_schema: ", pointer_text(ptr), ": ", parts...);
  }
  template <typename... Parts>
  [[noreturn]] void unsupported(const std::string& ptr, const Parts&... parts) const {
    fail_as(ErrorKind::kUnsupported, "json_schema: ", pointer_text(ptr), ": ", parts...);
  }

  // ---- keyword checks ----------------------------------------------------------------------------

  std::optional<int64_t> count(const json& s, const char* key, const std::string& ptr) const {
    if (!s.contains(key)) return std::nullopt;
    const json& v = s[key];
    const bool integral =
        v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (!integral || v.get<double>() < 0) bad(ptr, "'", key, "' must be a non-negative integer");
    if (v.get<double>() > static_cast<double>(kMaxRepeat))
      fail_as(ErrorKind::kLimit, "json_schema: ", pointer_text(ptr), ": '", key, "' above ", kMaxRepeat,
              " is not supported");
    return v.get<int64_t>();
  }

  // Every keyword is handled, an annotation, or refused; the values of handled ones are well-formed.
  void check_keywords(const json& s, const std::string& ptr) const {
    for (const auto& kv : s.items()) {
      const std::string& k = kv.key();  // not a structured binding: lambdas below capture it
      const json& v = kv.value();
      if (is_annotation(k)) continue;
      if (kRefused.count(k)) unsupported(ptr, "'", k, "' is not supported");
      if (!kHandled.count(k)) unsupported(ptr, "unknown keyword '", k, "'");
      auto need = [&](bool ok, const char* what) {
        if (!ok) bad(ptr, "'", k, "' must be ", what);
      };
      if (k == "$id") {
        if (!ptr.empty()) unsupported(ptr, "'$id' below the top level is not supported");
      } else if (k == "type") {
        need(v.is_string() || (v.is_array() && !v.empty()), "a type name or a non-empty array of them");
        for (const auto& t : v.is_array() ? v : json::array({v}))
          if (!t.is_string() || !kTypes.count(t.get<std::string>()))
            bad(ptr, "'type' ", t.dump(), " is not a JSON Schema type");
      } else if (k == "enum") {
        need(v.is_array() && !v.empty(), "a non-empty array");
      } else if (k == "properties") {
        need(v.is_object(), "an object");
      } else if (k == "required") {
        need(v.is_array(), "an array of strings");
        for (const auto& n : v) need(n.is_string(), "an array of strings");
      } else if (k == "additionalProperties" || k == "additionalItems") {
        need(v.is_object() || v.is_boolean(), "a schema");
      } else if (k == "items") {
        need(v.is_object() || v.is_boolean() || v.is_array(), "a schema or an array of schemas");
      } else if (k == "prefixItems") {
        need(v.is_array(), "an array of schemas");
      } else if (k == "anyOf" || k == "oneOf" || k == "allOf") {
        need(v.is_array() && !v.empty(), "a non-empty array of schemas");
      } else if (k == "minItems" || k == "maxItems" || k == "minLength" || k == "maxLength") {
        count(s, k.c_str(), ptr);
      } else if (k == "minimum" || k == "maximum") {
        need(v.is_number(), "a number");
      } else if (k == "exclusiveMinimum" || k == "exclusiveMaximum") {
        need(v.is_number() || v.is_boolean(), "a number");
        if (v.is_boolean() && v.get<bool>() && !s.contains(k == "exclusiveMinimum" ? "minimum" : "maximum"))
          bad(ptr, "'", k, "': true needs '", k == "exclusiveMinimum" ? "minimum" : "maximum", "'");
      } else if (k == "format") {
        need(v.is_string(), "a string");
        if (!kFormats.count(v.get<std::string>()))
          unsupported(ptr, "'format' '", v.get<std::string>(), "' is not supported (only date, time, date-time, uuid)");
      } else if (k == "nullable" || k == "uniqueItems") {
        need(v.is_boolean(), "a boolean");
        if (k == "uniqueItems" && v.get<bool>()) unsupported(ptr, "'uniqueItems': true is not supported");
      } else if (k == "$ref") {
        need(v.is_string(), "a string");
      }
    }
  }

  // True when a keyword other than annotations and `except` constrains the document.
  static bool constrains(const json& s, const std::set<std::string>& except) {
    for (const auto& [k, v] : s.items())
      if (!is_annotation(k) && k != "$id" && !except.count(k)) return true;
    return false;
  }

  // ---- $ref ----------------------------------------------------------------------------------------

  json resolve(const std::string& ref, const std::string& ptr) const {
    if (ref.empty() || ref[0] != '#')
      unsupported(ptr, "'$ref' '", ref, "': only local references (\"#...\") are supported");
    if (ref.size() > 1 && ref[1] != '/')
      unsupported(ptr, "'$ref' '", ref, "': anchors are not supported, only JSON pointers");
    try {
      const json::json_pointer p(ref.substr(1));
      if (!root_.contains(p)) bad(ptr, "'$ref' '", ref, "' does not resolve");
      return root_.at(p);
    } catch (const json::exception&) {
      bad(ptr, "'$ref' '", ref, "' is not a valid JSON pointer");
    }
  }

  // The rule of a referenced schema: one rule per target, defined on first use, so recursion through
  // $ref becomes recursion between rules. A cycle that returns to a reference before any bracket is
  // left recursion (the schema would never produce a character) and is refused.
  std::string ref_rule(const std::string& ref, const std::string& ptr) {
    if (auto it = refs_.find(ref); it != refs_.end()) {
      if (unguarded_.count(ref)) bad(ptr, "'$ref' '", ref, "' recurses without an enclosing object or array");
      return it->second;
    }
    const json target = resolve(ref, ptr);
    const size_t slash = ref.rfind('/');
    const std::string hint = ref == "#" ? "schema" : ref.substr(slash + 1);
    const std::string name = rules_.reserve(hint);
    refs_[ref] = name;
    unguarded_.insert(ref);
    rules_.define(name, body(target, ref.substr(1), name));
    unguarded_.erase(ref);
    return name;
  }

  // ---- the walk ------------------------------------------------------------------------------------

  // A single symbol for the subschema: its expression if that already is one, else a rule.
  std::string symbol(const json& s, const std::string& ptr, const std::string& hint) {
    std::string e = body(s, ptr, hint);
    return is_rule_name(e) ? e : rules_.add(hint, std::move(e));
  }

  static std::string child_hint(const std::string& hint, const std::string& part) {
    return hint == "root" ? part : hint + "-" + part;
  }

  std::string body(const json& s, const std::string& ptr, const std::string& hint) {
    if (++depth_ > kMaxDepth)  // also where a recursive $ref with constraining siblings is expanded
      fail_as(ErrorKind::kLimit, "json_schema: ", pointer_text(ptr), ": nested more than ", kMaxDepth,
              " levels deep (a recursive '$ref' with sibling keywords is expanded, not referenced)");
    std::string out = body_inner(s, ptr, hint);
    --depth_;
    return out;
  }

  std::string body_inner(const json& s, const std::string& ptr, const std::string& hint) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) bad(ptr, "the schema false accepts no document");
      return rules_.builtin("value");
    }
    if (!s.is_object()) bad(ptr, "a schema must be an object or a boolean");
    check_keywords(s, ptr);
    auto resolver = [this](const std::string& ref, const std::string& at) { return resolve(ref, at); };

    if (s.contains("$ref")) {
      if (!constrains(s, {"$ref"})) return ref_rule(s["$ref"].get<std::string>(), ptr);
      return body(merge_schemas({s}, ptr, resolver), ptr, hint);
    }
    if (s.contains("allOf")) return body(merge_schemas({s}, ptr, resolver), ptr, hint);
    if (s.contains("anyOf") && s.contains("oneOf")) unsupported(ptr, "'anyOf' together with 'oneOf' is not supported");
    if (s.contains("anyOf") || s.contains("oneOf")) return any_of(s, ptr, hint);
    if (s.contains("enum") || s.contains("const")) return literals(s, ptr);

    std::vector<std::string> types;
    if (s.contains("type")) {
      for (const auto& t : s["type"].is_array() ? s["type"] : json::array({s["type"]}))
        types.push_back(t.get<std::string>());
    } else {
      for (const auto& [type, keys] : kTypeKeywords)
        for (const auto& k : keys)
          if (s.contains(k)) {
            types.push_back(type);
            break;
          }
      if (types.empty()) return rules_.builtin("value");
    }
    const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
    std::vector<std::string> alts;
    std::set<std::string> seen;
    for (const auto& t : types) {
      if (!seen.insert(t).second || (t == "integer" && has_number)) continue;  // integers are numbers
      alts.push_back(typed(t, s, ptr, types.size() == 1 ? hint : child_hint(hint, t)));
    }
    if (s.value("nullable", false) && !seen.count("null")) alts.push_back(rules_.builtin("null"));
    return grouped(alts);
  }

  std::string any_of(const json& s, const std::string& ptr, const std::string& hint) {
    const char* key = s.contains("anyOf") ? "anyOf" : "oneOf";
    json siblings = s;
    siblings.erase(key);
    const bool merge = constrains(siblings, {});
    auto resolver = [this](const std::string& ref, const std::string& at) { return resolve(ref, at); };
    std::vector<std::string> alts;
    std::set<std::string> seen;
    for (size_t i = 0; i < s[key].size(); ++i) {
      const std::string at = pointer_child(pointer_child(ptr, key), std::to_string(i));
      const json& branch = s[key][i];
      const std::string sym =
          merge ? symbol(merge_schemas({siblings, branch}, at, resolver), at, child_hint(hint, std::to_string(i)))
                : symbol(branch, at, child_hint(hint, std::to_string(i)));
      if (seen.insert(sym).second) alts.push_back(sym);
    }
    return grouped(alts);
  }

  // enum/const: the values themselves, less those the sibling keywords reject.
  std::string literals(const json& s, const std::string& ptr) {
    static const std::set<std::string> kWith = {
        "enum",      "const",   "type",    "nullable",         "minLength",
        "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (const auto& [k, v] : s.items())
      if (!is_annotation(k) && k != "$id" && !kWith.count(k))
        unsupported(ptr, "'", s.contains("enum") ? "enum" : "const", "' together with '", k, "' is not supported");
    json values = s.contains("enum") ? s["enum"] : json::array({s["const"]});
    std::vector<std::string> alts;
    std::set<std::string> seen;
    for (const auto& v : values) {
      if (s.contains("const") && v != s["const"]) continue;
      if (!fits(v, s)) continue;
      std::string text;
      try {
        text = v.dump();
      } catch (const json::exception&) {
        bad(ptr, "an 'enum'/'const' value is not valid UTF-8");
      }
      if (seen.insert(text).second) alts.push_back(gbnf_literal(text));
    }
    if (alts.empty()) bad(ptr, "no 'enum'/'const' value satisfies the other keywords");
    return grouped(alts);
  }

  // Whether a literal satisfies the keywords allowed beside enum/const.
  static bool fits(const json& v, const json& s) {
    if (s.contains("type")) {
      bool ok = false;
      for (const auto& t : s["type"].is_array() ? s["type"] : json::array({s["type"]})) {
        const std::string n = t.get<std::string>();
        ok = ok || (n == "null" && v.is_null()) || (n == "boolean" && v.is_boolean()) ||
             (n == "string" && v.is_string()) || (n == "object" && v.is_object()) || (n == "array" && v.is_array()) ||
             (n == "number" && v.is_number()) ||
             (n == "integer" && v.is_number() && std::floor(v.get<double>()) == v.get<double>());
      }
      if (!ok && !(v.is_null() && s.value("nullable", false))) return false;
    }
    if (v.is_string()) {
      const auto cps = utf8_code_points(v.get<std::string>());
      const auto n = static_cast<int64_t>(cps ? cps->size() : 0);
      if (s.contains("minLength") && n < s["minLength"].get<int64_t>()) return false;
      if (s.contains("maxLength") && n > s["maxLength"].get<int64_t>()) return false;
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      auto excl = [&](const char* k) { return s.contains(k) && s[k].is_boolean() && s[k].get<bool>(); };
      if (s.contains("minimum") &&
          (excl("exclusiveMinimum") ? x <= s["minimum"].get<double>() : x < s["minimum"].get<double>()))
        return false;
      if (s.contains("maximum") &&
          (excl("exclusiveMaximum") ? x >= s["maximum"].get<double>() : x > s["maximum"].get<double>()))
        return false;
      if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number() &&
          x <= s["exclusiveMinimum"].get<double>())
        return false;
      if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number() &&
          x >= s["exclusiveMaximum"].get<double>())
        return false;
    }
    return true;
  }

  std::string typed(const std::string& t, const json& s, const std::string& ptr, const std::string& hint) {
    if (t == "null" || t == "boolean") return rules_.builtin(t);
    if (t == "string") return string_type(s, ptr, hint);
    if (t == "integer") return integer_type(s, ptr, hint);
    if (t == "number") return number_type(s, ptr, hint);
    if (t == "object") return object_type(s, ptr, hint);
    return array_type(s, ptr, hint);
  }

  std::string string_type(const json& s, const std::string& ptr, const std::string& hint) {
    const auto lo = count(s, "minLength", ptr), hi = count(s, "maxLength", ptr);
    if (s.contains("format")) {
      if (lo || hi) unsupported(ptr, "'format' together with 'minLength'/'maxLength' is not supported");
      return rules_.add(hint, R"("\"" )" + rules_.builtin(s["format"].get<std::string>()) + R"( "\"")");
    }
    if (!lo && !hi) return rules_.builtin("string");
    if (lo && hi && *lo > *hi) bad(ptr, "'minLength' is greater than 'maxLength'");
    return rules_.add(hint,
                      R"("\"" )" + gbnf_repeat(rules_.builtin("char"), lo.value_or(0), hi.value_or(-1)) + R"( "\"")");
  }

  // An integer bound from minimum/maximum and their exclusive forms (numbers, or draft-04 booleans).
  // Bounds past ±kMaxIntBound are dropped: every integer the grammar writes is inside them anyway.
  std::string integer_type(const json& s, const std::string& ptr, const std::string& hint) {
    std::optional<double> lo, hi;
    auto excl = [&](const char* k) { return s.contains(k) && s[k].is_boolean() && s[k].get<bool>(); };
    auto tighten_lo = [&](double x) { lo = lo ? std::max(*lo, x) : x; };
    auto tighten_hi = [&](double x) { hi = hi ? std::min(*hi, x) : x; };
    if (s.contains("minimum")) {
      const double m = s["minimum"].get<double>();
      tighten_lo(excl("exclusiveMinimum") ? std::floor(m) + 1 : std::ceil(m));
    }
    if (s.contains("maximum")) {
      const double m = s["maximum"].get<double>();
      tighten_hi(excl("exclusiveMaximum") ? std::ceil(m) - 1 : std::floor(m));
    }
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number())
      tighten_lo(std::floor(s["exclusiveMinimum"].get<double>()) + 1);
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number())
      tighten_hi(std::ceil(s["exclusiveMaximum"].get<double>()) - 1);
    const auto limit = static_cast<double>(kMaxIntBound);
    if (lo && hi && *lo > *hi) bad(ptr, "no integer satisfies 'minimum'/'maximum'");
    if (lo && *lo > limit) unsupported(ptr, "integer bounds beyond ±(10^18-1) are not supported");
    if (hi && *hi < -limit) unsupported(ptr, "integer bounds beyond ±(10^18-1) are not supported");
    if (lo && *lo < -limit) lo.reset();
    if (hi && *hi > limit) hi.reset();
    if (!lo && !hi) return rules_.builtin("integer");
    return rules_.add(hint, integer_range(lo ? std::optional<int64_t>(static_cast<int64_t>(*lo)) : std::nullopt,
                                          hi ? std::optional<int64_t>(static_cast<int64_t>(*hi)) : std::nullopt));
  }

  // Bounds on non-integers would need decimal comparisons in the grammar; only the common "minimum":
  // 0 (a number without a minus sign) is implemented.
  std::string number_type(const json& s, const std::string& ptr, const std::string& hint) {
    const bool any = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                     s.contains("exclusiveMaximum");
    if (!any) return rules_.builtin("number");
    const bool non_negative = s.contains("minimum") && s["minimum"] == json(0) && !s.contains("maximum") &&
                              !s.contains("exclusiveMaximum") &&
                              (!s.contains("exclusiveMinimum") || s["exclusiveMinimum"] == json(false));
    if (!non_negative)
      unsupported(ptr,
                  "'minimum'/'maximum'/'exclusiveMinimum'/'exclusiveMaximum' on numbers are not supported "
                  "(only on integers, or \"minimum\": 0)");
    return rules_.add(hint, R"(( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)");
  }

  std::string object_type(const json& s, const std::string& ptr, const std::string& hint);
  std::string excluded_keys(const std::vector<std::string>& names, const std::string& hint);
  std::string array_type(const json& s, const std::string& ptr, const std::string& hint);

  // Inside an object or array: a reference seen again from here on is guarded by the bracket.
  struct Guard {
    explicit Guard(Converter& c) : c_(c), saved_(std::move(c.unguarded_)) { c_.unguarded_.clear(); }
    ~Guard() { c_.unguarded_ = std::move(saved_); }
    Converter& c_;
    std::set<std::string> saved_;
  };

  const json& root_;
  RuleSet rules_;
  std::map<std::string, std::string> refs_;  // $ref -> its rule
  std::set<std::string> unguarded_;          // refs being defined, entered since the last bracket
  int depth_ = 0;
};

// Properties in schema order, each optional one skippable: F(i) is a non-empty run of properties
// from i on (F(i) ::= kv_i T(i+1) | F(i+1) when i is optional), T(i) the rest of a run after its
// first property (each later property with its comma, optional ones in ( )?), extra properties last.
std::string Converter::object_type(const json& s, const std::string& ptr, const std::string& hint) {
  Guard guard(*this);
  struct Entry {
    std::string kv;
    bool required;
  };
  std::set<std::string> required;
  for (const auto& n : s.value("required", json::array())) required.insert(n.get<std::string>());
  const json props = s.value("properties", json::object());
  const json extra = s.value("additionalProperties", json(true));
  std::vector<std::string> names;  // every name an extra property may not take
  std::vector<Entry> entries;
  auto add_kv = [&](const std::string& name, const std::string& value, bool req) {
    entries.push_back(
        {rules_.add(child_hint(hint, name) + "-kv", gbnf_literal(json(name).dump()) + R"( ws ":" ws )" + value), req});
  };
  for (const auto& [name, sub] : props.items()) {
    names.push_back(name);
    const std::string at = pointer_child(pointer_child(ptr, "properties"), name);
    if (sub == json(false)) {  // may not appear
      if (required.count(name)) bad(at, "required property '", name, "' has the schema false");
      continue;
    }
    add_kv(name, symbol(sub, at, child_hint(hint, name)), required.count(name) > 0);
  }
  const std::string extra_ptr = pointer_child(ptr, "additionalProperties");
  std::string extra_value;
  if (extra != json(false)) extra_value = symbol(extra, extra_ptr, child_hint(hint, "additional"));
  for (const auto& n : s.value("required", json::array())) {
    const std::string name = n.get<std::string>();
    if (props.contains(name) || std::find(names.begin(), names.end(), name) != names.end()) continue;
    if (extra == json(false))
      bad(ptr, "'required' names '", name, "', which 'properties' does not list and additionalProperties forbids");
    names.push_back(name);
    add_kv(name, extra_value, true);
  }
  std::string extra_kv;
  if (extra != json(false)) {
    const std::string key =
        names.empty() ? rules_.builtin("string") : excluded_keys(names, child_hint(hint, "additional"));
    extra_kv = rules_.add(child_hint(hint, "additional-kv"), key + R"( ws ":" ws )" + extra_value);
  }
  const std::string ws = rules_.builtin("ws");
  const std::string comma = R"("," )" + ws + " ";
  auto join = [](const std::string& x, const std::string& y) { return x.empty() || y.empty() ? x + y : x + " " + y; };
  auto item = [&](size_t j) {  // property j after an earlier one
    return entries[j].required ? comma + entries[j].kv : "( " + comma + entries[j].kv + " )?";
  };
  auto tail = [&](size_t from) {  // T(from), inline
    std::string t;
    for (size_t j = from; j < entries.size(); ++j) t = join(t, item(j));
    return extra_kv.empty() ? t : join(t, "( " + comma + extra_kv + " )*");
  };
  // F(i) is needed only up to the first required property r, which every run must reach. The tails
  // the F(i) share, T(1)..T(r), are rules (T(i) ::= property i with its comma, then T(i+1)), so the
  // grammar grows linearly with the number of optional properties.
  const size_t n = entries.size();
  size_t r = 0;
  while (r < n && !entries[r].required) ++r;
  std::vector<std::string> shared(n + 1);
  auto shared_tail = [&](size_t i) { return i <= r && i < n ? shared[i] : tail(i); };
  for (size_t i = std::min(r, n == 0 ? 0 : n - 1); i >= 1; --i)
    shared[i] = rules_.add(child_hint(hint, "rest-" + std::to_string(i)), join(item(i), shared_tail(i + 1)));
  std::optional<std::string> first;  // F(r), then F(r-1) ... F(0)
  if (r < n)
    first = join(entries[r].kv, tail(r + 1));
  else if (!extra_kv.empty())
    first = join(extra_kv, tail(n));
  for (size_t i = r; i-- > 0;) {
    const std::string run = join(entries[i].kv, shared_tail(i + 1));
    first = first ? rules_.add(child_hint(hint, "props-" + std::to_string(i)), run + " | " + *first) : run;
  }
  const bool any_required = r < entries.size();
  const std::string open = R"("{" )" + ws;
  if (!first) return open + R"( "}")";
  if (any_required) return open + " " + *first + " " + ws + R"( "}")";
  return open + " ( " + *first + " " + ws + R"( )? "}")";
}

// A JSON string other than the given names: a trie over their plain spellings (nlohmann's escapes),
// where at each node the key may end (unless a name ends there), follow a name's next character, or
// leave every name with a plain character no name has next, after which anything goes. Inside a
// name's escape only that escape may follow, so no other spelling of a name gets through.
std::string Converter::excluded_keys(const std::vector<std::string>& names, const std::string& hint) {
  struct Node {
    std::map<uint32_t, size_t> next;
    bool terminal = false;
    bool in_escape = false;
  };
  std::vector<Node> trie(1);
  for (const auto& name : names) {
    const std::string quoted = json(name).dump();
    const auto cps = utf8_code_points(quoted.substr(1, quoted.size() - 2));
    if (!cps) fail_as(ErrorKind::kBadRequest, "json_schema: property name is not valid UTF-8");
    // mid[j]: an escape is still open after cps[j] (after the backslash of \n, or of \u00 in \u001f).
    std::vector<bool> mid(cps->size(), false);
    for (size_t j = 0; j < cps->size(); ++j) {
      if ((*cps)[j] != '\\') continue;
      const size_t len = j + 1 < cps->size() && (*cps)[j + 1] == 'u' ? 6 : 2;
      for (size_t q = j; q < j + len - 1 && q < cps->size(); ++q) mid[q] = true;
      j += len - 1;
    }
    size_t at = 0;
    for (size_t j = 0; j < cps->size(); ++j) {
      auto [it, added] = trie[at].next.emplace((*cps)[j], trie.size());
      const size_t child = it->second;
      if (added) trie.emplace_back();
      at = child;
      trie[at].in_escape = mid[j];
    }
    trie[at].terminal = true;
  }
  const std::string ch = rules_.builtin("char");
  // Node rules depend on their children's names: made from the last node back (children come later).
  std::vector<std::string> rule(trie.size());
  for (size_t k = trie.size(); k-- > 0;) {
    const Node& n = trie[k];
    std::vector<std::string> alts;
    if (!n.in_escape && !n.terminal) alts.push_back(R"("\"")");
    std::string plain = R"([^"\\\x7F\x00-\x1F)";
    for (const auto& [c, child] : n.next) {
      alts.push_back(gbnf_literal(utf8_encode(c)) + " " + rule[child]);
      plain += gbnf_class_char(c);
    }
    if (!n.in_escape) alts.push_back(plain + "] " + ch + R"(* "\"")");
    rule[k] = rules_.add(hint + "-key", grouped(alts));
  }
  return rules_.add(hint + "-key", R"("\"" )" + rule[0]);
}

// Items: the prefix items in order, then any number of `items`, the count within minItems..maxItems.
// S(k) is what may follow once k items are written.
std::string Converter::array_type(const json& s, const std::string& ptr, const std::string& hint) {
  Guard guard(*this);
  json prefix = json::array();
  json rest = s.value("items", json(true));
  std::string rest_ptr = pointer_child(ptr, "items");
  std::string prefix_key = "prefixItems";
  if (s.contains("prefixItems")) {
    if (rest.is_array()) bad(ptr, "'items' must be a schema when 'prefixItems' is present");
    prefix = s["prefixItems"];
  } else if (rest.is_array()) {  // draft 4-2019 tuple form
    prefix = rest;
    prefix_key = "items";
    rest = s.value("additionalItems", json(true));
    rest_ptr = pointer_child(ptr, "additionalItems");
  }
  if (s.contains("additionalItems") && prefix_key != "items" && s["additionalItems"] != json(true))
    unsupported(ptr, "'additionalItems' applies only with an array 'items'; use 'items' with 'prefixItems'");
  const int64_t lo = count(s, "minItems", ptr).value_or(0);
  int64_t hi = count(s, "maxItems", ptr).value_or(-1);
  std::vector<std::string> pre;
  for (size_t k = 0; k < prefix.size() && (hi < 0 || static_cast<int64_t>(k) < hi); ++k) {
    if (prefix[k] == json(false)) {  // no item may stand here: the array ends before it
      hi = hi < 0 ? static_cast<int64_t>(k) : std::min<int64_t>(hi, k);
      break;
    }
    pre.push_back(symbol(prefix[k], pointer_child(pointer_child(ptr, prefix_key), std::to_string(k)),
                         child_hint(hint, std::to_string(k))));
  }
  const auto p = static_cast<int64_t>(pre.size());
  std::string item;
  if (rest != json(false) && (hi < 0 || hi > p))
    item = symbol(rest, rest_ptr, child_hint(hint, "item"));
  else if (hi < 0 || hi > p)
    hi = p;
  if (hi >= 0 && lo > hi) bad(ptr, "'minItems' exceeds the number of items the array may have");
  const std::string ws = rules_.builtin("ws");
  const std::string comma = R"("," )" + ws + " ";
  std::string list;  // a non-empty run of items
  if (hi != 0) {
    if (p == 0) {
      list = item;
      const std::string more =
          gbnf_repeat("( " + comma + item + " )", std::max<int64_t>(lo, 1) - 1, hi < 0 ? -1 : hi - 1);
      if (!more.empty()) list += " " + more;
    } else {
      std::string after;  // S(k) for k = min(p, hi) down to 1
      if (hi < 0 || hi > p)
        after = gbnf_repeat("( " + comma + item + " )", std::max<int64_t>(lo - p, 0), hi < 0 ? -1 : hi - p);
      for (int64_t k = std::min<int64_t>(p, hi < 0 ? p : hi) - 1; k >= 1; --k) {
        std::string part = comma + pre[k] + (after.empty() ? "" : " " + after);
        after = k < lo ? part : "( " + part + " )?";
      }
      list = pre[0] + (after.empty() ? "" : " " + after);
    }
  }
  const std::string open = R"("[" )" + ws;
  if (list.empty()) return open + R"( "]")";
  if (lo > 0) return open + " " + list + " " + ws + R"( "]")";
  return open + " ( " + list + " " + ws + R"( )? "]")";
}

}  // namespace

std::string json_schema_to_gbnf(const nlohmann::ordered_json& schema) { return Converter(schema).run(); }

std::string json_object_gbnf() {
  RuleSet rules;
  rules.define("root", rules.builtin("object"));
  return rules.render();
}

}  // namespace graft::engine
