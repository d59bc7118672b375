// JSON Schema -> GBNF: the generated grammars compiled by parse_grammar and run by GrammarMatcher
// over hand-written documents. Valid documents must be complete sentences both compact and
// pretty-printed (nlohmann's dump() and dump(2)); invalid ones must be refused or left incomplete.
// Then the refusals: a malformed schema is kBadRequest naming the JSON pointer, an unimplemented
// keyword kUnsupported naming the keyword.
#include "graft/engine/json_schema.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdio>
#include <set>
#include <sstream>

#include "engine/json_schema_gbnf.h"
#include "graft/core/error.h"
#include "graft/engine/grammar.h"

namespace graft::engine {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> compile(const json& schema) { return parse_grammar(json_schema_to_gbnf(schema)); }

// The whole text is a sentence of the grammar.
bool complete(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  if (!m.accepts(text)) return false;
  m.accept(text);
  return m.can_end();
}

// Each document (JSON text) is accepted compact and indented; each text in `invalid` is not.
void check(const json& schema, const std::vector<std::string>& valid, const std::vector<std::string>& invalid) {
  SCOPED_TRACE(schema.dump());
  std::shared_ptr<const Grammar> g;
  ASSERT_NO_THROW(g = compile(schema)) << json_schema_to_gbnf(schema);
  for (const auto& doc : valid) {
    const json v = json::parse(doc);
    EXPECT_TRUE(complete(g, v.dump())) << "compact: " << v.dump() << "\n" << json_schema_to_gbnf(schema);
    EXPECT_TRUE(complete(g, v.dump(2))) << "indented: " << v.dump(2) << "\n" << json_schema_to_gbnf(schema);
  }
  for (const auto& text : invalid)
    EXPECT_FALSE(complete(g, text)) << "accepted: " << text << "\n" << json_schema_to_gbnf(schema);
}

// The error a schema is refused with.
Error refusal(const json& schema) {
  try {
    json_schema_to_gbnf(schema);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "not refused: " << schema.dump();
  return Error("", ErrorKind::kInternal);
}

void expect_refused(const json& schema, ErrorKind kind, const std::string& message) {
  const Error e = refusal(schema);
  EXPECT_EQ(error_kind_name(e.kind()), std::string(error_kind_name(kind))) << e.what();
  EXPECT_EQ(std::string(e.what()), message);
}

// ---- grammar text ----------------------------------------------------------------------------------

TEST(JsonSchemaText, SimpleObjectGrammarIsCompactAndReadable) {
  const json schema = json::parse(R"({"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"],
                                      "additionalProperties":false})");
  EXPECT_EQ(json_schema_to_gbnf(schema),
            "root ::= \"{\" ws ok-kv ws \"}\"\n"
            "boolean ::= \"true\" | \"false\"\n"
            "ok-kv ::= \"\\\"ok\\\"\" ws \":\" ws boolean\n"
            "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n");
}

TEST(JsonSchemaText, RuleNamesAreValidUniqueAndDeterministic) {
  const json schema = json::parse(R"({"type":"object","properties":{
      "Root":{"type":"string"},"ws":{"type":"integer","minimum":1},"a b":{"type":"integer","minimum":2},
      "a-b":{"type":"integer","minimum":3},"名前":{"type":"integer","minimum":4},"string":{"enum":["x"]}},
      "required":["Root"]})");
  const std::string g = json_schema_to_gbnf(schema);
  EXPECT_EQ(g, json_schema_to_gbnf(schema));
  std::set<std::string> names;
  std::istringstream lines(g);
  for (std::string line; std::getline(lines, line);) {
    const size_t end = line.find(" ::= ");
    ASSERT_NE(end, std::string::npos) << line;
    const std::string name = line.substr(0, end);
    EXPECT_FALSE(name.empty()) << line;
    for (char c : name) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '-') << line;
    EXPECT_TRUE(names.insert(name).second) << "defined twice: " << name;
  }
  EXPECT_TRUE(names.count("root"));
  EXPECT_NO_THROW(parse_grammar(g));
}

TEST(JsonSchemaText, GrammarLimitsMatchTheParser) {
  EXPECT_EQ(json_schema_detail::kMaxGrammarBytes, kGrammarMaxBytes);
  EXPECT_EQ(json_schema_detail::kMaxRepeat, static_cast<int64_t>(kGrammarMaxRepeat));
}

// ---- schemas against documents -------------------------------------------------------------------------

