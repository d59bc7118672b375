// How long allowed_tokens takes on a 49,152-token vocabulary (SmolLM2's size) for a JSON grammar:
// at fixed states, both cold (a fresh copy of the matcher: nothing cached) and warm, and over a
// whole simulated generation. Prints microseconds per call; never asserts on time (machines and
// sanitizer builds differ), only that the masks are sane.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <random>
#include <set>

#include "graft/engine/grammar.h"

namespace graft::engine {
namespace {

constexpr const char* kJson = R"~(root    ::= ws value ws
value   ::= object | array | string | number | "true" | "false" | "null"
object  ::= "{" ws ( member ( ws "," ws member )* ws )? "}"
member  ::= string ws ":" ws value
array   ::= "[" ws ( value ( ws "," ws value )* ws )? "]"
string  ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number  ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws      ::= [ \t\n\r]*
)~";

// Byte strings shaped like a byte-level BPE vocabulary: every single byte, English-like words and
// subwords with and without a leading space and capitalised, numbers, runs of spaces and newlines,
// code and JSON punctuation, accented and CJK characters, and pieces of multi-byte characters.
std::vector<std::string> synthetic_vocab(size_t size) {
  std::vector<std::string> v;
  std::set<std::string> have;
  auto add = [&](const std::string& t) {
    if (v.size() < size && have.insert(t).second) v.push_back(t);
  };
  for (int b = 0; b < 256; ++b) add(std::string(1, static_cast<char>(b)));
  for (const char* p : {", ", ". ", "\",", "\":", "\": ", "{\"", "\"}", "},", "}}", "]}", "[{", "\":\"", "\", \"",
                        "\n", "\n\n", "\t", "()", "):", "];", "=>", "->", "//", "/*", "*/", "</", "/>", "==", "!=",
                        "\\n", "\\\"", "\\u", "...", "--", "''", "\"\"", "{}", "[]", ");", "\r\n", "\u2019", "\u201c",
                        "\u201d", " \u2014", "\xE2\x80", "\x99", "\xC3", "\xA9", "\xE6\x97", "\xF0\x9F", "\x98\x80"})
    add(p);
  for (int n = 1; n <= 16; ++n) {
    add(std::string(n, ' '));
    add(std::string("\n").append(n, ' '));
  }
  for (int n = 0; n < 1000; ++n) {
    add(std::to_string(n));
    add(std::string(" ").append(std::to_string(n)));
  }
  for (const char* c :
       {"é", "è", "ü", "ö", "ñ", "ç", "à", "ß", "ø", "日", "本", "語", "中", "文", "の", "は", "😀", "👍"}) {
    add(c);
    add(std::string(" ") + c);
  }
  const char* onsets[] = {"", "b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t",
                          "v", "w", "y", "z", "ch", "sh", "th", "st", "tr", "pl", "br", "gr", "qu", "wh"};
  const char* vowels[] = {"a", "e", "i", "o", "u", "ea", "ou", "ai", "io", "ee", "oo", "y"};
  const char* codas[] = {"", "n", "r", "s", "t", "l", "m", "nd", "ng", "st", "ck", "ed", "er", "ing", "tion", "ly", "x"};
  std::mt19937 rng(2024);
  auto pick = [&](auto& arr) { return std::string(arr[rng() % std::size(arr)]); };
  while (v.size() < size) {
    std::string w;
    int syllables = 1 + static_cast<int>(rng() % 3);
    for (int s = 0; s < syllables; ++s) w += pick(onsets) + pick(vowels) + pick(codas);
    switch (rng() % 6) {
      case 0: add(w); break;
      case 1: case 2: add(std::string(" ").append(w)); break;
      case 3: w[0] = static_cast<char>(std::toupper(w[0])); add(w); break;
      case 4: w[0] = static_cast<char>(std::toupper(w[0])); add(std::string(" ").append(w)); break;
      default: add(w.substr(0, 1 + rng() % w.size())); break;  // a subword piece
    }
  }
  return v;
}

double micros_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
}

