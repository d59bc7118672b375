// GBNF text to the element program. A recursive-descent parser over byte offsets; whitespace
// follows llama.cpp's rules (a newline ends a rule except inside parentheses and right after `::=`
// or `|`), so grammars written for llama.cpp parse the same way here.
#include <algorithm>
#include <unordered_map>

#include "engine/grammar_program.h"
#include "graft/core/error.h"

namespace graft::engine {

namespace {

using Seq = std::vector<GrammarElement>;
using Alts = std::vector<Seq>;

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
}

// Sorts and merges ranges, then removes the surrogate block.
std::vector<std::pair<uint32_t, uint32_t>> normalize(std::vector<std::pair<uint32_t, uint32_t>> r) {
  std::sort(r.begin(), r.end());
  std::vector<std::pair<uint32_t, uint32_t>> out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  std::vector<std::pair<uint32_t, uint32_t>> cut;
  for (const auto& [lo, hi] : out) {
    if (hi < 0xD800 || lo > 0xDFFF) {
      cut.push_back({lo, hi});
      continue;
    }
    if (lo < 0xD800) cut.push_back({lo, 0xD7FF});
    if (hi > 0xDFFF) cut.push_back({0xE000, hi});
  }
  return cut;
}

std::vector<std::pair<uint32_t, uint32_t>> complement(const std::vector<std::pair<uint32_t, uint32_t>>& r) {
  std::vector<std::pair<uint32_t, uint32_t>> out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return normalize(std::move(out));
}

class Parser {
 public:
  Parser(std::string_view text, Grammar& g) : s_(text), g_(g) {}

  void parse_all() {
    skip_space(true);
    while (p_ < s_.size()) parse_rule();
  }

  std::vector<std::pair<std::string, uint32_t>> undefined() const {
    std::vector<std::pair<std::string, uint32_t>> out;
    for (size_t r = 0; r < g_.rules.size(); ++r)
      if (!g_.rules[r].generated && !defined_[r]) out.push_back({g_.rules[r].name, first_use_[r]});
    return out;
  }

  // Lays the rule bodies out in g_.elements; each alternative ends with kEnd.
  void flatten() {
    for (size_t r = 0; r < bodies_.size(); ++r) {
      for (const Seq& alt : bodies_[r]) {
        g_.rules[r].alts.push_back(static_cast<uint32_t>(g_.elements.size()));
        g_.elements.insert(g_.elements.end(), alt.begin(), alt.end());
        g_.elements.push_back({GrammarElement::Kind::kEnd, 0, g_.rules[r].source});
      }
    }
  }

 private:
  [[noreturn]] void syntax(size_t at, const std::string& what) const {
    fail_as(ErrorKind::kBadRequest, "grammar: ", g_.where(static_cast<uint32_t>(at)), ": ", what);
  }

  // What is at `at`, for messages: "'x'", "a newline", "the end of the grammar", "byte 0xFF".
  // Always valid UTF-8, so that the message can travel in a JSON error body.
  std::string found(size_t at) const {
    if (at >= s_.size()) return "the end of the grammar";
    const unsigned char c = static_cast<unsigned char>(s_[at]);
    if (c == '\n' || c == '\r') return "a newline";
    if (c < 0x20 || c == 0x7f) return "a control character";
    const size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    bool valid = n > 0 && c < 0xF5 && at + n <= s_.size();
    for (size_t i = 1; valid && i < n; ++i) valid = (static_cast<unsigned char>(s_[at + i]) & 0xC0) == 0x80;
    if (!valid) {
      static const char* kHex = "0123456789ABCDEF";
      return std::string("byte 0x") + kHex[c >> 4] + kHex[c & 15];
    }
    return std::string("'").append(s_.substr(at, n)).append("'");
  }

  char peek(size_t ahead = 0) const { return p_ + ahead < s_.size() ? s_[p_ + ahead] : '\0'; }
  bool at_end() const { return p_ >= s_.size(); }

  // Spaces, tabs and comments; newlines too where a rule may continue.
  void skip_space(bool newlines) {
    while (p_ < s_.size()) {
      char c = s_[p_];
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++p_;
      } else if (c == '#') {
        while (p_ < s_.size() && s_[p_] != '\n' && s_[p_] != '\r') ++p_;
      } else {
        break;
      }
    }
  }

