// Tokenizer tests: encode/decode against references produced by HF `tokenizers`
// (tools/gen_tokenizer_fixtures.py), streaming decode, added/special tokens, errors, and unit
// tests of the byte table, UTF-8 handling and the BPE core.
#include "graft/text/tokenizer.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "graft/core/error.h"
#include "test_paths.h"
#include "text/tokenizer_internal.h"
#include "support/errors.h"

using graft::text::StreamDecoder;
using graft::text::Tokenizer;
using graft::text::TokenizerKind;
using graft::text::TokenizerSpec;
using json = nlohmann::json;
namespace detail = graft::text::detail;

namespace {

std::string dir(const std::string& name) { return graft::test::fixture("tokenizers/" + name); }

json read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return json::parse(f);
}

Tokenizer load(const std::string& name) {
  std::string cfg = dir(name) + "/tokenizer_config.json";
  bool has_cfg = std::ifstream(cfg).good();
  return Tokenizer::from_files(dir(name) + "/tokenizer.json", has_cfg ? cfg : "");
}

std::vector<int32_t> ids_of(const json& j) { return j.get<std::vector<int32_t>>(); }

// Writes `text` to a temp file and returns its path.
std::string temp_file(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/graft_tok_" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string error_of(const std::function<void()>& f) { return graft::test::message_of(f); }

const char* const kFixtures[] = {"tiny_bpe",       "tiny_spm",        "tiny_bpe_gpt2",
                                 "tiny_bpe_smollm", "tiny_bpe_qwen2", "tiny_spm_metaspace",
                                 "tiny_bpe_punct"};

}  // namespace

// ---- Reference fixtures ----------------------------------------------------------------------

class TokenizerFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(TokenizerFixture, EncodeMatchesReference) {
  Tokenizer tok = load(GetParam());
  json ref = read_json(dir(GetParam()) + "/reference.json");
  EXPECT_EQ(tok.vocab_size(), ref["vocab_size"].get<int32_t>());
  for (const json& c : ref["cases"]) {
    std::string text = c["text"];
    EXPECT_EQ(tok.encode(text), ids_of(c["ids"])) << "text: " << text;
    EXPECT_EQ(tok.encode(text, true, false), ids_of(c["ids_no_bos"])) << "text: " << text;
    EXPECT_EQ(tok.encode(text, false, false), ids_of(c["ids_no_special"])) << "text: " << text;
  }
}

TEST_P(TokenizerFixture, DecodeMatchesReference) {
  Tokenizer tok = load(GetParam());
  json ref = read_json(dir(GetParam()) + "/reference.json");
  for (const json& c : ref["cases"]) {
    std::string text = c["text"];
    EXPECT_EQ(tok.decode(ids_of(c["ids"])), c["decoded"].get<std::string>()) << "text: " << text;
    EXPECT_EQ(tok.decode(ids_of(c["ids"]), true), c["decoded_skip_special"].get<std::string>())
        << "text: " << text;
    EXPECT_EQ(tok.decode(ids_of(c["ids_no_special"])), c["decoded_no_special"].get<std::string>())
        << "text: " << text;
  }
}