TEST(JsonSchemaMatch, ScalarTypes) {
  check(json::parse(R"({"type":"string"})"), {R"("")", R"("abc")", R"("tab\there \"q\" \\ \u00e9 \/")"},
        {"abc", R"("a)", "\"a\nb\"", "\"\x01\"", R"("\x")", R"("\u12")", "1", "null"});
  check(json::parse(R"({"type":"integer"})"), {"0", "-7", "123456", "9007199254740991"},
        {"01", "1.5", "1e3", "-", "+1", "\"1\"", "--1", "12345678901234567"});
  check(json::parse(R"({"type":"number"})"), {"0", "-0.5", "3.25", "1e10", "-2.5E-3", "100"},
        {".5", "1.", "1e", "01", "+1", "NaN", "Infinity", "\"1\""});
  check(json::parse(R"({"type":"boolean"})"), {"true", "false"}, {"1", "True", "null", "\"true\""});
  check(json::parse(R"({"type":"null"})"), {"null"}, {"0", "\"null\"", "Null"});
  // Exponents of at most two digits: every number is a finite double.
  const auto numbers = compile(json::parse(R"({"type":"number"})"));
  EXPECT_TRUE(complete(numbers, "1.5e+99"));
  EXPECT_TRUE(complete(numbers, "-1E-07"));
  EXPECT_FALSE(complete(numbers, "1e400"));
}

TEST(JsonSchemaMatch, ObjectWithRequiredOptionalAndNoExtras) {
  check(json::parse(R"({"type":"object","properties":{
          "name":{"type":"string","minLength":1,"maxLength":10},
          "age":{"type":"integer","minimum":0,"maximum":150},
          "tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":3},
          "nick":{"type":["string","null"]}},
        "required":["name","age"],"additionalProperties":false})"),
        {R"({"name":"Bob","age":42})", R"({"name":"Bob","age":150,"tags":["a"],"nick":null})",
         R"({"name":"0123456789","age":0,"nick":"x"})", R"({"name":"B","age":7,"tags":["a","b","c"]})"},
        {R"({"name":"Bob"})",                                  // missing required
         R"({"age":1})",                                       // missing required
         R"({"name":"Bob","age":1,"x":1})",                    // extra property
         R"({"name":"Bob","age":"1"})",                        // wrong type
         R"({"name":"Bob","age":151})",                        // above maximum
         R"({"name":"Bob","age":-1})",                         // below minimum
         R"({"name":"","age":1})",                             // string too short
         R"({"name":"01234567890","age":1})",                  // string too long
         R"({"name":"Bob","age":1,"tags":[]})",                // too few items
         R"({"name":"Bob","age":1,"tags":["a","b","c","d"]})", // too many items
         R"({"age":1,"name":"Bob"})",                          // out of schema order
         R"({"name":"Bob","age":1,"nick":1})", R"([])", "{\"name\":\"Bob\",\"age\":1}x"});
}

TEST(JsonSchemaMatch, AllOptionalPropertiesInAnyChosenSubset) {
  check(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
                        "c":{"type":"integer"}},"additionalProperties":false})"),
        {"{}", R"({"a":1})", R"({"b":2})", R"({"c":3})", R"({"a":1,"c":3})", R"({"b":2,"c":3})",
         R"({"a":1,"b":2,"c":3})"},
        {R"({,"a":1})", R"({"a":1,})", R"({"b":1,"a":2})", R"({"a":1,"a":1})", R"({"d":1})"});
}

TEST(JsonSchemaMatch, ExtraPropertiesNeverReuseListedNames) {
  // additionalProperties absent: extras of any value after the listed properties, but never under a
  // listed name (which would let "a" carry a string, or duplicate "ab").
  check(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"ab":{"type":"boolean"},
                        "q\"x":{"type":"null"}},"required":["ab"]})"),
        {R"({"ab":true})", R"({"a":1,"ab":false,"x":[1,{"y":null}]})", R"({"ab":true,"abc":"s","":0,"b":1})",
         R"({"ab":true,"q\"x":null,"q":1,"q\"":2,"q\"xy":3})"},
        {R"({"ab":true,"a":"s"})", R"({"ab":true,"ab":1})", R"({"ab":true,"q\"x":1})", R"({"ab":true,"\u0061":"s"})",
         R"({"ab":true,"q\u0022x":1})", R"({"a":1})"});
}

