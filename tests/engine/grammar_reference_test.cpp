// GrammarMatcher against an independent reference: a second, deliberately naive reading of the
// same GBNF text (a tiny parser for the subset these grammars use) and a backtracking recognizer
// over code points that computes, for a grammar node and a start position, every position where
// a match can end, plus "ran off the end of the input" (the input is a proper prefix of a match).
// For all short strings over each grammar's alphabet, and for long random walks, both must agree
// on "s is a prefix of some sentence" (accepts), "s is a sentence" (can_end) and, where the
// alphabet covers every terminal, must_end.
#include <gtest/gtest.h>

#include <cctype>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "graft/engine/grammar.h"

namespace graft::engine {
namespace {

using Text = std::u32string;

// ---- the reference ------------------------------------------------------------------------------

struct Ref {
  enum Kind { kAlt, kSeq, kClass, kRule, kRepeat } kind;
  std::vector<std::unique_ptr<Ref>> kids;
  std::vector<std::pair<char32_t, char32_t>> ranges;  // kClass
  bool negated = false;
  std::string name;  // kRule
  int lo = 0, hi = -1;  // kRepeat; hi < 0: unbounded
};

// Parses one rule per line: name ::= alternatives, with "..." (escapes \n \\ \" only), [...] with
// ranges and ^, ., ( ), * + ? {m} {m,} {m,n}. Enough for the grammars below, nothing more.
class RefParser {
 public:
  explicit RefParser(const std::string& text) {
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string::npos) end = text.size();
      std::string line = text.substr(start, end - start);
      start = end + 1;
      if (line.find("::=") == std::string::npos) continue;
      s_ = decode(line);
      p_ = 0;
      std::string name;
      while (s_[p_] != ' ' && s_[p_] != ':') name += static_cast<char>(s_[p_++]);
      p_ = s_.find(U"::=") + 3;
      rules[name] = alts();
    }
  }
  std::map<std::string, std::unique_ptr<Ref>> rules;

 private:
  static Text decode(const std::string& s) {
    Text out;
    for (size_t i = 0; i < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      int n = c < 0x80 ? 0 : c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
      char32_t cp = n == 0 ? c : c & (0x3F >> n);
      for (int k = 1; k <= n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      out += cp;
      i += n + 1;
    }
    return out;
  }
  void space() {
    while (p_ < s_.size() && s_[p_] == ' ') ++p_;
  }
  char32_t ch() {
    if (s_[p_] == '\\') {
      p_ += 2;
      return s_[p_ - 1] == 'n' ? U'\n' : s_[p_ - 1];
    }
    return s_[p_++];
  }
  std::unique_ptr<Ref> alts() {
    auto a = std::make_unique<Ref>(Ref{Ref::kAlt, {}, {}, false, "", 0, -1});
    a->kids.push_back(seq());
    while (p_ < s_.size() && s_[p_] == '|') {
      ++p_;
      a->kids.push_back(seq());
    }
    return a;
  }
  std::unique_ptr<Ref> seq() {
    auto q = std::make_unique<Ref>(Ref{Ref::kSeq, {}, {}, false, "", 0, -1});
    for (space(); p_ < s_.size() && s_[p_] != '|' && s_[p_] != ')'; space()) {
      char32_t c = s_[p_];
      if (c == '*' || c == '+' || c == '?' || c == '{') {
        auto r = std::make_unique<Ref>(Ref{Ref::kRepeat, {}, {}, false, "", 0, -1});
        ++p_;
        if (c == '+') r->lo = 1;
        if (c == '?') r->hi = 1;
        if (c == '{') {
          r->lo = number();
          r->hi = r->lo;
          if (s_[p_] == ',') {
            ++p_;
            r->hi = s_[p_] == '}' ? -1 : number();
          }
          ++p_;
        }
        r->kids.push_back(std::move(q->kids.back()));
        q->kids.back() = std::move(r);
        continue;
      }
      auto item = std::make_unique<Ref>(Ref{Ref::kSeq, {}, {}, false, "", 0, -1});
      if (c == '"') {
        for (++p_; s_[p_] != '"';) {
          char32_t x = ch();
          item->kids.push_back(std::make_unique<Ref>(Ref{Ref::kClass, {}, {{x, x}}, false, "", 0, -1}));
        }
        ++p_;
      } else if (c == '[') {
        item->kind = Ref::kClass;
        if (s_[++p_] == '^') {
          item->negated = true;
          ++p_;
        }
        while (s_[p_] != ']') {
          char32_t a = ch(), b = a;
          if (s_[p_] == '-' && s_[p_ + 1] != ']') {
            ++p_;
            b = ch();
          }
          item->ranges.push_back({a, b});
        }
        ++p_;
      } else if (c == '.') {
        item->kind = Ref::kClass;
        item->negated = true;  // the complement of nothing
        ++p_;
      } else if (c == '(') {
        ++p_;
        item = alts();
        ++p_;  // ')'
      } else {
        item->kind = Ref::kRule;
        while (p_ < s_.size() && (std::isalnum(static_cast<int>(s_[p_])) || s_[p_] == '-'))
          item->name += static_cast<char>(s_[p_++]);
      }
      q->kids.push_back(std::move(item));
    }
    return q;
  }
  int number() {
    int v = 0;
    while (s_[p_] >= '0' && s_[p_] <= '9') v = v * 10 + static_cast<int>(s_[p_++] - '0');
    return v;
  }
  Text s_;
  size_t p_ = 0;
};

// Where a match of a node starting at i can end; kOver: the input ran out inside the match.
class Recognizer {
 public:
  Recognizer(const RefParser& g, const Text& s) : g_(g), s_(s), over_(static_cast<int>(s.size()) + 1) {}