TEST_P(TokenizerFixture, StreamingNeverSplitsCharacters) {
  Tokenizer tok = load(GetParam());
  bool spm = std::string(GetParam()).find("spm") != std::string::npos;
  json ref = read_json(dir(GetParam()) + "/reference.json");
  std::set<int32_t> added;
  json tj = read_json(dir(GetParam()) + "/tokenizer.json");
  for (const json& a : tj["added_tokens"]) added.insert(a["id"].get<int32_t>());
  for (const json& c : ref["cases"]) {
    std::vector<int32_t> ids = ids_of(c["ids_no_bos"]);
    StreamDecoder sd(tok);
    std::string all;
    for (int32_t id : ids) {
      std::string piece = sd.push(id);
      EXPECT_TRUE(detail::utf8_valid(piece)) << "text: " << c["text"];
      all += piece;
    }
    all += sd.flush();
    std::string want = tok.decode(ids);
    // SentencePiece decode strips the space the normalizer put before the first word; a stream
    // continues text, so it keeps it.
    if (spm && !all.empty() && all[0] == ' ' && (want.empty() || want[0] != ' ' || all.substr(1) == want)) {
      all.erase(0, 1);
    }
    if (want.find("\xEF\xBF\xBD") == std::string::npos) {
      EXPECT_EQ(all, want) << "text: " << c["text"];
    }
    // Round trip: text encoded without added tokens comes back (added tokens may strip spaces
    // and SentencePiece puts a space after them).
    bool has_added = false;
    for (int32_t id : ids) has_added = has_added || added.count(id);
    // Lossy by design: SentencePiece cannot tell a "▁" in the input from a space, the legacy
    // Metaspace layout drops a leading space, and tiny_bpe_punct drops whitespace.
    std::string text = c["text"];
    std::string name = GetParam();
    bool lossy = (spm && text.find("\xE2\x96\x81") != std::string::npos) ||
                 (name == "tiny_spm_metaspace" && text.starts_with(" ")) || name == "tiny_bpe_punct";
    if (name == "tiny_bpe_qwen2") detail::nfc_normalize(text);  // its normalizer
    if (!has_added && !lossy) {
      EXPECT_EQ(want, text) << "round trip";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizerFixture, ::testing::ValuesIn(kFixtures));

// ---- Specific behaviour ----------------------------------------------------------------------

TEST(Tokenizer, FixtureMetadata) {
  Tokenizer bpe = load("tiny_bpe");
  EXPECT_FALSE(bpe.bos_id().has_value());
  ASSERT_TRUE(bpe.eos_id().has_value());
  EXPECT_EQ(bpe.token_text(*bpe.eos_id()), "<|im_end|>");
  EXPECT_TRUE(bpe.is_special(*bpe.eos_id()));
  EXPECT_EQ(bpe.token_id("<|im_start|>"), 1);
  EXPECT_FALSE(bpe.token_id("no such token").has_value());
  EXPECT_EQ(bpe.token_bytes(*bpe.token_id("\xC4\xA0the")), " the");  // "Ġthe"
  EXPECT_EQ(bpe.token_bytes(*bpe.token_id("\xC4\x8A")), "\n");       // "Ċ"

  Tokenizer spm = load("tiny_spm");
  EXPECT_EQ(spm.bos_id(), 1);
  EXPECT_EQ(spm.eos_id(), 2);
  EXPECT_EQ(spm.encode("Hi").front(), 1);
  EXPECT_NE(spm.encode("Hi", true, false).front(), 1);
  EXPECT_EQ(spm.token_bytes(*spm.token_id("<0x0A>")), "\n");
  EXPECT_EQ(spm.token_bytes(*spm.token_id("\xE2\x96\x81the")), " the");
  EXPECT_EQ(spm.token_bytes(1), "<s>");
  EXPECT_TRUE(spm.is_special(1));
  EXPECT_FALSE(spm.is_special(*spm.token_id("<0x0A>")));
}

TEST(Tokenizer, ParseSpecialOnOff) {
  Tokenizer tok = load("tiny_bpe");
  int32_t start = *tok.token_id("<|im_start|>"), end = *tok.token_id("<|im_end|>");
  auto with = tok.encode("<|im_start|>user\nhi<|im_end|>", true);
  auto without = tok.encode("<|im_start|>user\nhi<|im_end|>", false);
  EXPECT_EQ(with.front(), start);
  EXPECT_EQ(with.back(), end);
  for (int32_t id : without) {
    EXPECT_FALSE(tok.is_special(id));
  }
  EXPECT_EQ(tok.decode(without), "<|im_start|>user\nhi<|im_end|>");
}

TEST(Tokenizer, AddedTokenStripping) {
  // tiny_bpe_gpt2: "<mask>" (special, lstrip) and "hello world" (not special, rstrip).
  Tokenizer tok = load("tiny_bpe_gpt2");
  int32_t mask = *tok.token_id("<mask>"), hw = *tok.token_id("hello world");
  auto ids = tok.encode("a   <mask>b");
  ASSERT_EQ(ids.size(), 3u);  // "a", <mask> (swallowing the spaces), "b"
  EXPECT_EQ(ids[1], mask);
  ids = tok.encode("hello world   x", false);  // not special: matched even without parse_special
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids[0], hw);
  EXPECT_EQ(tok.decode({ids[1]}), "x");  // the spaces went with the token
}

TEST(Tokenizer, StreamHoldsBackPartialCharacters) {
  Tokenizer tok = load("tiny_spm");
  // "😀" is not in the vocabulary: four <0xXX> byte tokens.
  std::vector<int32_t> ids = tok.encode("😀", true, false);
  std::vector<int32_t> bytes(ids.end() - 4, ids.end());
  StreamDecoder sd(tok);
  for (int32_t id : ids) {
    if (id == bytes.back()) break;
    std::string s = sd.push(id);
    EXPECT_TRUE(s.empty() || s == " ") << s;
  }
  EXPECT_EQ(sd.push(bytes.back()), "😀");
  EXPECT_EQ(sd.flush(), "");

  // An invalid continuation: the held lead byte becomes U+FFFD once it cannot complete.
  StreamDecoder bad(tok);
  EXPECT_EQ(bad.push(*tok.token_id("<0xF0>")), "");
  EXPECT_EQ(bad.push(*tok.token_id("<0x41>")), "\xEF\xBF\xBD" "A");
  EXPECT_EQ(bad.push(*tok.token_id("<0xE4>")), "");
  EXPECT_EQ(bad.flush(), "\xEF\xBF\xBD");

  // Byte-level: CJK characters split across byte-level tokens.
  Tokenizer bpe = load("tiny_bpe");
  std::string text = "日本語のテキスト😀";
  StreamDecoder s2(bpe);
  std::string all;
  for (int32_t id : bpe.encode(text)) {
    std::string piece = s2.push(id);
    EXPECT_TRUE(detail::utf8_valid(piece));
    all += piece;
  }
  EXPECT_EQ(all + s2.flush(), text);
}

TEST(Tokenizer, InvalidUtf8InputIsReplaced) {
  Tokenizer tok = load("tiny_bpe");
  EXPECT_EQ(tok.decode(tok.encode("a\xFF" "b")), "a\xEF\xBF\xBD" "b");
}

TEST(Tokenizer, LongInputsAndThreads) {
  Tokenizer tok = load("tiny_bpe");
  std::string big;
  for (int i = 0; i < 2000; ++i) big += "The quick brown fox 123 jumps; café 😀\n\t  ";
  big += std::string(20000, ' ') + "x" + std::string(5000, '\n');
  std::vector<int32_t> ref = tok.encode(big);
  EXPECT_EQ(tok.decode(ref), big);
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { ok[t] = tok.encode(big) == ref; });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_TRUE(ok[t]);

  Tokenizer spm = load("tiny_spm");
  std::string sbig;
  for (int i = 0; i < 500; ++i) sbig += "The quick brown fox 123 jumps; café 😀 ";
  EXPECT_EQ(spm.decode(spm.encode(sbig, true, false)), sbig);
}

