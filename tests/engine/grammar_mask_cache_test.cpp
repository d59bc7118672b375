// The matcher's mask cache (GrammarMatcher::allowed_tokens): a cached mask must be exactly the
// mask a walk over the vocabulary gives. Random walks through grammars with bounded repetitions
// (where the cache's key merges positions: every copy left past the longest token looks alike),
// nested ones, lower bounds and recurring states; at every step the mask is compared token by
// token with accepts() on a copy of the matcher (a copy starts with no cache, so it walks).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "graft/engine/grammar.h"

namespace graft::engine {
namespace {

// Single bytes, lowercase words of 2..12 letters (so the longest token is 13 bytes and the cache
// clamps at 14 copies), words with a trailing quote or comma, and a few multi-byte characters.
std::vector<std::string> vocabulary() {
  std::vector<std::string> v;
  for (int b = 1; b < 128; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  std::mt19937 rng(7);
  for (int n = 0; n < 3000; ++n) {
    std::string w(2 + rng() % 11, 'a');
    for (char& c : w) c = static_cast<char>('a' + rng() % 26);
    switch (n % 5) {
      case 0: v.push_back(w + "\""); break;
      case 1: v.push_back(w + ","); break;
      case 2: v.push_back(" " + w); break;
      default: v.push_back(w);
    }
  }
  for (const char* s : {"é", "日本", "\xC3", "\xA9", "\"\"", ",,", "a\"b"}) v.push_back(s);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

struct Walks {
  size_t steps = 0, cached = 0;
};

// `walks` random walks of up to `max_steps` tokens; fails at the first step whose mask differs
// from accepts() for some token.
Walks check_random_walks(const std::string& grammar, int walks, int max_steps) {
  const auto vocab = vocabulary();
  const TokenTrie trie(vocab);
  const auto g = parse_grammar(grammar);
  Walks out;
  std::vector<uint8_t> allowed;
  for (int w = 0; w < walks; ++w) {
    std::mt19937 rng(100 + w);
    GrammarMatcher m(g);
    std::string text;
    for (int step = 0; step < max_steps && !m.must_end(); ++step) {
      m.allowed_tokens(trie, allowed);
      const GrammarMatcher fresh(m);
      std::vector<uint32_t> ids;
      for (size_t t = 0; t < vocab.size(); ++t) {
        const bool want = fresh.accepts(vocab[t]);
        if ((allowed[t] != 0) != want) {
          ADD_FAILURE() << "walk " << w << " after " << testing::PrintToString(text) << ": token "
                        << testing::PrintToString(vocab[t]) << " is " << (want ? "refused" : "allowed")
                        << " by the mask, " << (want ? "accepted" : "refused") << " by the grammar";
          return out;
        }
        if (want) ids.push_back(static_cast<uint32_t>(t));
      }
      ++out.steps;
      if (ids.empty()) break;
      // Mostly long tokens that do not close anything (they reach the bounds fast), sometimes any.
      std::vector<uint32_t> open;
      for (uint32_t id : ids)
        if (vocab[id].find_first_of("\".]") == std::string::npos) open.push_back(id);
      if (open.empty() || rng() % 8 == 0) open = ids;
      std::sort(open.begin(), open.end(), [&](uint32_t a, uint32_t b) { return vocab[a].size() > vocab[b].size(); });
      const size_t pool = rng() % 4 == 0 ? open.size() : std::max<size_t>(1, open.size() / 3);
      const uint32_t id = open[rng() % pool];
      m.accept(vocab[id]);
      text += vocab[id];
    }
    out.cached += m.cached_masks_used();
  }
  return out;
}

TEST(GrammarMaskCache, BoundedStringNearAndFarFromItsBound) {
  const Walks w = check_random_walks(R"(root ::= "\"" [a-z ]{0,120} "\"")", 12, 60);
  EXPECT_GT(w.steps, 40u);
  EXPECT_GT(w.cached, w.steps / 4) << "the positions far from the bound should share one mask";
}

TEST(GrammarMaskCache, LowerAndUpperBounds) {
  check_random_walks(R"(root ::= "\"" [a-z]{20,70} "\"" | "-" [a-z ,]{3,40} ".")", 12, 40);
}

TEST(GrammarMaskCache, NestedRepetitions) {
  // Lists of bounded words: the inner chain restarts inside every copy of the outer one.
  check_random_walks(R"(root ::= "[" ( [a-z]{1,15} "," ){0,30} "]")", 10, 60);
  check_random_walks(R"(root ::= ( ( [a-z]{2,18} ( " " | "," ) ){1,4} "\"" ){0,25})", 10, 60);
}

TEST(GrammarMaskCache, JsonLikeStringsWithEscapes) {
  const char* g = R"(root ::= "{" pair ( "," pair ){0,6} "}"
pair ::= "\"" char{0,25} "\":\"" char{1,200} "\""
char ::= [^"\\\x00-\x1F] | "\\" ["\\/bfnrt])";
  const Walks w = check_random_walks(g, 10, 80);
  EXPECT_GT(w.cached, 0u);
}

TEST(GrammarMaskCache, RecurringStatesWithoutRepetitionBounds) {
  // No bounded repetition: only exact recurrences hit (a state seen before, e.g. after each ",").
  const Walks w = check_random_walks(R"(root ::= ( [a-z]+ "," )* "end")", 6, 50);
  EXPECT_GT(w.cached, 0u);
}

TEST(GrammarMaskCache, ACopyAndAnotherVocabularyStartClean) {
  const auto g = parse_grammar(R"(root ::= [a-z]{0,100})");
  const std::vector<std::string> small = {"a", "b", "ab", "abc"}, other = {"a", "b", "ab", "xyz"};
  const TokenTrie t1(small), t2(other);
  GrammarMatcher m(g);
  std::vector<uint8_t> allowed;
  m.allowed_tokens(t1, allowed);
  m.accept("a");
  m.allowed_tokens(t1, allowed);  // the same clamped key: from the cache
  EXPECT_EQ(m.cached_masks_used(), 1u);
  m.allowed_tokens(t2, allowed);  // another trie: walked, not taken from t1's masks
  EXPECT_EQ(m.cached_masks_used(), 1u);
  EXPECT_EQ(allowed, (std::vector<uint8_t>{1, 1, 1, 1}));
  GrammarMatcher copy(m);
  copy.allowed_tokens(t2, allowed);
  EXPECT_EQ(copy.cached_masks_used(), 0u);
}

}  // namespace
}  // namespace graft::engine