TEST(JsonSchemaMatch, AdditionalPropertiesSchemaAndRequiredExtras) {
  check(json::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})"),
        {"{}", R"({"x":1})", R"({"x":1,"y":-2,"日本":3})"}, {R"({"x":"1"})", R"({"x":1.5})", R"({1:1})"});
  // A required name that `properties` does not list takes the additionalProperties schema.
  check(json::parse(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id","kind"],
                        "additionalProperties":{"type":"string"}})"),
        {R"({"id":1,"kind":"k"})", R"({"id":1,"kind":"k","more":"m"})"},
        {R"({"id":1})", R"({"id":1,"kind":2})", R"({"id":1,"kind":"k","more":3})",
         R"({"id":1,"kind":"k","kind":"j"})"});
}

TEST(JsonSchemaMatch, NestedObjectsAndArrays) {
  check(json::parse(R"({"type":"object","properties":{
          "user":{"type":"object","properties":{"id":{"type":"integer"},
                  "address":{"type":"object","properties":{"city":{"type":"string"},
                                                            "zip":{"type":"string","maxLength":5}},
                             "required":["city"],"additionalProperties":false}},
                  "required":["id","address"],"additionalProperties":false},
          "orders":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},
                    "qty":{"type":"integer","minimum":1}},"required":["sku","qty"],"additionalProperties":false}}},
        "required":["user","orders"],"additionalProperties":false})"),
        {R"({"user":{"id":1,"address":{"city":"Oslo"}},"orders":[]})",
         R"({"user":{"id":1,"address":{"city":"Oslo","zip":"0150"}},
             "orders":[{"sku":"a","qty":1},{"sku":"b","qty":20}]})"},
        {R"({"user":{"id":1,"address":{}},"orders":[]})",
         R"({"user":{"id":1,"address":{"city":"Oslo","zip":"123456"}},"orders":[]})",
         R"({"user":{"id":1,"address":{"city":"Oslo"}},"orders":[{"sku":"a","qty":0}]})",
         R"({"user":{"id":1,"address":{"city":"Oslo"}},"orders":[{"sku":"a"}]})",
         R"({"user":{"id":1,"address":{"city":"Oslo"}},"orders":{}})"});
}

TEST(JsonSchemaMatch, RecursionThroughRef) {
  check(json::parse(R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
                          "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
                          "required":["value"],"additionalProperties":false}},
                        "$ref":"#/$defs/node"})"),
        {R"({"value":1})", R"({"value":1,"children":[]})",
         R"({"value":1,"children":[{"value":2},{"value":3,"children":[{"value":4,"children":[]}]}]})"},
        {R"({"value":1,"children":[{}]})", R"({"value":1,"children":[{"value":"x"}]})", R"({"children":[]})"});
  // draft-07 "definitions", a linked list, and "#" (the whole schema) as the target.
  check(json::parse(R"({"definitions":{"list":{"type":["object","null"],"properties":{"head":{"type":"string"},
                          "tail":{"$ref":"#/definitions/list"}},"required":["head","tail"],
                          "additionalProperties":false}},
                        "$ref":"#/definitions/list"})"),
        {"null", R"({"head":"a","tail":null})", R"({"head":"a","tail":{"head":"b","tail":null}})"},
        {R"({"head":"a"})", R"({"head":"a","tail":{"head":1,"tail":null}})"});
  check(json::parse(R"({"type":"array","items":{"anyOf":[{"type":"integer"},{"$ref":"#"}]}})"),
        {"[]", "[1,[2,[]],[[3]]]"}, {"[1,[\"x\"]]", "1"});
}

TEST(JsonSchemaMatch, EnumsOfMixedTypesAndConst) {
  check(json::parse(R"({"enum":["red",1,2.5,null,true,{"a":[1,"b"]},[],"é☃"]})"),
        {R"("red")", "1", "2.5", "null", "true", R"("é☃")"},
        {R"("blue")", R"("Red")", "2", "false", R"({"a":[1]})", R"([1])", R"("e")"});
  // Object and array values are written compactly, exactly as serialised.
  const auto g = compile(json::parse(R"({"enum":[{"a":[1,"b"]},[]]})"));
  EXPECT_TRUE(complete(g, R"({"a":[1,"b"]})"));
  EXPECT_TRUE(complete(g, "[]"));
  EXPECT_FALSE(complete(g, R"({"a": [1, "b"]})"));
  check(json::parse(R"({"const":"fixed"})"), {R"("fixed")"}, {R"("other")", "null"});
  // The type filters the values; both keywords must hold.
  check(json::parse(R"({"type":"string","enum":["a",1,"bb"],"maxLength":1})"), {R"("a")"}, {"1", R"("bb")"});
  check(json::parse(R"({"type":"object","properties":{"color":{"enum":["red","green"]},"n":{"const":3}},
                        "required":["color","n"],"additionalProperties":false})"),
        {R"({"color":"green","n":3})"}, {R"({"color":"blue","n":3})", R"({"color":"red","n":4})"});
}