// ---- From a spec (the GGUF path) ---------------------------------------------------------------

namespace {

// A spec with the vocabulary, merges and added tokens of a fixture's tokenizer.json.
TokenizerSpec spec_from_fixture(const std::string& name, TokenizerKind kind) {
  json j = read_json(dir(name) + "/tokenizer.json");
  TokenizerSpec spec;
  spec.kind = kind;
  int32_t n = 0;
  for (auto& [k, v] : j["model"]["vocab"].items()) n = std::max(n, v.get<int32_t>() + 1);
  for (const json& a : j["added_tokens"]) n = std::max(n, a["id"].get<int32_t>() + 1);
  spec.vocab.resize(n);
  for (auto& [k, v] : j["model"]["vocab"].items()) spec.vocab[v.get<int32_t>()] = k;
  for (const json& a : j["added_tokens"]) {
    graft::text::AddedToken t{a["id"], a["content"], a["special"]};
    t.lstrip = a["lstrip"];
    t.rstrip = a["rstrip"];
    spec.vocab[t.id] = t.content;
    spec.added.push_back(t);
  }
  for (const json& m : j["model"]["merges"]) spec.merges.emplace_back(m[0], m[1]);
  return spec;
}

// The GGUF path has no normalizer (llama.cpp applies none); `nfc` normalizes the input first
// to compare with a tokenizer.json that has the NFC normalizer.
void expect_spec_matches(const Tokenizer& tok, const std::string& name, bool nfc = false) {
  json ref = read_json(dir(name) + "/reference.json");
  for (const json& c : ref["cases"]) {
    std::string text = c["text"];
    if (nfc) detail::nfc_normalize(text);
    EXPECT_EQ(tok.encode(text), ids_of(c["ids"])) << name << " text: " << text;
    EXPECT_EQ(tok.encode(text, false, false), ids_of(c["ids_no_special"])) << name << " text: " << text;
    EXPECT_EQ(tok.decode(ids_of(c["ids"])), c["decoded"].get<std::string>()) << name << " text: " << text;
  }
}

}  // namespace

