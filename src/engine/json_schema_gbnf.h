// Private to json_schema*.cpp: the GBNF side of the JSON Schema converter (escaping, rule bookkeeping,
// the fixed JSON rules, integer ranges) and the allOf merge. The schema walk is in json_schema.cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace graft::engine::json_schema_detail {

using json = nlohmann::ordered_json;

// Bounds above this (minLength, maxItems, ...) are refused (kLimit): the grammar parser expands a
// repetition into that many elements and refuses {m,n} past 10000 (kGrammarMaxRepeat).
inline constexpr int64_t kMaxRepeat = 10000;
// A schema whose grammar would be longer is refused (kLimit): the grammar parser's own limit
// (kGrammarMaxBytes), and it keeps a request from making the server build an enormous grammar
// (optional properties and anyOf branches multiply).
inline constexpr size_t kMaxGrammarBytes = 100000;
// Integer bounds are exact within ±kMaxIntBound; a one-sided range is capped at kIntDigits digits
// (or the bound's own digit count when larger), like the plain integer rule.
inline constexpr int64_t kMaxIntBound = 999999999999999999;  // 10^18 - 1
inline constexpr int kIntDigits = 16;

// "/properties/age" style JSON pointer text; "(root)" for the empty pointer in messages.
std::string pointer_child(const std::string& parent, const std::string& token);
std::string pointer_text(const std::string& pointer);

// The UTF-8 string's code points; invalid UTF-8 yields std::nullopt.
std::optional<std::vector<uint32_t>> utf8_code_points(std::string_view s);
std::string utf8_encode(uint32_t cp);

// A GBNF string literal matching exactly these bytes (which must be valid UTF-8): "..." with '"', '\'
// and control characters escaped, other characters as themselves.
std::string gbnf_literal(std::string_view utf8);
// One code point as it may appear inside a GBNF character class [...].
std::string gbnf_class_char(uint32_t cp);

// x{lo,hi} in GBNF, hi < 0 meaning unbounded; "" when hi == 0. `atom` must be a single symbol or a
// parenthesised group.
std::string gbnf_repeat(const std::string& atom, int64_t lo, int64_t hi);

// An expression matching exactly the decimal integers in [lo, hi] (no "-0", no leading zeros); an
// absent bound is open (the magnitude then capped at kIntDigits digits). Bounds within ±kMaxIntBound.
std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);

// The rules of one grammar: names are unique and deterministic, identical bodies share one rule, and
// the fixed JSON rules (ws, string, number, value, ...) are added on first use.
class RuleSet {
 public:
  RuleSet();
  // A fresh name from a hint (lowercased, other characters to '-'); "-2", "-3"... on collision.
  std::string reserve(std::string_view hint);
  // Sets the body of a reserved name.
  void define(const std::string& name, std::string body);
  // A rule with this body: an existing one with the same body, or a new one named from the hint.
  std::string add(std::string_view hint, std::string body);
  // One of the fixed rules ("ws", "string", "char", "number", "integer", "boolean", "null",
  // "value", "object", "array", "date", "time", "date-time", "uuid"), added with its dependencies.
  std::string builtin(const std::string& name);
  // Every rule, "root" first, then the others in the order they were reserved.
  std::string render() const;

 private:
  std::map<std::string, std::string> bodies_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> by_body_;
  size_t bytes_ = 0;
};

// allOf: one schema equal to the conjunction of `parts`, where that is trivial; each part's top-level
// $ref is resolved through `resolve` (which returns the target schema) first. Throws kUnsupported
// naming `pointer` and the keyword that cannot be merged, kBadRequest where the parts contradict
// (types that do not intersect, different consts).
json merge_schemas(const std::vector<json>& parts, const std::string& pointer,
                   const std::function<json(const std::string& ref, const std::string& pointer)>& resolve);

// Keywords that never constrain a document.
bool is_annotation(const std::string& keyword);

}  // namespace graft::engine::json_schema_detail