TEST(JsonSchemaMatch, AnyOfAndOneOf) {
  check(json::parse(R"({"anyOf":[{"type":"string","maxLength":2},{"type":"integer","minimum":10},
                                 {"type":"object","properties":{"k":{"type":"boolean"}},"required":["k"],
                                  "additionalProperties":false}]})"),
        {R"("ab")", "10", "99999", R"({"k":true})"}, {R"("abc")", "9", R"({})", "null"});
  check(json::parse(R"({"oneOf":[{"type":"null"},{"type":"array","items":{"type":"number"},"maxItems":2}]})"),
        {"null", "[]", "[1.5,-2]"}, {"[1,2,3]", "[\"x\"]", "0"});
  // Siblings apply to every branch.
  check(json::parse(R"({"type":"object","properties":{"kind":{"type":"string"}},"required":["kind"],
                        "additionalProperties":false,
                        "anyOf":[{"properties":{"kind":{"const":"a"}}},{"properties":{"kind":{"const":"b"}}}]})"),
        {R"({"kind":"a"})", R"({"kind":"b"})"}, {R"({"kind":"c"})", R"({})"});
}

TEST(JsonSchemaMatch, AllOfMergesTrivially) {
  check(json::parse(R"({"$defs":{"base":{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]}},
                        "allOf":[{"$ref":"#/$defs/base"},
                                 {"properties":{"id":{"minimum":1},"name":{"type":"string"}},"required":["name"]}]})"),
        {R"({"id":1,"name":"n"})", R"({"id":5,"name":"n","extra":null})"},
        {R"({"id":0,"name":"n"})", R"({"id":1})", R"({"name":"n"})"});
  // $ref with constraining siblings is the conjunction too.
  check(json::parse(R"({"$defs":{"s":{"type":"string"}},"$ref":"#/$defs/s","maxLength":3,"description":"d"})"),
        {R"("abc")"}, {R"("abcd")", "1"});
  check(json::parse(R"({"allOf":[{"type":["integer","string"]},{"type":["number","null"]},{"maximum":5}]})"),
        {"5", "-3"}, {"6", "1.5", "null", R"("s")"});
}

TEST(JsonSchemaMatch, TuplesAndItemCounts) {
  check(json::parse(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})"),
        {"[]", R"(["a"])", R"(["a",1])"}, {R"([1])", R"(["a","b"])", R"(["a",1,2])"});
  check(json::parse(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],
                        "items":{"type":"boolean"},"minItems":3})"),
        {R"(["a",1,true])", R"(["a",1,true,false,true])"}, {R"(["a",1])", R"(["a"])", R"(["a",1,2])", "[]"});
  check(json::parse(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"},{"type":"null"}],
                        "minItems":2,"maxItems":4})"),
        {R"(["a",1])", R"(["a",1,null])", R"(["a",1,null,{"any":[]}])"},
        {R"(["a"])", R"(["a",1,null,2,3])", R"(["a",1,2])"});
  // draft-07 tuple form.
  check(json::parse(R"({"type":"array","items":[{"type":"null"}],"additionalItems":{"type":"integer"},"maxItems":3})"),
        {"[]", "[null]", "[null,1,2]"}, {"[1]", "[null,1,2,3]", "[null,null]"});
  check(json::parse(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2,"uniqueItems":false})"),
        {"[1,2]", "[3,3]"}, {"[1]", "[1,2,3]"});
}