TEST(TokenizerSpec, ByteLevelPreTokenizers) {
  using graft::text::PreTokenizer;
  TokenizerSpec gpt2 = spec_from_fixture("tiny_bpe_gpt2", TokenizerKind::ByteLevelBPE);
  gpt2.pre = PreTokenizer::Gpt2;
  expect_spec_matches(Tokenizer::from_spec(gpt2), "tiny_bpe_gpt2");

  TokenizerSpec smol = spec_from_fixture("tiny_bpe_smollm", TokenizerKind::ByteLevelBPE);
  smol.pre = PreTokenizer::SmolLM;
  expect_spec_matches(Tokenizer::from_spec(smol), "tiny_bpe_smollm");

  TokenizerSpec qwen = spec_from_fixture("tiny_bpe_qwen2", TokenizerKind::ByteLevelBPE);
  qwen.pre = PreTokenizer::Qwen2;
  qwen.ignore_merges = true;
  qwen.bos_id = 0;
  qwen.add_bos = true;
  expect_spec_matches(Tokenizer::from_spec(qwen), "tiny_bpe_qwen2", /*nfc=*/true);

  TokenizerSpec llama3 = spec_from_fixture("tiny_bpe", TokenizerKind::ByteLevelBPE);
  llama3.pre = PreTokenizer::Llama3;
  expect_spec_matches(Tokenizer::from_spec(llama3), "tiny_bpe");
}

TEST(TokenizerSpec, SentencePieceWithMerges) {
  TokenizerSpec spec = spec_from_fixture("tiny_spm", TokenizerKind::SentencePieceBPE);
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  spec.add_bos = true;
  expect_spec_matches(Tokenizer::from_spec(spec), "tiny_spm");
}

TEST(TokenizerSpec, SentencePieceWithScoresOnly) {
  // llama.cpp's SPM path: no merges, a score per token. Scores from merge order (earlier merge,
  // higher score) reproduce the BPE segmentation for this vocabulary.
  TokenizerSpec spec = spec_from_fixture("tiny_spm", TokenizerKind::SentencePieceBPE);
  spec.scores.assign(spec.vocab.size(), 0.0f);
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    std::string merged = spec.merges[r].first + spec.merges[r].second;
    for (size_t i = 0; i < spec.vocab.size(); ++i) {
      if (spec.vocab[i] == merged) spec.scores[i] = -static_cast<float>(r);
    }
  }
  spec.merges.clear();
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.unk_id = 0;
  spec.add_bos = true;
  expect_spec_matches(Tokenizer::from_spec(spec), "tiny_spm");
}