TEST(GrammarTiming, AllowedTokensOnA49kVocabulary) {
  const auto vocab = synthetic_vocab(49152);
  ASSERT_EQ(vocab.size(), 49152u);
  auto t0 = std::chrono::steady_clock::now();
  TokenTrie trie(vocab);
  std::cout << "[ timing    ] trie: " << trie.size() << " tokens, " << trie.node_count() << " nodes, built in "
            << micros_since(t0) / 1000.0 << " ms\n";
  auto g = parse_grammar(kJson);
  const char* states[] = {"",
                          "{",
                          "{\"na",
                          "{\"name\"",
                          "{\"name\": ",
                          "{\"name\": \"Jo",
                          "{\"name\": \"Jo\", \"age\": 4",
                          "{\"a\": [1, [2, {\"b\": true}",
                          "[[[[[[[[\"deep\""};
  std::vector<uint8_t> allowed;
  for (const char* s : states) {
    GrammarMatcher m(g);
    m.accept(s);
    GrammarMatcher cold(m);  // a copy starts with an empty transition cache
    t0 = std::chrono::steady_clock::now();
    cold.allowed_tokens(trie, allowed);
    const double cold_us = micros_since(t0);
    const size_t n_allowed = static_cast<size_t>(std::count(allowed.begin(), allowed.end(), 1));
    const int reps = 20;
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) cold.allowed_tokens(trie, allowed);
    const double warm_us = micros_since(t0) / reps;
    std::cout << "[ timing    ] after " << testing::PrintToString(std::string(s)) << ": " << n_allowed
              << " tokens allowed; cold " << cold_us << " us, warm " << warm_us << " us per call\n";
    EXPECT_GT(n_allowed, 0u) << s;
    // The mask is right, not only fast: each token against accepts() on an independent copy.
    GrammarMatcher check(m);
    size_t wrong = 0;
    for (size_t t = 0; t < vocab.size(); ++t) wrong += (allowed[t] != 0) != check.accepts(vocab[t]);
    EXPECT_EQ(wrong, 0u) << s;
    RecordProperty(std::string("warm_us_") + std::to_string(&s - states), static_cast<int>(warm_us));
  }
}

TEST(GrammarTiming, SimulatedGeneration) {
  // Greedy "sampling" that follows a target document: at each step the longest allowed token
  // that is a prefix of what is left. Every call goes through allowed_tokens, as in decoding.
  const auto vocab = synthetic_vocab(49152);
  TokenTrie trie(vocab);
  auto g = parse_grammar(kJson);
  std::string doc = "{\"users\": [";
  for (int i = 0; i < 12; ++i) {
    doc += std::string(i ? ", " : "") + "{\"name\": \"User number " + std::to_string(i) + "\", \"age\": " +
           std::to_string(20 + 3 * i) + ", \"tags\": [\"alpha\", \"beta\"], \"active\": " + (i % 2 ? "true" : "false") +
           ", \"score\": -" + std::to_string(i) + ".5e3}";
  }
  doc += "], \"count\": 12}";
  GrammarMatcher m(g);
  std::vector<uint8_t> allowed;
  size_t pos = 0, calls = 0;
  double total = 0, worst = 0;
  while (pos < doc.size()) {
    auto t0 = std::chrono::steady_clock::now();
    m.allowed_tokens(trie, allowed);
    const double us = micros_since(t0);
    total += us;
    worst = std::max(worst, us);
    ++calls;
    size_t best = SIZE_MAX;
    for (size_t t = 0; t < vocab.size(); ++t)
      if (allowed[t] && doc.compare(pos, vocab[t].size(), vocab[t]) == 0 &&
          (best == SIZE_MAX || vocab[t].size() > vocab[best].size()))
        best = t;
    ASSERT_NE(best, SIZE_MAX) << "no allowed token continues the document at byte " << pos;
    m.accept(vocab[best]);
    pos += vocab[best].size();
  }
  EXPECT_TRUE(m.can_end());
  std::cout << "[ timing    ] generation of " << doc.size() << " bytes: " << calls << " calls, mean " << total / calls
            << " us, worst " << worst << " us per call\n";
}

}  // namespace
}  // namespace graft::engine
