// The token mask on SmolLM2's real vocabulary (49,152 byte-level BPE tokens, from the GGUF that
// `make models` fetches; skipped without it): the mask equals accepts() token by token at states
// of a JSON document, and the time per allowed_tokens call is printed (never asserted).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "graft/engine/grammar.h"
#include "graft/engine/json_schema.h"
#include "graft/io/gguf.h"
#include "graft/text/gguf_tokenizer.h"
#include "test_paths.h"
#include "support/json_grammar.h"

namespace graft::engine {
namespace {

constexpr const char* kJson = test::kJsonGbnf;

struct SmolVocab {
  std::vector<std::string> bytes;
  std::unique_ptr<text::Tokenizer> tok;
};

SmolVocab smollm2_vocab() {
  auto gguf = io::GgufFile::open(test::smollm2_gguf());
  SmolVocab v;
  v.tok = std::make_unique<text::Tokenizer>(text::Tokenizer::from_spec(text::tokenizer_spec_from_gguf(*gguf)));
  v.bytes.resize(static_cast<size_t>(v.tok->vocab_size()));
  for (int32_t id = 0; id < v.tok->vocab_size(); ++id)
    if (!v.tok->is_special(id)) v.bytes[static_cast<size_t>(id)] = v.tok->token_bytes(id);  // special: never allowed
  return v;
}

// Follows `doc` with the tokenizer's own tokens, checking the mask against accepts() at every state;
// prints the mean and worst time per allowed_tokens call.
void follow_document(const char* what, const std::shared_ptr<const Grammar>& g, const std::string& doc) {
  const SmolVocab sv = smollm2_vocab();
  const std::vector<std::string>& vocab = sv.bytes;
  const text::Tokenizer& tok = *sv.tok;
  auto t0 = std::chrono::steady_clock::now();
  TokenTrie trie(vocab);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ smollm2   ] trie: " << trie.size() << " tokens, " << trie.node_count() << " nodes, longest "
            << trie.max_length() << " bytes, built in " << build_ms << " ms\n";
  GrammarMatcher m(g);
  std::vector<uint8_t> allowed;
  double total = 0, worst = 0;
  std::vector<double> times;
  size_t calls = 0;
  // Follow the document with the tokenizer's own tokens, checking the mask at every state.
  for (int32_t id : tok.encode(doc, false, false)) {
    auto t1 = std::chrono::steady_clock::now();
    m.allowed_tokens(trie, allowed);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count();
    total += us;
    times.push_back(us);
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
  std::sort(times.begin(), times.end());
  std::cout << "[ smollm2   ] " << what << ", " << calls << " tokens: allowed_tokens mean " << total / calls
            << " us, median " << times[times.size() / 2] << " us, worst " << worst << " us per call, " << m.cached_masks_used() << " from the mask cache\n";
}

TEST(GrammarSmolLM2, MaskOnTheRealVocabulary) {
  if (!std::filesystem::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  follow_document("JSON document", parse_grammar(kJson),
                  R"~({"name": "Ada Lovelace", "born": 1815, "tags": ["math", "poetry"], "x": {"y": [true, -0.5e3]}})~");
}

// bench/bench_grammar.py's schema: strings with maxLength 200 and 400 (bounded repetitions, where
// the mask cache serves the characters far from the bound).
TEST(GrammarSmolLM2, MaskAlongBoundedStrings) {
  if (!std::filesystem::exists(test::smollm2_gguf())) GTEST_SKIP() << "run `make models` first";
  const auto schema = nlohmann::ordered_json::parse(R"({"type": "array", "minItems": 2, "maxItems": 2,
    "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 200},
      "story": {"type": "string", "maxLength": 400}}, "required": ["name", "story"], "additionalProperties": false}})");
  std::string story;
  while (story.size() < 380) story += "The ship sailed on through the night, and nobody aboard knew where. ";
  story.resize(380);
  follow_document("maxLength strings", parse_grammar(json_schema_to_gbnf(schema)),
                  "[{\"name\": \"Endeavour\", \"story\": \"" + story + "\"}, {\"name\": \"Beagle\", \"story\": \"" +
                      story.substr(0, 150) + "\"}]");
}

}  // namespace
}  // namespace graft::engine