TEST(TokenizerSpec, Errors) {
  TokenizerSpec empty;
  EXPECT_NE(error_of([&] { Tokenizer::from_spec(empty); }).find("empty vocabulary"), std::string::npos);
  TokenizerSpec bad = spec_from_fixture("tiny_bpe", TokenizerKind::ByteLevelBPE);
  bad.bos_id = 100000;
  EXPECT_NE(error_of([&] { Tokenizer::from_spec(bad); }).find("bos_id"), std::string::npos);
  TokenizerSpec spm = spec_from_fixture("tiny_spm", TokenizerKind::SentencePieceBPE);
  spm.merges.clear();
  EXPECT_NE(error_of([&] { Tokenizer::from_spec(spm); }).find("score"), std::string::npos);
}

// ---- Errors ------------------------------------------------------------------------------------

TEST(TokenizerErrors, MissingFile) {
  std::string msg = error_of([] { Tokenizer::from_files("/nonexistent/tokenizer.json"); });
  EXPECT_NE(msg.find("/nonexistent/tokenizer.json"), std::string::npos) << msg;
  msg = error_of([] { Tokenizer::from_files(dir("tiny_bpe") + "/tokenizer.json", "/nonexistent/cfg.json"); });
  EXPECT_NE(msg.find("/nonexistent/cfg.json"), std::string::npos) << msg;
}

TEST(TokenizerErrors, InvalidJson) {
  std::string path = temp_file("bad.json", "{\"model\": {\"type\": \"BPE\", ");
  std::string msg = error_of([&] { Tokenizer::from_files(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
}

TEST(TokenizerErrors, UnsupportedComponents) {
  json base = read_json(dir("tiny_bpe") + "/tokenizer.json");
  struct Case {
    const char* name;
    const char* field;
    json value;
    const char* expect;
  } cases[] = {
      {"unigram", "model", json{{"type", "Unigram"}, {"vocab", json::array()}}, "Unigram"},
      {"pretok", "pre_tokenizer", json{{"type", "Whitespace"}}, "Whitespace"},
      {"norm", "normalizer", json{{"type", "NFKC"}}, "NFKC"},
      {"dec", "decoder", json{{"type", "WordPiece"}}, "WordPiece"},
      {"post", "post_processor", json{{"type", "Fancy"}}, "Fancy"},
  };
  for (const Case& c : cases) {
    json j = base;
    j[c.field] = c.value;
    std::string path = temp_file(std::string(c.name) + ".json", j.dump());
    std::string msg = error_of([&] { Tokenizer::from_files(path); });
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
  }
}

TEST(TokenizerErrors, BadIdsAndFields) {
  json base = read_json(dir("tiny_bpe") + "/tokenizer.json");
  json j = base;
  j["added_tokens"][0]["id"] = -5;
  std::string path = temp_file("neg.json", j.dump());
  std::string msg = error_of([&] { Tokenizer::from_files(path); });
  EXPECT_NE(msg.find("added_tokens[0].id"), std::string::npos) << msg;

  j = base;
  j["model"]["merges"].push_back("zzz qqq");
  path = temp_file("merge.json", j.dump());
  msg = error_of([&] { Tokenizer::from_files(path); });
  EXPECT_NE(msg.find("model.merges["), std::string::npos) << msg;

  path = temp_file("cfg.json", R"({"bos_token": {"content": "<nope>"}})");
  msg = error_of([&] { Tokenizer::from_files(dir("tiny_bpe") + "/tokenizer.json", path); });
  EXPECT_NE(msg.find("bos_token"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;

  Tokenizer tok = load("tiny_bpe");
  msg = error_of([&] { tok.decode({1, 5, 99999}); });
  EXPECT_NE(msg.find("99999"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { tok.token_bytes(-1); }), "");
  EXPECT_NE(error_of([&] { tok.token_text(tok.vocab_size()); }), "");
}