  uint32_t rule_id(const std::string& name, size_t at) {
    auto [it, fresh] = ids_.emplace(name, static_cast<uint32_t>(g_.rules.size()));
    if (fresh) {
      GrammarRule r;
      r.name = name;
      r.source = static_cast<uint32_t>(at);
      g_.rules.push_back(std::move(r));
      bodies_.emplace_back();
      defined_.push_back(false);
      first_use_.push_back(static_cast<uint32_t>(at));
    }
    return it->second;
  }

  uint32_t new_rule(Alts alts, const std::string& owner, size_t at) {
    GrammarRule r;
    r.name = owner;
    r.source = static_cast<uint32_t>(at);
    r.generated = true;
    g_.rules.push_back(std::move(r));
    bodies_.push_back(std::move(alts));
    defined_.push_back(true);
    first_use_.push_back(static_cast<uint32_t>(at));
    return static_cast<uint32_t>(g_.rules.size() - 1);
  }

  // Every element added counts against the program size; repetitions are where it could explode.
  void count(size_t n, size_t at) {
    elements_ += n;
    if (elements_ > kGrammarMaxElements)
      fail_as(ErrorKind::kLimit, "grammar: ", g_.where(static_cast<uint32_t>(at)),
              ": the compiled grammar would exceed ", kGrammarMaxElements, " elements");
  }

  GrammarElement terminal(std::vector<std::pair<uint32_t, uint32_t>> ranges, size_t at) {
    auto [it, fresh] = class_ids_.emplace(ranges, static_cast<uint32_t>(g_.classes.size()));
    if (fresh) g_.classes.push_back({std::move(ranges)});
    count(1, at);
    return {GrammarElement::Kind::kTerminal, it->second, static_cast<uint32_t>(at)};
  }

  GrammarElement ref(uint32_t rule, size_t at) {
    count(1, at);
    return {GrammarElement::Kind::kRule, rule, static_cast<uint32_t>(at)};
  }

  std::string parse_name() {
    size_t start = p_;
    while (p_ < s_.size() && is_name_char(s_[p_])) ++p_;
    if (p_ == start) syntax(start, "expected a rule name, found " + found(start));
    return std::string(s_.substr(start, p_ - start));
  }

  void parse_rule() {
    size_t start = p_;
    std::string name = parse_name();
    skip_space(false);
    if (s_.substr(p_, 3) != "::=") syntax(p_, "expected '::=' after rule name '" + name + "', found " + found(p_));
    p_ += 3;
    skip_space(true);
    uint32_t id = rule_id(name, start);
    if (defined_[id]) {
      syntax(start, "rule '" + name + "' is defined twice (first at " + g_.where(g_.rules[id].source) + ")");
    }
    defined_[id] = true;
    g_.rules[id].source = static_cast<uint32_t>(start);
    Alts alts = parse_alternates(name, false);
    if (p_ < s_.size()) {
      if (s_[p_] == '\r') {
        p_ += peek(1) == '\n' ? 2 : 1;
      } else if (s_[p_] == '\n') {
        ++p_;
      } else {
        syntax(p_, "expected a symbol, '|' or the end of the line, found " + found(p_));
      }
    }
    bodies_[id] = std::move(alts);
    skip_space(true);
  }

  Alts parse_alternates(const std::string& rule, bool nested) {
    Alts alts;
    alts.push_back(parse_sequence(rule, nested));
    while (peek() == '|') {
      ++p_;
      skip_space(true);
      alts.push_back(parse_sequence(rule, nested));
    }
    return alts;
  }