TEST(JsonSchemaMatch, StringFormats) {
  check(json::parse(R"({"type":"string","format":"date"})"),
        {R"("2024-02-29")", R"("2000-02-29")", R"("1996-02-29")", R"("1999-12-31")", R"("2023-04-30")",
         R"("2023-02-28")", R"("0400-02-29")", R"("0001-01-01")"},
        {R"("2024-13-01")", R"("2024-00-10")", R"("2024-01-32")", R"("24-01-01")", R"("2024-1-1")",
         R"("2023-02-29")", R"("1900-02-29")", R"("2100-02-29")", R"("2024-02-30")", R"("2023-04-31")",
         R"("2023-11-31")", R"("0000-01-01")", R"("0000-02-29")"});
  // Leap years, exhaustively over 2500 years.
  const auto dates = compile(json::parse(R"({"type":"string","format":"date"})"));
  for (int y = 1; y < 2500; ++y) {
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    char year[8];
    std::snprintf(year, sizeof year, "%04d", y);
    EXPECT_EQ(complete(dates, std::string("\"") + year + "-02-29\""), leap) << y;
  }
  check(json::parse(R"({"type":"string","format":"time"})"), {R"("23:59:59Z")", R"("08:30:00.123+05:30")"},
        {R"("24:00:00Z")", R"("12:00:00")", R"("12:60:00Z")", R"("12:00Z")", R"("23:59:60Z")"});
  check(json::parse(R"({"type":"string","format":"date-time"})"),
        {R"("2024-05-01T12:34:56Z")", R"("2024-05-01T12:34:56.5-08:00")"},
        {R"("2024-05-01 12:34:56Z")", R"("2024-05-01")", R"("2024-05-01T12:34:56")"});
  check(json::parse(R"({"type":"string","format":"uuid"})"),
        {R"("123e4567-e89b-12d3-a456-426614174000")", R"("ABCDEF01-2345-6789-abcd-ef0123456789")"},
        {R"("123e4567e89b12d3a456426614174000")", R"("123e4567-e89b-12d3-a456-42661417400g")"});
}

TEST(JsonSchemaMatch, UnicodeStringsAndNames) {
  check(json::parse(R"({"type":"object","properties":{"名前":{"type":"string","minLength":2,"maxLength":3},
                        "emoji 😀":{"type":"boolean"}},"required":["名前"],"additionalProperties":false})"),
        {R"({"名前":"日本"})", R"({"名前":"日本語","emoji 😀":true})", R"({"名前":"😀😀"})",
         R"({"名前":"\n\u00e9"})"},
        {R"({"名前":"日"})", R"({"名前":"日本語!"})", R"({"名":"日本"})"});
  // A character outside the BMP is one code point, written as itself; as a \u surrogate pair it would
  // count twice, so surrogate escapes are not generated.
  const auto two = compile(json::parse(R"({"type":"string","minLength":2,"maxLength":2})"));
  EXPECT_TRUE(complete(two, "\"\xF0\x9F\x98\x80\xF0\x9F\x98\x80\""));
  EXPECT_TRUE(complete(two, R"("\u00e9\uFFFD")"));
  EXPECT_FALSE(complete(two, R"("\ud83d\ude00")"));
  EXPECT_FALSE(complete(two, R"("\uD800x")"));
  // Partial UTF-8: a character split across token boundaries still matches.
  const auto g = compile(json::parse(R"({"type":"string","maxLength":1})"));
  GrammarMatcher m(g);
  const std::string snow = "\"\xE2\x98\x83\"";
  for (char c : snow) {
    ASSERT_TRUE(m.accepts(std::string(1, c)));
    m.accept(std::string(1, c));
  }
  EXPECT_TRUE(m.can_end());
}

TEST(JsonSchemaMatch, IntegerBounds) {
  check(json::parse(R"({"type":"integer","minimum":-20,"exclusiveMaximum":7})"), {"-20", "-1", "0", "6"},
        {"-21", "7", "-0", "06"});
  check(json::parse(R"({"type":"integer","exclusiveMinimum":99})"), {"100", "123456789"}, {"99", "0", "-100"});
  check(json::parse(R"({"type":"integer","maximum":-5})"), {"-5", "-6", "-1000000"}, {"-4", "0", "5"});
  check(json::parse(R"({"type":"integer","minimum":1.5,"maximum":3.9})"), {"2", "3"}, {"1", "4"});
  // draft-04 boolean exclusives.
  check(json::parse(R"({"type":"integer","minimum":0,"exclusiveMinimum":true,"maximum":3,"exclusiveMaximum":true})"),
        {"1", "2"}, {"0", "3"});
}

