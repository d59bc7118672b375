// Unit tests of the tokenizer internals: GPT-2 byte table, UTF-8 handling, NFC, the BPE merge
// core (ranked and scored) and the split regexes.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "graft/core/error.h"
#include "text/tokenizer_internal.h"

namespace detail = graft::text::detail;

TEST(ByteTable, Gpt2Mapping) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) seen.insert(detail::byte_to_unicode(static_cast<uint8_t>(b)));
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(detail::byte_to_unicode('A'), U'A');
  EXPECT_EQ(detail::byte_to_unicode(' '), U'\u0120');   // Ġ
  EXPECT_EQ(detail::byte_to_unicode('\n'), U'\u010A');  // Ċ
  EXPECT_EQ(detail::byte_to_unicode(0xAD), U'\u0143');  // the last remapped byte
  EXPECT_EQ(detail::byte_to_unicode(0xE9), U'\u00E9');
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  std::string enc = detail::byte_level_encode(all), dec;
  EXPECT_TRUE(detail::utf8_valid(enc));
  ASSERT_TRUE(detail::byte_level_decode(enc, dec));
  EXPECT_EQ(dec, all);
  EXPECT_FALSE(detail::byte_level_decode("\xE2\x96\x81", dec));  // "▁" is not in the table
}

TEST(Utf8, LossyAndStreaming) {
  using detail::utf8_lossy;
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("héllo 😀"), "héllo 😀");
  EXPECT_EQ(utf8_lossy("\xE2\x82"), R);                   // truncated: one replacement
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98" "A"), R + "A");     // maximal subpart
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), R + R);               // overlong lead bytes
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), R + R + R);       // surrogate
  EXPECT_EQ(utf8_lossy("\x80\x80"), R + R);
  size_t consumed = 0;
  EXPECT_EQ(utf8_lossy("ab\xF0\x9F\x98", false, &consumed), "ab");
  EXPECT_EQ(consumed, 2u);
  EXPECT_EQ(utf8_lossy("ab\xF0\x41", false, &consumed), "ab" + R + "A");
  EXPECT_EQ(consumed, 4u);
}

TEST(Nfc, Normalize) {
  auto nfc = [](std::string s) {
    detail::nfc_normalize(s);
    return s;
  };
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("caf\u00e9"), "caf\u00e9");
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("\u212B"), "\u00C5");                  // singleton (Angstrom sign)
  EXPECT_EQ(nfc("\u1100\u1161\u11A8"), "\uAC01");      // Hangul L V T
  EXPECT_EQ(nfc("\uAC00\u11A8"), "\uAC01");            // Hangul LV + T
  EXPECT_EQ(nfc("e\u0302\u0323"), "\u1EC7");           // reordered, then composed
  EXPECT_EQ(nfc("a\u0344b"), "\u00E4\u0301b");         // non-starter decomposition
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093C");            // composition exclusion
  EXPECT_EQ(nfc("\u0301e"), "\u0301e");                 // leading combining mark
  EXPECT_EQ(nfc("\u00C5\u0301"), "\u01FA");
  EXPECT_EQ(nfc("\U0001D15E"), "\U0001D157\U0001D165");  // excluded musical symbol
}

