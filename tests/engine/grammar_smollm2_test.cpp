// The token mask on SmolLM2's real vocabulary (49,152 byte-level BPE tokens, from the GGUF that
// `make models` fetches; skipped without it): the mask equals accepts() token by token at states
// of a JSON document, and the time per allowed_tokens call is printed (never asserted).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "graft/engine/grammar.h"
#include "graft/io/gguf.h"
#include "graft/text/gguf_tokenizer.h"
#include "test_paths.h"

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

TEST(GrammarSmolLM2, MaskOnTheRealVocabulary) {
  if (!std::filesystem::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  auto gguf = io::GgufFile::open(test::smollm2_gguf());
  text::Tokenizer tok = text::Tokenizer::from_spec(text::tokenizer_spec_from_gguf(*gguf));
  std::vector<std::string> vocab(static_cast<size_t>(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    if (!tok.is_special(id)) vocab[static_cast<size_t>(id)] = tok.token_bytes(id);  // special: never allowed
  auto t0 = std::chrono::steady_clock::now();
  TokenTrie trie(vocab);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ smollm2   ] trie: " << trie.size() << " tokens, " << trie.node_count() << " nodes, built in " << build_ms
            << " ms\n";
  auto g = parse_grammar(kJson);
  const std::string doc =
      R"~({"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"], "x": {"y": [true, -0.5e3]}})~";
  GrammarMatcher m(g);
  std::vector<uint8_t> allowed;
  double total = 0, worst = 0;
  size_t calls = 0;
  // Follow the document with the tokenizer's own tokens, checking the mask at every state.
  for (int32_t id : tok.encode(doc, false, false)) {
    auto t1 = std::chrono::steady_clock::now();
    m.allowed_tokens(trie, allowed);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count();
    total += us;
    worst = std::max(worst, us);
    ++calls;
    GrammarMatcher check(m);
    size_t wrong = 0;
    for (size_t t = 0; t < vocab.size(); ++t) wrong += (allowed[t] != 0) != (!vocab[t].empty() && check.accepts(vocab[t]));
    ASSERT_EQ(wrong, 0u) << "at call " << calls;
    ASSERT_EQ(allowed[static_cast<size_t>(id)], 1) << "the document's own token " << id << " is masked out";
    m.accept(vocab[static_cast<size_t>(id)]);
  }
  EXPECT_TRUE(m.can_end());
  std::cout << "[ smollm2   ] JSON document, " << calls << " tokens: allowed_tokens mean " << total / calls << " us, worst "
            << worst << " us per call\n";
}

}  // namespace
}  // namespace graft::engine