TEST(JsonSchemaMatch, IntegerRangesAreExact) {
  const std::vector<std::pair<std::optional<int64_t>, std::optional<int64_t>>> ranges = {
      {0, 0}, {0, 9}, {3, 7}, {0, 150}, {5, 1234}, {10, 99}, {100, 999}, {101, 998}, {-5, 5}, {-150, -7},
      {-1000, 1000}, {17, 17}, {-1, -1}, {19, 201}, {990, 1010}, {-999, -100}, {0, std::nullopt},
      {-25, std::nullopt}, {42, std::nullopt}, {std::nullopt, 0}, {std::nullopt, -33}, {std::nullopt, 180}};
  for (const auto& [lo, hi] : ranges) {
    const auto g = parse_grammar("root ::= " + json_schema_detail::integer_range(lo, hi));
    for (int64_t x = -1100; x <= 1100; ++x) {
      const bool in = (!lo || x >= *lo) && (!hi || x <= *hi);
      ASSERT_EQ(complete(g, std::to_string(x)), in)
          << x << " in [" << (lo ? std::to_string(*lo) : "-inf") << ", " << (hi ? std::to_string(*hi) : "inf") << "]";
    }
    EXPECT_FALSE(complete(g, "-0"));
    EXPECT_FALSE(complete(g, "007"));
  }
  const int64_t m = json_schema_detail::kMaxIntBound;
  const auto big = parse_grammar("root ::= " + json_schema_detail::integer_range(-m, m));
  EXPECT_TRUE(complete(big, "999999999999999999"));
  EXPECT_TRUE(complete(big, "-999999999999999999"));
  EXPECT_FALSE(complete(big, "1000000000000000000"));
  const auto open = parse_grammar("root ::= " + json_schema_detail::integer_range(0, std::nullopt));
  EXPECT_TRUE(complete(open, "9999999999999999"));     // 16 digits
  EXPECT_FALSE(complete(open, "10000000000000000"));   // 17: the cap
}

TEST(JsonSchemaMatch, NonNegativeNumbersAndNullable) {
  check(json::parse(R"({"type":"number","minimum":0})"), {"0", "0.5", "12e3"}, {"-1", "-0.5"});
  check(json::parse(R"({"type":"string","nullable":true})"), {R"("s")", "null"}, {"1"});
}

TEST(JsonSchemaMatch, UntypedSchemasTakeTheTypesTheirKeywordsName) {
  check(json::parse("{}"), {"1", R"("s")", "null", R"({"a":[1,{"b":false}]})", "[]"}, {"", "nul", "{", "[1,]"});
  check(json::parse("true"), {"[true]"}, {"tru"});
  check(json::parse(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","$id":"https://example.com/s",
                        "description":"annotations only","title":"t","examples":[1],"default":2,"$comment":"c",
                        "deprecated":true,"readOnly":false,"x-vendor":{"anything":1}})"),
        {"1", "[]"}, {"]"});
  check(json::parse(R"({"properties":{"a":{"type":"integer"}},"required":["a"]})"), {R"({"a":1})"},
        {"1", R"({"a":"x"})"});
  check(json::parse(R"({"maxLength":1,"items":{"type":"null"}})"), {R"("x")", "[null]"}, {R"("xy")", "[1]", "1"});
  check(json::parse(R"({"type":"object","properties":{"gone":false,"x":{"type":"integer"}}})"),
        {R"({"x":1})", "{}"}, {R"({"gone":1})", R"({"x":1,"gone":1})"});
}

TEST(JsonSchemaMatch, JsonObjectMode) {
  const auto g = parse_grammar(json_object_gbnf());
  for (const char* doc : {R"({})", R"({"a":1})", R"({"a":{"b":[1,2.5,"x",null,true,{}]},"c":"d"})"}) {
    const json v = json::parse(doc);
    EXPECT_TRUE(complete(g, v.dump())) << doc;
    EXPECT_TRUE(complete(g, v.dump(2))) << doc;
  }
  for (const char* text : {"[]", "1", R"("s")", "null", R"({"a":})", R"({"a":1,})", R"({a:1})", R"({"a":1}})", " {}"})
    EXPECT_FALSE(complete(g, text)) << text;
}

TEST(JsonSchemaMatch, WhitespaceIsBounded) {
  const auto g = compile(json::parse(R"({"type":"array","items":{"type":"integer"}})"));
  EXPECT_TRUE(complete(g, "[\n" + std::string(20, ' ') + "1]"));
  EXPECT_FALSE(complete(g, "[\n" + std::string(21, ' ') + "1]"));
  EXPECT_FALSE(complete(g, "[  1]"));
  EXPECT_FALSE(complete(g, " [1]"));
  EXPECT_FALSE(complete(g, "[1] "));
  EXPECT_TRUE(complete(g, "[1, 2,\n\t3\n]"));
}