TEST(BpeCore, RankOrderAndByteFallback) {
  detail::BpeModel m;
  const char* toks[] = {"a", "b", "c", "ab", "bc", "abc", "aa", "<0xC3>", "<0xA9>", "<unk>"};
  for (int i = 0; i < 10; ++i) m.vocab.emplace(toks[i], i);
  ASSERT_TRUE(m.add_merge("b", "c", 0));
  ASSERT_TRUE(m.add_merge("a", "b", 1));
  ASSERT_TRUE(m.add_merge("a", "a", 2));
  EXPECT_FALSE(m.add_merge("c", "c", 3));  // "cc" is not in the vocab
  m.index_byte_tokens();
  auto tok = [&](std::string_view w) {
    std::vector<int32_t> out;
    m.tokenize(w, out);
    return out;
  };
  // "abc": (b,c) has the better rank, so a + bc; "abc" is never formed ("a bc" is no merge).
  EXPECT_EQ(tok("abc"), (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(tok("aaa"), (std::vector<int32_t>{6, 0}));  // leftmost first on equal rank
  EXPECT_EQ(tok("abab"), (std::vector<int32_t>{3, 3}));
  // Unknown characters: dropped without byte fallback or unk...
  EXPECT_EQ(tok("aé"), (std::vector<int32_t>{0}));
  // ...bytes with byte fallback (when all bytes have tokens)...
  m.byte_fallback = true;
  EXPECT_EQ(tok("aé"), (std::vector<int32_t>{0, 7, 8}));
  // ...else unk, fused when fuse_unk.
  m.unk_id = 9;
  EXPECT_EQ(tok("a€€b"), (std::vector<int32_t>{0, 9, 9, 1}));
  m.fuse_unk = true;
  EXPECT_EQ(tok("a€€b"), (std::vector<int32_t>{0, 9, 1}));
  // ignore_merges: a word that is a vocab entry is taken whole.
  m.ignore_merges = true;
  EXPECT_EQ(tok("abc"), (std::vector<int32_t>{5}));
}

TEST(BpeCore, ScoredMerges) {
  detail::BpeModel m;
  const char* toks[] = {"a", "b", "c", "ab", "bc", "abc"};
  for (int i = 0; i < 6; ++i) m.vocab.emplace(toks[i], i);
  m.use_scores = true;
  m.scores = {0, 0, 0, -1.0f, -2.0f, -0.5f};
  m.index_byte_tokens();
  std::vector<int32_t> out;
  m.tokenize("abc", out);  // ab (-1) beats bc (-2); then ab + c = abc exists
  EXPECT_EQ(out, (std::vector<int32_t>{5}));
  out.clear();
  m.scores = {0, 0, 0, -3.0f, -2.0f, -0.5f};
  m.tokenize("abcx", out);  // bc first, then a + bc = abc; 'x' has no byte token: dropped
  EXPECT_EQ(out, (std::vector<int32_t>{5}));
}

TEST(Regex, SplitPatterns) {
  detail::Regex gpt2(detail::kGpt2Pattern);
  std::string s = "Hello world's  123\n";
  std::vector<std::string> parts;
  for (auto [a, b] : gpt2.find_all(s)) parts.push_back(s.substr(a, b - a));
  EXPECT_EQ(parts, (std::vector<std::string>{"Hello", " world", "'s", " ", " 123", "\n"}));
  detail::Regex llama3(detail::kLlama3Pattern);
  parts.clear();
  s = "x 12345 IT'S";
  for (auto [a, b] : llama3.find_all(s)) parts.push_back(s.substr(a, b - a));
  EXPECT_EQ(parts, (std::vector<std::string>{"x", " ", "123", "45", " IT", "'S"}));
  EXPECT_THROW(detail::Regex("(unclosed"), graft::Error);
}

TEST(PreTokenizer, SplitBehaviorsMatchHf) {
  // Expected pieces from HF tokenizers: Split(" ", behavior, invert).pre_tokenize_str(...).
  using B = detail::SplitBehavior;
  const std::string text = "How  are you doing?";
  auto run = [&](B behavior, bool invert) {
    detail::PreStep st;
    st.kind = detail::PreStep::Split;
    st.re = std::make_shared<detail::Regex>(" ", /*literal=*/true);
    st.behavior = behavior;
    st.invert = invert;
    std::vector<detail::Piece> pieces{{text, true}};
    detail::pretokenize({st}, pieces);
    std::vector<std::string> out;
    for (auto& p : pieces) out.push_back(p.text);
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(run(B::Removed, false), (V{"How", "are", "you", "doing?"}));
  EXPECT_EQ(run(B::Removed, true), (V{" ", " ", " ", " "}));
  EXPECT_EQ(run(B::Isolated, false), (V{"How", " ", " ", "are", " ", "you", " ", "doing?"}));
  EXPECT_EQ(run(B::MergedWithPrevious, false), (V{"How ", " ", "are ", "you ", "doing?"}));
  EXPECT_EQ(run(B::MergedWithPrevious, true), (V{"How", " ", " are", " you", " doing?"}));
  EXPECT_EQ(run(B::MergedWithNext, false), (V{"How", " ", " are", " you", " doing?"}));
  EXPECT_EQ(run(B::MergedWithNext, true), (V{"How ", " ", "are ", "you ", "doing?"}));
  EXPECT_EQ(run(B::Contiguous, false), (V{"How", "  ", "are", " ", "you", " ", "doing?"}));
  EXPECT_EQ(run(B::Contiguous, true), (V{"How", "  ", "are", " ", "you", " ", "doing?"}));

  detail::PreStep meta;
  meta.kind = detail::PreStep::Metaspace;
  meta.re = std::make_shared<detail::Regex>(meta.replacement, true);
  std::vector<detail::Piece> pieces{{"Hey  friend!", true}};
  detail::pretokenize({meta}, pieces);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].text, "\xE2\x96\x81Hey");
  EXPECT_EQ(pieces[1].text, "\xE2\x96\x81");
  EXPECT_EQ(pieces[2].text, "\xE2\x96\x81" "friend!");
}
