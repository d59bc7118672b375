// GBNF text helpers for the JSON Schema converter: escaping, rule names, the fixed JSON rules, and
// integer ranges as digit patterns.
#include <algorithm>
#include <cstdio>

#include "engine/json_schema_gbnf.h"
#include "graft/core/error.h"
#include "graft/core/utf8.h"

namespace graft::engine::json_schema_detail {

std::string pointer_child(const std::string& parent, const std::string& token) {
  std::string out = parent + "/";
  for (char c : token) {  // RFC 6901: '~' -> "~0", '/' -> "~1"
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string pointer_text(const std::string& pointer) { return pointer.empty() ? "(root)" : pointer; }

std::optional<std::vector<uint32_t>> utf8_code_points(std::string_view s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 0 : (b >> 5) == 6 ? 1 : (b >> 4) == 14 ? 2 : (b >> 3) == 30 ? 3 : -1;
    if (n < 0 || i + static_cast<size_t>(n) >= s.size()) return std::nullopt;  // bad lead or truncated
    uint32_t cp = n == 0 ? b : n == 1 ? (b & 0x1F) : n == 2 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k <= n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c >> 6) != 2) return std::nullopt;
      cp = (cp << 6) | (c & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
    out.push_back(cp);
    i += static_cast<size_t>(n) + 1;
  }
  return out;
}

std::string utf8_encode(uint32_t cp) { return utf8_of(static_cast<char32_t>(cp)); }

namespace {

std::string hex_escape(uint32_t c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02X", static_cast<unsigned>(c));
  return buf;
}

}  // namespace

std::string gbnf_literal(std::string_view utf8) {
  std::string out = "\"";
  for (char ch : utf8) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        // Bytes >= 0x80 pass through: the grammar reads its text as UTF-8, so a multi-byte
        // character stays one code point.
        if (c < 0x20 || c == 0x7F) out += hex_escape(c);
        else out += ch;
    }
  }
  return out + "\"";
}

std::string gbnf_class_char(uint32_t cp) {
  const bool alnum = (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
  if (alnum || cp >= 0x80) return utf8_encode(cp);
  return hex_escape(cp);  // '-', ']', '^', '\' and the rest cannot change the class's meaning
}

std::string gbnf_repeat(const std::string& atom, int64_t lo, int64_t hi) {
  if (hi == 0) return "";
  if (lo == 0 && hi < 0) return atom + "*";
  if (lo == 1 && hi < 0) return atom + "+";
  if (lo == 0 && hi == 1) return atom + "?";
  if (lo == 1 && hi == 1) return atom;
  if (hi < 0) return atom + "{" + std::to_string(lo) + ",}";
  if (lo == hi) return atom + "{" + std::to_string(lo) + "}";
  return atom + "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
}

// ---- integer ranges ------------------------------------------------------------------------------

namespace {

std::string digit_class(char a, char b) {
  if (a == b) return std::string("\"") + a + "\"";
  if (a == '0' && b == '9') return "[0-9]";
  return std::string("[") + a + "-" + b + "]";
}

std::string any_digits(size_t n) { return n == 0 ? "" : " " + gbnf_repeat("[0-9]", n, n); }

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// The decimal strings of x's length from x to y (x <= y, same length, no sign).
std::string same_length(const std::string& x, const std::string& y) {
  const size_t n = x.size();
  if (n == 1) return digit_class(x[0], y[0]);
  if (x[0] == y[0]) return digit_class(x[0], x[0]) + " " + same_length(x.substr(1), y.substr(1));
  const std::string xs = x.substr(1), ys = y.substr(1);
  std::vector<std::string> alts;
  char mid_lo = x[0], mid_hi = y[0];
  if (xs != std::string(n - 1, '0')) {  // x0 followed by xs..99.., then the middle starts one higher
    alts.push_back(digit_class(x[0], x[0]) + " " + same_length(xs, std::string(n - 1, '9')));
    ++mid_lo;
  }
  std::string high;
  if (ys != std::string(n - 1, '9')) {
    high = digit_class(y[0], y[0]) + " " + same_length(std::string(n - 1, '0'), ys);
    --mid_hi;
  }
  if (mid_lo <= mid_hi) alts.push_back(digit_class(mid_lo, mid_hi) + any_digits(n - 1));
  if (!high.empty()) alts.push_back(high);
  return alternatives(alts);
}

int64_t pow10(size_t n) {
  int64_t p = 1;
  while (n--) p *= 10;
  return p;
}

// Non-negative integers from a to b (b absent: up to max(kIntDigits, digits of a) digits).
std::vector<std::string> non_negative(int64_t a, std::optional<int64_t> b) {
  const size_t la = std::to_string(a).size();
  const size_t lb = b ? std::to_string(*b).size() : std::max<size_t>(kIntDigits, la);
  std::vector<std::string> alts;
  for (size_t len = la; len <= lb; ++len) {
    if (!b && len > la) {  // every number of len..lb digits: one pattern
      alts.push_back("[1-9]" + std::string(" ") + gbnf_repeat("[0-9]", len - 1, lb - 1));
      break;
    }
    const int64_t low = std::max(a, len == 1 ? 0 : pow10(len - 1));
    const int64_t high = b ? std::min(*b, pow10(len) - 1) : pow10(len) - 1;
    if (low <= high) alts.push_back(same_length(std::to_string(low), std::to_string(high)));
  }
  return alts;
}

}  // namespace

std::string integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<std::string> alts;
  if (!lo || *lo < 0) {  // negatives, as "-" and a magnitude
    const int64_t mag_lo = hi && *hi < 0 ? -*hi : 1;
    const std::optional<int64_t> mag_hi = lo ? std::optional<int64_t>(-*lo) : std::nullopt;
    alts.push_back("\"-\" " + alternatives(non_negative(mag_lo, mag_hi)));
  }
  if (!hi || *hi >= 0) {
    for (auto& a : non_negative(lo ? std::max<int64_t>(*lo, 0) : 0, hi)) alts.push_back(std::move(a));
  }
  return alternatives(alts);
}