// ---- refusals -------------------------------------------------------------------------------------

TEST(JsonSchemaRefuse, MalformedSchemasNameThePointer) {
  const auto bad = ErrorKind::kBadRequest;
  expect_refused(json::parse(R"({"properties":{"age":{"type":"integer","minimum":"0"}}})"), bad,
                 "json_schema: /properties/age: 'minimum' must be a number");
  expect_refused(json::parse(R"({"type":"strin"})"), bad,
                 "json_schema: (root): 'type' \"strin\" is not a JSON Schema type");
  expect_refused(json::parse(R"({"items":{"minLength":-1}})"), bad,
                 "json_schema: /items: 'minLength' must be a non-negative integer");
  expect_refused(json::parse(R"({"type":"string","minLength":3,"maxLength":2})"), bad,
                 "json_schema: (root): 'minLength' is greater than 'maxLength'");
  expect_refused(json::parse(R"({"type":"array","minItems":3,"maxItems":2})"), bad,
                 "json_schema: (root): 'minItems' exceeds the number of items the array may have");
  expect_refused(json::parse(R"({"type":"integer","minimum":5,"maximum":4})"), bad,
                 "json_schema: (root): no integer satisfies 'minimum'/'maximum'");
  expect_refused(json::parse(R"({"$ref":"#/$defs/missing"})"), bad,
                 "json_schema: (root): '$ref' '#/$defs/missing' does not resolve");
  expect_refused(json::parse(R"({"properties":{"a/b":{"$ref":"#/$defs/x~2"}}})"), bad,
                 "json_schema: /properties/a~1b: '$ref' '#/$defs/x~2' is not a valid JSON pointer");
  expect_refused(json::parse(R"({"properties":{"x":false},"required":["x"]})"), bad,
                 "json_schema: /properties/x: required property 'x' has the schema false");
  expect_refused(json::parse(R"({"properties":{},"required":["x"],"additionalProperties":false})"), bad,
                 "json_schema: (root): 'required' names 'x', which 'properties' does not list and "
                 "additionalProperties forbids");
  expect_refused(json::parse("false"), bad, "json_schema: (root): the schema false accepts no document");
  expect_refused(json::parse("[1]"), bad, "json_schema: (root): a schema must be an object or a boolean");
  expect_refused(json::parse(R"({"enum":[]})"), bad, "json_schema: (root): 'enum' must be a non-empty array");
  expect_refused(json::parse(R"({"type":"integer","enum":["a"]})"), bad,
                 "json_schema: (root): no 'enum'/'const' value satisfies the other keywords");
  expect_refused(json::parse(R"({"allOf":[{"type":"string"},{"type":"integer"}]})"), bad,
                 "json_schema: (root): allOf: the parts' types have nothing in common");
  expect_refused(json::parse(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},
                                  "$ref":"#/$defs/a"})"),
                 bad,
                 "json_schema: /$defs/a/anyOf/0: '$ref' '#/$defs/a' recurses without an enclosing object or array");
  expect_refused(json::parse(R"({"$ref":"#","minLength":1})"), bad,
                 "json_schema: (root): allOf: '$ref'/'allOf' nest too deep (a cycle?)");
}

TEST(JsonSchemaRefuse, UnsupportedKeywordsAreNamed) {
  const auto no = ErrorKind::kUnsupported;
  expect_refused(json::parse(R"({"properties":{"code":{"type":"string","pattern":"^[A-Z]+$"}}})"), no,
                 "json_schema: /properties/code: 'pattern' is not supported");
  expect_refused(json::parse(R"({"type":"string","format":"email"})"), no,
                 "json_schema: (root): 'format' 'email' is not supported (only date, time, date-time, uuid)");
  expect_refused(json::parse(R"({"type":"string","maxLenght":3})"), no,
                 "json_schema: (root): unknown keyword 'maxLenght'");
  expect_refused(json::parse(R"({"type":"number","maximum":1})"), no,
                 "json_schema: (root): 'minimum'/'maximum'/'exclusiveMinimum'/'exclusiveMaximum' on numbers are not "
                 "supported (only on integers, or \"minimum\": 0)");
  expect_refused(json::parse(R"({"type":"array","uniqueItems":true})"), no,
                 "json_schema: (root): 'uniqueItems': true is not supported");
  expect_refused(json::parse(R"({"$ref":"https://example.com/s.json"})"), no,
                 "json_schema: (root): '$ref' 'https://example.com/s.json': only local references (\"#...\") are "
                 "supported");
  expect_refused(json::parse(R"({"items":{"$ref":"#node"}})"), no,
                 "json_schema: /items: '$ref' '#node': anchors are not supported, only JSON pointers");
  expect_refused(json::parse(R"({"items":{"$id":"x.json"}})"), no,
                 "json_schema: /items: '$id' below the top level is not supported");
  expect_refused(json::parse(R"({"anyOf":[{"type":"null"}],"oneOf":[{"type":"null"}]})"), no,
                 "json_schema: (root): 'anyOf' together with 'oneOf' is not supported");
  expect_refused(json::parse(R"({"enum":[{"a":1}],"properties":{"a":{}}})"), no,
                 "json_schema: (root): 'enum' together with 'properties' is not supported");
  expect_refused(json::parse(R"({"type":"string","format":"date","maxLength":10})"), no,
                 "json_schema: (root): 'format' together with 'minLength'/'maxLength' is not supported");
  expect_refused(json::parse(R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},
                                          {"properties":{"b":{}}}]})"),
                 no,
                 "json_schema: (root): allOf: property 'b' is added where another part restricts "
                 "'additionalProperties'");
  // `items` covers what follows its own part's prefix; nullable widens only its own part.
  expect_refused(json::parse(R"({"allOf":[{"items":{"type":"integer"}},{"prefixItems":[{}],"items":false}]})"), no,
                 "json_schema: (root): allOf: cannot merge array parts with different prefixes ('prefixItems')");
  expect_refused(json::parse(R"({"allOf":[{"type":"string","nullable":true},{"type":"string"}]})"), no,
                 "json_schema: (root): allOf: 'nullable' in only some of the parts is not supported");
  expect_refused(json::parse(R"({"allOf":[{"format":"date"},{"format":"time"}]})"), no,
                 "json_schema: (root): allOf: cannot merge different values of 'format'");
  expect_refused(json::parse(R"({"type":"array","prefixItems":[{}],"additionalItems":false})"), no,
                 "json_schema: (root): 'additionalItems' applies only with an array 'items'; use 'items' with "
                 "'prefixItems'");
  for (const char* k : {"patternProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired",
                        "dependentSchemas", "dependencies", "not", "if", "then", "else", "contains", "minContains",
                        "maxContains", "unevaluatedItems", "unevaluatedProperties", "multipleOf", "$anchor",
                        "$dynamicRef", "$recursiveRef"}) {
    json s = json::object();
    s["properties"]["p"][k] = json::object();
    expect_refused(s, no, std::string("json_schema: /properties/p: '") + k + "' is not supported");
  }
}