  std::set<int> ends(const Ref& r, int i) {
    const int n = static_cast<int>(s_.size());
    std::set<int> out;
    switch (r.kind) {
      case Ref::kClass: {
        if (i == over_) return {over_};
        if (i == n) return {over_};  // every class here can match something
        bool in = false;
        for (auto [a, b] : r.ranges) in = in || (s_[i] >= a && s_[i] <= b);
        if (in != r.negated) out.insert(i + 1);
        return out;
      }
      case Ref::kSeq: {
        std::set<int> cur{i};
        for (const auto& k : r.kids) {
          std::set<int> next;
          for (int j : cur) {
            if (j == over_) {
              next.insert(over_);
              continue;
            }
            auto e = ends(*k, j);
            next.insert(e.begin(), e.end());
          }
          cur = std::move(next);
        }
        return cur;
      }
      case Ref::kAlt:
        for (const auto& k : r.kids) {
          auto e = ends(*k, i);
          out.insert(e.begin(), e.end());
        }
        return out;
      case Ref::kRule: {
        // Re-entering a rule at the same place adds nothing new (its own ends), so it is cut:
        // this only happens through tail cycles like x ::= "b"? x, left recursion being refused.
        auto key = std::make_pair(r.name, i);
        if (active_.count(key)) return {};
        active_.insert(key);
        out = ends(*g_.rules.at(r.name), i);
        active_.erase(key);
        return out;
      }
      case Ref::kRepeat: {
        std::set<int> frontier{i};
        for (int k = 0;; ++k) {
          if (k >= r.lo) out.insert(frontier.begin(), frontier.end());
          if (r.hi >= 0 && k == r.hi) break;
          std::set<int> next;
          for (int j : frontier) {
            if (j == over_) {
              next.insert(over_);
              continue;
            }
            auto e = ends(*r.kids[0], j);
            next.insert(e.begin(), e.end());
          }
          // Past the minimum, nothing new means everything reachable has been seen.
          if (next.empty() || (k >= r.lo && std::includes(out.begin(), out.end(), next.begin(), next.end()))) break;
          frontier = std::move(next);
        }
        return out;
      }
    }
    return out;
  }

  int over() const { return over_; }

 private:
  const RefParser& g_;
  const Text& s_;
  int over_;
  std::set<std::pair<std::string, int>> active_;
};

std::string utf8(const Text& t) {
  std::string out;
  for (char32_t c : t) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xC0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xE0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (c & 0x3F));
    }
  }
  return out;
}

struct Verdict {
  bool prefix, sentence;
};

Verdict reference(const RefParser& g, const Text& s) {
  Recognizer r(g, s);
  auto e = r.ends(*g.rules.at("root"), 0);
  bool sentence = e.count(static_cast<int>(s.size())) > 0;
  return {sentence || e.count(r.over()) > 0, sentence};
}

struct Case {
  const char* name;
  const char* text;
  Text alphabet;
  bool closed;  // every terminal's characters are in the alphabet: must_end can be checked
  int max_len;  // enumerate every string up to this length
};

