// How long allowed_tokens takes on a 49,152-token vocabulary (SmolLM2's size) for a JSON grammar:
// at fixed states, both cold (a fresh copy of the matcher: nothing cached) and warm, and over a
// whole simulated generation (BM_GrammarMask*; was a timing test, now a benchmark). Each state's
// mask is also checked against accepts() once, so a wrong mask is an error, not a fast number.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <set>

#include "graft/engine/grammar.h"
#include "support/json_grammar.h"

namespace graft::engine {
namespace {

constexpr const char* kJson = test::kJsonGbnf;

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

const std::vector<std::string>& vocab49k() {
  static const std::vector<std::string> v = synthetic_vocab(49152);
  return v;
}

const TokenTrie& trie49k() {
  static const TokenTrie t(vocab49k());
  return t;
}

const char* const kStates[] = {"",
                               "{",
                               "{\"na",
                               "{\"name\"",
                               "{\"name\": ",
                               "{\"name\": \"Jo",
                               "{\"name\": \"Jo\", \"age\": 4",
                               "{\"a\": [1, [2, {\"b\": true}",
                               "[[[[[[[[\"deep\""};

// allowed_tokens at one grammar state; cold: on a fresh copy each time (nothing cached).
void BM_GrammarMask(benchmark::State& state) {
  const bool cold = state.range(1) != 0;
  const char* s = kStates[state.range(0)];
  const auto& vocab = vocab49k();
  auto g = parse_grammar(kJson);
  GrammarMatcher m(g);
  m.accept(s);
  std::vector<uint8_t> allowed;
  GrammarMatcher warm(m);
  warm.allowed_tokens(trie49k(), allowed);
  GrammarMatcher check(m);
  for (size_t t = 0; t < vocab.size(); ++t)
    if ((allowed[t] != 0) != check.accepts(vocab[t])) {
      state.SkipWithError("allowed_tokens disagrees with accepts()");
      return;
    }
  for (auto _ : state) {
    if (cold) {
      GrammarMatcher fresh(m);
      fresh.allowed_tokens(trie49k(), allowed);
    } else {
      warm.allowed_tokens(trie49k(), allowed);
    }
    benchmark::DoNotOptimize(allowed.data());
  }
  state.SetLabel(std::string(cold ? "cold " : "warm ") + std::to_string(std::count(allowed.begin(), allowed.end(), 1)) +
                 " allowed");
}
BENCHMARK(BM_GrammarMask)->ArgsProduct({benchmark::CreateDenseRange(0, std::size(kStates) - 1, 1), {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// A whole generation: greedy "sampling" that follows a target document (at each step the longest
// allowed token that is a prefix of what is left); every call goes through allowed_tokens, as in
// decoding. Time per document; calls per document as a counter.
void BM_GrammarMaskGeneration(benchmark::State& state) {
  const auto& vocab = vocab49k();
  auto g = parse_grammar(kJson);
  std::string doc = "{\"users\": [";
  for (int i = 0; i < 12; ++i) {
    doc += std::string(i ? ", " : "") + "{\"name\": \"User number " + std::to_string(i) + "\", \"age\": " +
           std::to_string(20 + 3 * i) + ", \"tags\": [\"alpha\", \"beta\"], \"active\": " + (i % 2 ? "true" : "false") +
           ", \"score\": -" + std::to_string(i) + ".5e3}";
  }
  doc += "], \"count\": 12}";
  std::vector<uint8_t> allowed;
  size_t calls = 0;
  for (auto _ : state) {
    GrammarMatcher m(g);
    size_t pos = 0;
    while (pos < doc.size()) {
      m.allowed_tokens(trie49k(), allowed);
      ++calls;
      size_t best = SIZE_MAX;
      for (size_t t = 0; t < vocab.size(); ++t)
        if (allowed[t] && doc.compare(pos, vocab[t].size(), vocab[t]) == 0 &&
            (best == SIZE_MAX || vocab[t].size() > vocab[best].size()))
          best = t;
      if (best == SIZE_MAX) {
        state.SkipWithError("no allowed token continues the document");
        return;
      }
      m.accept(vocab[best]);
      pos += vocab[best].size();
    }
    if (!m.can_end()) state.SkipWithError("the grammar cannot end after the whole document");
  }
  state.counters["calls_per_doc"] = benchmark::Counter(static_cast<double>(calls), benchmark::Counter::kAvgIterations);
}
BENCHMARK(BM_GrammarMaskGeneration)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace graft::engine