TEST(JsonSchemaRefuse, BoundsPastTheGrammarLimits) {
  const Error e = refusal(json::parse(R"({"type":"string","maxLength":20000})"));
  EXPECT_EQ(e.kind(), ErrorKind::kLimit) << e.what();
  EXPECT_EQ(std::string(e.what()), "json_schema: (root): 'maxLength' above 10000 is not supported");
  // Refused before the grammar gets larger than the parser allows.
  json wide = json::parse(R"({"type":"object"})");
  for (int i = 0; i < 1500; ++i) wide["properties"]["property_" + std::to_string(i)]["type"] = "integer";
  const Error w = refusal(wide);
  EXPECT_EQ(w.kind(), ErrorKind::kLimit) << w.what();
  EXPECT_EQ(std::string(w.what()), "json_schema: the grammar would exceed 100000 bytes");
  // Nesting: a deep schema, and a recursive $ref whose siblings make it expand rather than refer.
  json deep = json::object();
  for (int i = 0; i < 250; ++i) deep = json{{"type", "array"}, {"items", deep}};
  EXPECT_EQ(refusal(deep).kind(), ErrorKind::kLimit);
  const Error r = refusal(json::parse(R"({"$defs":{"n":{"type":"array","items":{"$ref":"#/$defs/n","maxItems":2}}},
                                         "$ref":"#/$defs/n"})"));
  EXPECT_EQ(r.kind(), ErrorKind::kLimit) << r.what();
  EXPECT_NE(std::string(r.what()).find("levels deep (a recursive '$ref' with sibling keywords"), std::string::npos);
  // A maxLength at the limit still compiles.
  EXPECT_NO_THROW(compile(json::parse(R"({"type":"string","maxLength":10000})")));
}

}  // namespace
}  // namespace graft::engine