const Case kCases[] = {
    {"star_alt_opt", "root ::= (\"a\" | \"b\" \"c\")* \"d\"?", U"abcd", true, 7},
    {"balanced", "root ::= \"(\" root \")\" root | \"\"", U"()", true, 10},
    {"ambiguous_counts", "root ::= x{2,3} y\nx ::= \"a\" | \"ab\"\ny ::= [b-c]+ | \"é\"", U"abcé", false, 7},
    {"nullable_repeat", "root ::= (\"a\"?){2,4} \"b\"", U"ab", true, 8},
    {"nested_stars", "root ::= ((\"a\"*)* | \"b\")+ \"c\"", U"abc", true, 7},
    {"expr", "root ::= expr\nexpr ::= term ((\"+\" | \"*\") term)*\nterm ::= \"a\" | \"(\" expr \")\"", U"a+*()", true, 7},
    {"negation_any", "root ::= [^a] . \"a\"{0,2} [^\\n]?", U"ab\né日", false, 6},
    {"two_continuations", "root ::= s\ns ::= \"a\" s \"b\" | \"a\" s \"c\" | \"\"", U"abc", true, 8},
    {"tail_cycle", "root ::= x\nx ::= \"b\"? x | \"c\"", U"bc", true, 8},
    {"bounded_chain", "root ::= (\"ab\" | \"a\"){1,3} (\"b\"{2,} | \"\")", U"ab", true, 9},
    {"unicode_ranges", "root ::= ([ぁ-ゟ] | \"日本\")+ [0-9]{1,2}", U"ぁゟ日本09x", false, 6},
};

// Compares every state reached by `s`, one code point at a time, starting from `m`.
void compare(const Case& c, const RefParser& ref, const std::shared_ptr<const Grammar>& g, const Text& s) {
  const Verdict want = reference(ref, s);
  GrammarMatcher m(g);
  const std::string bytes = utf8(s);
  ASSERT_EQ(m.accepts(bytes), want.prefix) << c.name << ": " << bytes;
  if (!want.prefix) return;
  m.accept(bytes);
  ASSERT_EQ(m.can_end(), want.sentence) << c.name << ": " << bytes;
  if (c.closed) {
    bool extendable = false;
    for (char32_t x : c.alphabet) extendable = extendable || reference(ref, s + x).prefix;
    ASSERT_EQ(m.must_end(), want.sentence && !extendable) << c.name << ": " << bytes;
  }
}

TEST(GrammarReference, EveryShortString) {
  for (const Case& c : kCases) {
    RefParser ref(c.text);
    auto g = parse_grammar(c.text);
    size_t checked = 0, prefixes = 0, sentences = 0;
    std::function<void(const Text&)> all = [&](const Text& s) {
      compare(c, ref, g, s);
      ++checked;
      const Verdict v = reference(ref, s);
      prefixes += v.prefix;
      sentences += v.sentence;
      if (static_cast<int>(s.size()) < c.max_len && v.prefix)
        for (char32_t x : c.alphabet) all(s + x);
      else if (static_cast<int>(s.size()) < c.max_len)
        for (char32_t x : c.alphabet) compare(c, ref, g, s + x);  // dead ends stay dead
    };
    all(U"");
    // Each grammar must have something to compare: sentences and non-sentences among the strings.
    EXPECT_GT(sentences, 2u) << c.name;
    EXPECT_GT(prefixes, sentences) << c.name;
    std::cout << "[ reference ] " << c.name << ": " << checked << " strings, " << prefixes << " prefixes, " << sentences
              << " sentences\n";
  }
}

TEST(GrammarReference, LongRandomWalks) {
  std::mt19937 rng(12345);
  for (const Case& c : kCases) {
    RefParser ref(c.text);
    auto g = parse_grammar(c.text);
    for (int walk = 0; walk < 30; ++walk) {
      Text s;
      GrammarMatcher m(g);
      for (int step = 0; step < 16; ++step) {
        // Mostly follow the grammar (to get deep), sometimes any character (to test refusals).
        char32_t x = c.alphabet[rng() % c.alphabet.size()];
        if (rng() % 4 != 0) {
          Text viable;
          for (char32_t y : c.alphabet)
            if (reference(ref, s + y).prefix) viable += y;
          if (viable.empty()) break;
          x = viable[rng() % viable.size()];
        }
        const Verdict want = reference(ref, s + x);
        const std::string bytes = utf8(Text(1, x));
        ASSERT_EQ(m.accepts(bytes), want.prefix) << c.name << ": " << utf8(s + x);
        if (!want.prefix) continue;
        m.accept(bytes);
        s += x;
        ASSERT_EQ(m.can_end(), want.sentence) << c.name << ": " << utf8(s);
      }
    }
  }
}

}  // namespace
}  // namespace graft::engine