// ---- rules ---------------------------------------------------------------------------------------

namespace {

// The fixed rules, each with the fixed rules its body uses.
struct Builtin {
  const char* name;
  const char* body;
  std::vector<const char*> uses;
};

const std::vector<Builtin>& builtins() {
  static const std::vector<Builtin> kRules = {
      // Bounded: a model cannot emit blanks forever.
      {"ws", R"(( " " | "\n" [ \t]{0,20} )?)", {}},
      // \u escapes of UTF-16 surrogates are left out: a pair would count as two characters here but
      // is one code point for minLength, and a lone one is not a character at all. Characters
      // outside the BMP are written as themselves.
      {"char",
       R"([^"\\\x7F\x00-\x1F] | )"
       R"("\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) ))",
       {}},
      {"string", R"("\"" char* "\"")", {"char"}},
      {"integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))", {}},
      {"number", R"("-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?)", {}},
      {"boolean", R"("true" | "false")", {}},
      {"null", R"("null")", {}},
      {"value", R"(object | array | string | number | boolean | null)",
       {"object", "array", "string", "number", "boolean", "null"}},
      {"object", R"("{" ws ( string ws ":" ws value ( "," ws string ws ":" ws value )* ws )? "}")",
       {"ws", "string", "value"}},
      {"array", R"("[" ws ( value ( "," ws value )* ws )? "]")", {"ws", "value"}},
      // RFC 3339 full-date with each month's days; February 29th only in leap years (divisible by 4,
      // centuries only when divisible by 400). Years 0001-9999: year 0 is refused by many validators
      // (Python's datetime among them).
      {"year", R"([0-9]{3} [1-9] | [0-9]{2} [1-9] "0" | [0-9] [1-9] "00" | [1-9] "000")", {}},
      {"date",
       R"(year "-" ( ( "0" [13578] | "1" [02] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ) | )"
       R"(( "0" [469] | "11" ) "-" ( "0" [1-9] | [12] [0-9] | "30" ) | )"
       R"("02-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] ) ) | )"
       R"(( [0-9]{2} ( [02468] [48] | [13579] [26] | [2468] "0" ) | ( "0" [48] | [2468] [048] | [13579] [26] ) "00" ) )"
       R"("-02-29")",
       {"year"}},
      // RFC 3339 full-time without leap seconds (a 60th second is valid only at some instants).
      {"time",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,9} )? )"
       R"(( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
       {}},
      {"date-time", R"(date "T" time)", {"date", "time"}},
      {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})", {}},
  };
  return kRules;
}


}  // namespace

RuleSet::RuleSet() {
  order_.push_back("root");
  bodies_["root"];
  for (const auto& b : builtins()) bodies_[b.name];  // reserved; emitted on first use
}

std::string RuleSet::reserve(std::string_view hint) {
  std::string base;
  for (char c : hint) {
    const char l = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    const bool ok = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9');
    if (ok) base += l;
    else if (!base.empty() && base.back() != '-') base += '-';
  }
  while (!base.empty() && base.back() == '-') base.pop_back();
  if (base.empty()) base = "rule";
  std::string name = base;
  for (int n = 2; bodies_.count(name); ++n) name = base + "-" + std::to_string(n);
  bodies_[name];
  order_.push_back(name);
  return name;
}

void RuleSet::define(const std::string& name, std::string body) {
  bytes_ += name.size() + body.size() + 6 - bodies_[name].size();  // "name ::= body\n"
  if (bytes_ > kMaxGrammarBytes)
    fail_as(ErrorKind::kLimit, "json_schema: the grammar would exceed ", kMaxGrammarBytes, " bytes");
  by_body_.emplace(body, name);
  bodies_[name] = std::move(body);
}

std::string RuleSet::add(std::string_view hint, std::string body) {
  if (auto it = by_body_.find(body); it != by_body_.end()) return it->second;
  const std::string name = reserve(hint);
  define(name, std::move(body));
  return name;
}

std::string RuleSet::builtin(const std::string& name) {
  for (const auto& b : builtins()) {
    if (name != b.name) continue;
    if (!bodies_[name].empty()) return name;
    order_.push_back(name);
    define(name, b.body);
    for (const char* use : b.uses) builtin(use);
    return name;
  }
  fail_as(ErrorKind::kInternal, "json_schema: no fixed rule '", name, "'");
}

std::string RuleSet::render() const {
  std::string out;
  for (const auto& name : order_) out += name + " ::= " + bodies_.at(name) + "\n";
  return out;
}

}  // namespace graft::engine::json_schema_detail