  Seq parse_sequence(const std::string& rule, bool nested) {
    Seq seq;
    size_t item = 0;        // where the last item's elements start in seq
    bool have_item = false;  // a postfix operator needs something to apply to
    while (p_ < s_.size()) {
      const size_t at = p_;
      const char c = s_[p_];
      if (c == '"') {
        item = seq.size();
        have_item = true;
        parse_literal(seq);
      } else if (c == '[') {
        item = seq.size();
        have_item = true;
        seq.push_back(parse_class());
      } else if (is_name_char(c)) {
        item = seq.size();
        have_item = true;
        std::string name = parse_name();
        seq.push_back(ref(rule_id(name, at), at));
      } else if (c == '(') {
        if (++depth_ > kGrammarMaxNesting)
          fail_as(ErrorKind::kLimit, "grammar: ", g_.where(static_cast<uint32_t>(at)), ": groups nested deeper than ",
                  kGrammarMaxNesting);
        ++p_;
        skip_space(true);
        Alts alts = parse_alternates(rule, true);
        if (peek() != ')')
          syntax(p_, "expected ')' to close the group opened at " + g_.where(static_cast<uint32_t>(at)) + ", found " +
                         found(p_));
        ++p_;
        --depth_;
        item = seq.size();
        have_item = true;
        // A group of one alternative is spliced in place; only alternatives need a rule.
        if (alts.size() == 1)
          seq.insert(seq.end(), alts[0].begin(), alts[0].end());
        else
          seq.push_back(ref(new_rule(std::move(alts), rule, at), at));
      } else if (c == '.') {
        ++p_;
        item = seq.size();
        have_item = true;
        seq.push_back(terminal({{0, kMaxCodePoint}}, at));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_item) syntax(at, std::string("expected a symbol before '") + c + "'");
        uint32_t lo = 0, hi = 0;
        bool bounded = true;
        ++p_;
        if (c == '*') {
          bounded = false;
        } else if (c == '+') {
          lo = 1;
          bounded = false;
        } else if (c == '?') {
          hi = 1;
        } else {
          parse_braces(at, lo, hi, bounded, nested);
        }
        Seq x(seq.begin() + static_cast<std::ptrdiff_t>(item), seq.end());
        seq.resize(item);
        repeat(seq, std::move(x), lo, hi, bounded, rule, at);
      } else if (c == '<' || c == '!') {
        fail_as(ErrorKind::kUnsupported, "grammar: ", g_.where(static_cast<uint32_t>(at)),
                ": token matches (<[id]>, <token>, !<...>) are not supported");
      } else {
        break;
      }
      skip_space(nested);
    }
    return seq;
  }

  // {m}, {m,}, {m,n}, with spaces allowed inside as llama.cpp allows them.
  void parse_braces(size_t at, uint32_t& lo, uint32_t& hi, bool& bounded, bool nested) {
    skip_space(nested);
    lo = parse_count(at);
    skip_space(nested);
    if (peek() == '}') {
      hi = lo;
    } else if (peek() == ',') {
      ++p_;
      skip_space(nested);
      if (peek() >= '0' && peek() <= '9') {
        hi = parse_count(at);
        skip_space(nested);
        if (hi < lo)
          syntax(at, "repetition maximum " + std::to_string(hi) + " is below its minimum " + std::to_string(lo));
      } else {
        bounded = false;
      }
      if (peek() != '}') syntax(p_, "expected '}' to close the repetition, found " + found(p_));
    } else {
      syntax(p_, "expected ',' or '}' in the repetition, found " + found(p_));
    }
    ++p_;
  }

  uint32_t parse_count(size_t at) {
    if (!(peek() >= '0' && peek() <= '9')) syntax(p_, "expected a repetition count, found " + found(p_));
    uint64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + static_cast<uint64_t>(peek() - '0');
      if (v > kGrammarMaxRepeat)
        fail_as(ErrorKind::kLimit, "grammar: ", g_.where(static_cast<uint32_t>(at)), ": repetition count exceeds ",
                kGrammarMaxRepeat);
      ++p_;
    }
    return static_cast<uint32_t>(v);
  }

  // Appends x repeated lo..hi times (hi unbounded when !bounded): lo copies, then either
  // R ::= x R | ε, or a chain R_k ::= x R_(k-1) | ε of hi - lo optional copies (each step down the
  // chain consumes one x, so no state ever holds more than one copy).
  void repeat(Seq& seq, Seq x, uint32_t lo, uint32_t hi, bool bounded, const std::string& rule, size_t at) {
    if (x.empty()) return;  // ε repeated is ε
    GrammarElement one = x.size() == 1 ? x[0] : ref(new_rule({x}, rule, at), at);
    count(lo, at);
    for (uint32_t i = 0; i < lo; ++i) seq.push_back(one);
    if (!bounded) {
      uint32_t r = new_rule({}, rule, at);
      bodies_[r] = {{one, ref(r, at)}, {}};
      seq.push_back(ref(r, at));
      return;
    }
    uint32_t prev = 0;
    const uint32_t chain = ++chains_;
    for (uint32_t k = 1; k <= hi - lo; ++k) {
      Alts a = k == 1 ? Alts{{one}, {}} : Alts{{one, ref(prev, at)}, {}};
      count(a[0].size() + 1, at);
      prev = new_rule(std::move(a), rule, at);
      g_.rules[prev].chain = chain;
      g_.rules[prev].chain_k = k;
    }
    if (hi > lo) seq.push_back(ref(prev, at));
  }

  void parse_literal(Seq& seq) {
    const size_t open = p_;
    ++p_;
    while (true) {
      if (at_end()) syntax(open, "unterminated string literal");
      if (peek() == '"') break;
      size_t at = p_;
      uint32_t cp = parse_char();
      seq.push_back(terminal({{cp, cp}}, at));
    }
    ++p_;
  }

  GrammarElement parse_class() {
    const size_t open = p_;
    ++p_;
    bool negate = false;
    if (peek() == '^') {
      negate = true;
      ++p_;
    }
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (true) {
      if (at_end()) syntax(open, "unterminated character class");
      if (peek() == ']') break;
      size_t at = p_;
      uint32_t lo = parse_char(), hi = lo;
      if (peek() == '-' && p_ + 1 < s_.size() && peek(1) != ']') {
        ++p_;
        hi = parse_char();
        if (hi < lo) syntax(at, "character range ends below its start");
      }
      ranges.push_back({lo, hi});
    }
    if (ranges.empty()) syntax(open, "empty character class");
    ++p_;
    ranges = normalize(std::move(ranges));
    if (negate) ranges = complement(ranges);
    return terminal(std::move(ranges), open);
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  uint32_t parse_char() {
    const size_t at = p_;
    if (peek() == '\\') {
      if (p_ + 1 >= s_.size()) syntax(at, "unterminated escape");
      char e = s_[p_ + 1];
      p_ += 2;
      switch (e) {
        case 'x': return parse_hex(at, 2);
        case 'u': return parse_hex(at, 4);
        case 'U': return parse_hex(at, 8);
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-': return static_cast<unsigned char>(e);
        default: syntax(at, "unknown escape: '\\' followed by " + found(p_ - 1));
      }
    }
    return decode_utf8(at);
  }

  uint32_t parse_hex(size_t at, int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      char c = peek();
      int d = (c >= '0' && c <= '9')   ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : -1;
      if (d < 0) syntax(at, "expected " + std::to_string(digits) + " hex digits in the escape, found " + found(p_));
      v = v * 16 + static_cast<uint32_t>(d);
      ++p_;
    }
    if (v > kMaxCodePoint) syntax(at, "code point beyond U+10FFFF");
    return v;
  }

  uint32_t decode_utf8(size_t at) {
    const auto b = [&](size_t i) { return static_cast<unsigned char>(s_[i]); };
    unsigned char c = b(p_);
    if (c < 0x80) {
      ++p_;
      return c;
    }
    const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;  // continuation bytes to follow
    if (n == 0 || c >= 0xF5) syntax(at, "invalid UTF-8 in the grammar");
    uint32_t cp = c & (0x3F >> n);
    bool ok = true;
    for (int i = 1; ok && i <= n; ++i) {
      if (p_ + static_cast<size_t>(i) >= s_.size() || (b(p_ + i) & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (b(p_ + i) & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (!ok || cp < kMin[n] || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF))
      syntax(at, "invalid UTF-8 in the grammar");
    p_ += static_cast<size_t>(n) + 1;
    return cp;
  }

  std::string_view s_;
  size_t p_ = 0;
  Grammar& g_;
  int depth_ = 0;
  size_t elements_ = 0;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<Alts> bodies_;
  uint32_t chains_ = 0;  // bounded repetitions lowered so far
  std::vector<bool> defined_;
  std::vector<uint32_t> first_use_;
  struct RangesHash {
    size_t operator()(const std::vector<std::pair<uint32_t, uint32_t>>& r) const {
      size_t h = 1469598103934665603ull;
      for (const auto& [a, b] : r) h = (h ^ a ^ (static_cast<size_t>(b) << 32)) * 1099511628211ull;
      return h;
    }
  };
  std::unordered_map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t, RangesHash> class_ids_;
};

}  // namespace

Grammar parse_gbnf(std::string_view text, std::vector<std::pair<std::string, uint32_t>>& undefined) {
  Grammar g;
  g.text = std::string(text);
  Parser p(g.text, g);
  p.parse_all();
  p.flatten();
  undefined = p.undefined();
  return g;
}

}  // namespace graft::engine
