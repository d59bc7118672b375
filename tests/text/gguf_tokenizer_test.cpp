// Tokenizer specs from GGUF metadata: the real SmolLM2 GGUF against Hugging Face's tokenization of
// the same file (tools/gen_smollm2_tokenizer_fixture.py), and small GGUFs built here for the
// mapping rules and every error.
#include "graft/text/gguf_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>

#include "graft/core/error.h"
#include "gguf_test_writer.h"
#include "test_paths.h"

namespace graft::text {
namespace {

namespace fs = std::filesystem;
using graft::test::GgufBuilder;
using nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\r') out += "\\r";
    else out += c;
  }
  return out;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ids[i]);
  }
  s += ']';
  return s;
}

// ---- SmolLM2 ------------------------------------------------------------------------------------

class SmolLM2Gguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (fs::exists(graft::test::smollm2_gguf())) gguf_ = io::GgufFile::open(graft::test::smollm2_gguf());
  }
  static void TearDownTestSuite() { gguf_.reset(); }
  void SetUp() override {
    if (!gguf_) GTEST_SKIP() << graft::test::smollm2_gguf() << " is missing (run `make models`)";
  }
  static json reference() {
    return json::parse(read_file(graft::test::fixture("smollm2/tokenizer_reference.json")));
  }
  static inline std::shared_ptr<io::GgufFile> gguf_;
};

TEST_F(SmolLM2Gguf, Spec) {
  TokenizerSpec spec = tokenizer_spec_from_gguf(*gguf_);
  json summary = json::parse(read_file(graft::test::fixture("smollm2/gguf_summary.json")));
  EXPECT_EQ(spec.kind, TokenizerKind::ByteLevelBPE);
  EXPECT_EQ(spec.pre, PreTokenizer::SmolLM);
  EXPECT_EQ(spec.vocab.size(), 49152u);
  EXPECT_EQ(spec.vocab[0], "<|endoftext|>");
  EXPECT_EQ(spec.vocab[1], "<|im_start|>");
  ASSERT_EQ(spec.merges.size(), summary["n_merges"].get<size_t>());
  EXPECT_EQ(spec.merges[0], (std::pair<std::string, std::string>{"Ġ", "t"}));
  EXPECT_EQ(spec.merges[4], (std::pair<std::string, std::string>{"Ġ", "Ġ"}));
  EXPECT_TRUE(spec.scores.empty());
  // The 17 CONTROL tokens (ids 0..16) become special added tokens.
  ASSERT_EQ(spec.added.size(), 17u);
  for (int32_t i = 0; i < 17; ++i) {
    EXPECT_EQ(spec.added[i].id, i);
    EXPECT_EQ(spec.added[i].content, spec.vocab[i]);
    EXPECT_TRUE(spec.added[i].special);
  }
  EXPECT_EQ(spec.added[2].content, "<|im_end|>");
  EXPECT_EQ(spec.added[16].content, "<empty_output>");
  EXPECT_EQ(spec.bos_id, 1);
  EXPECT_EQ(spec.eos_id, 2);
  EXPECT_EQ(spec.unk_id, 0);
  EXPECT_EQ(spec.pad_id, 2);
  EXPECT_FALSE(spec.add_bos);
  EXPECT_FALSE(spec.add_eos);
  EXPECT_FALSE(spec.add_space_prefix);

  std::optional<std::string> tmpl = chat_template_from_gguf(*gguf_);
  ASSERT_TRUE(tmpl.has_value());
  EXPECT_EQ(*tmpl, summary["chat_template"].get<std::string>());
  EXPECT_EQ(tmpl->rfind("{% for message in messages %}", 0), 0u);
}

TEST_F(SmolLM2Gguf, EncodeMatchesHuggingFace) {
  Tokenizer tok = Tokenizer::from_spec(tokenizer_spec_from_gguf(*gguf_));
  json ref = reference();
  EXPECT_EQ(tok.vocab_size(), ref["vocab_size"].get<int32_t>());
  EXPECT_EQ(tok.bos_id(), ref["bos_id"].get<int32_t>());
  EXPECT_EQ(tok.eos_id(), ref["eos_id"].get<int32_t>());
  int failures = 0;
  for (const json& c : ref["cases"]) {
    std::string text = c["text"];
    SCOPED_TRACE("text: \"" + escaped(text) + "\"");
    std::vector<int32_t> want = c["ids"];
    std::vector<int32_t> got = tok.encode(text);  // parse_special, BOS per the GGUF (none)
    EXPECT_EQ(ids_str(got), ids_str(want)) << "encode";
    std::vector<int32_t> want_plain = c["ids_no_special"];
    std::vector<int32_t> got_plain = tok.encode(text, /*parse_special=*/false);
    EXPECT_EQ(ids_str(got_plain), ids_str(want_plain)) << "encode without special tokens";
    EXPECT_EQ(tok.decode(want), c["decoded"].get<std::string>()) << "decode of the reference ids";
    failures += (got != want) + (got_plain != want_plain);
  }
  EXPECT_EQ(failures, 0);
}

TEST_F(SmolLM2Gguf, SpecialTokens) {
  Tokenizer tok = Tokenizer::from_spec(tokenizer_spec_from_gguf(*gguf_));
  EXPECT_EQ(tok.token_id("<|im_start|>"), 1);
  EXPECT_EQ(tok.token_id("<|im_end|>"), 2);
  EXPECT_TRUE(tok.is_special(1));
  EXPECT_TRUE(tok.is_special(16));
  EXPECT_FALSE(tok.is_special(17));
  EXPECT_EQ(tok.encode("<|im_start|>", true), std::vector<int32_t>{1});
  EXPECT_EQ(tok.encode("hi", true, /*add_bos=*/true), (std::vector<int32_t>{1, tok.encode("hi")[0]}));
}

// ---- small GGUFs built here ---------------------------------------------------------------------

class GgufTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("graft_gguf_tok_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::shared_ptr<io::GgufFile> open(const GgufBuilder& b) {
    std::string name = std::to_string(n_++);
    name += ".gguf";
    std::string path = (dir_ / name).string();
    std::string bytes = b.build();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return io::GgufFile::open(path);
  }
  // tokenizer_spec_from_gguf must throw a graft::Error naming the file and containing `parts`.
  void expect_error(const GgufBuilder& b, std::initializer_list<std::string_view> parts) {
    auto g = open(b);
    try {
      tokenizer_spec_from_gguf(*g);
      ADD_FAILURE() << "expected an error containing '" << *parts.begin() << "'";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(g->path()), std::string::npos) << msg;
      for (auto p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "expected '" << p << "' in: " << msg;
    }
  }
  fs::path dir_;
  int n_ = 0;
};

// A byte-level BPE vocabulary: tokens, types, merges.
GgufBuilder gpt2_builder(std::string_view pre = "gpt-2") {
  GgufBuilder b;
  b.kv_string("tokenizer.ggml.model", "gpt2");
  if (!pre.empty()) b.kv_string("tokenizer.ggml.pre", pre);
  b.kv_strings("tokenizer.ggml.tokens", {"<|end|>", "a", "b", "ab", "Ġ", "Ġab", "<extra>", "<unk>"});
  b.kv_i32s("tokenizer.ggml.token_type", {3, 1, 1, 1, 1, 1, 4, 2});
  b.kv_strings("tokenizer.ggml.merges", {"a b", "Ġ ab"});
  b.kv_u32("tokenizer.ggml.eos_token_id", 0);
  return b;
}

// A SentencePiece vocabulary with scores.
GgufBuilder llama_builder() {
  GgufBuilder b;
  b.kv_string("tokenizer.ggml.model", "llama");
  b.kv_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<0x0A>", "▁", "▁a", "a", "<pad>"});
  b.kv_i32s("tokenizer.ggml.token_type", {2, 3, 3, 6, 1, 1, 1, 5});
  b.kv_f32s("tokenizer.ggml.scores", {0, 0, 0, 0, -1, -2, -3, 0});
  b.kv_u32("tokenizer.ggml.bos_token_id", 1);
  b.kv_u32("tokenizer.ggml.eos_token_id", 2);
  b.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  return b;
}

TEST_F(GgufTokenizerTest, Gpt2Mapping) {
  auto g = open(gpt2_builder());
  TokenizerSpec s = tokenizer_spec_from_gguf(*g);
  EXPECT_EQ(s.kind, TokenizerKind::ByteLevelBPE);
  EXPECT_EQ(s.pre, PreTokenizer::Gpt2);
  EXPECT_EQ(s.vocab.size(), 8u);
  ASSERT_EQ(s.merges.size(), 2u);
  EXPECT_EQ(s.merges[1], (std::pair<std::string, std::string>{"Ġ", "ab"}));
  ASSERT_EQ(s.added.size(), 3u);
  EXPECT_EQ(s.added[0].id, 0);  // CONTROL -> special
  EXPECT_TRUE(s.added[0].special);
  EXPECT_EQ(s.added[1].id, 6);  // USER_DEFINED -> not special (always matched)
  EXPECT_EQ(s.added[1].content, "<extra>");
  EXPECT_FALSE(s.added[1].special);
  EXPECT_EQ(s.added[2].id, 7);  // UNKNOWN -> special
  EXPECT_TRUE(s.added[2].special);
  EXPECT_EQ(s.eos_id, 0);
  EXPECT_EQ(s.bos_id, std::nullopt);
  EXPECT_FALSE(s.add_bos);
  EXPECT_FALSE(s.add_space_prefix);
  EXPECT_EQ(chat_template_from_gguf(*g), std::nullopt);
}

TEST_F(GgufTokenizerTest, PreTokenizerNames) {
  const std::pair<const char*, PreTokenizer> cases[] = {
      {"default", PreTokenizer::Gpt2},    {"gpt-2", PreTokenizer::Gpt2},    {"llama-bpe", PreTokenizer::Llama3},
      {"llama3", PreTokenizer::Llama3},   {"qwen2", PreTokenizer::Qwen2},   {"smollm", PreTokenizer::SmolLM},
  };
  for (const auto& [name, pre] : cases) {
    SCOPED_TRACE(name);
    EXPECT_EQ(tokenizer_spec_from_gguf(*open(gpt2_builder(name))).pre, pre);
  }
  // Absent: llama.cpp's "default".
  EXPECT_EQ(tokenizer_spec_from_gguf(*open(gpt2_builder(""))).pre, PreTokenizer::Gpt2);
  expect_error(gpt2_builder("deepseek-coder"),
               {"tokenizer.ggml.pre 'deepseek-coder' is not a pre-tokenizer graft supports",
                "supported: default, gpt-2, llama-bpe, llama3", "qwen2", "smollm"});
}

TEST_F(GgufTokenizerTest, Llama3DefaultsToBos) {
  GgufBuilder b = gpt2_builder("llama-bpe");
  b.kv_u32("tokenizer.ggml.bos_token_id", 1);
  EXPECT_TRUE(tokenizer_spec_from_gguf(*open(b)).add_bos);
  b.kv_bool("tokenizer.ggml.add_bos_token", false);
  EXPECT_FALSE(tokenizer_spec_from_gguf(*open(b)).add_bos);
}

TEST_F(GgufTokenizerTest, FlagsAndTemplate) {
  GgufBuilder b = gpt2_builder();
  b.kv_u32("tokenizer.ggml.bos_token_id", 1);
  b.kv_u32("tokenizer.ggml.padding_token_id", 3);
  b.kv_bool("tokenizer.ggml.add_bos_token", true);
  b.kv_bool("tokenizer.ggml.add_eos_token", true);
  b.kv_bool("tokenizer.ggml.add_space_prefix", true);
  b.kv_string("tokenizer.chat_template", "{{ messages }}");
  auto g = open(b);
  TokenizerSpec s = tokenizer_spec_from_gguf(*g);
  EXPECT_TRUE(s.add_bos);
  EXPECT_TRUE(s.add_eos);
  EXPECT_TRUE(s.add_space_prefix);
  EXPECT_EQ(s.bos_id, 1);
  EXPECT_EQ(s.pad_id, 3);
  EXPECT_EQ(chat_template_from_gguf(*g), "{{ messages }}");
}

TEST_F(GgufTokenizerTest, LlamaSentencePieceMapping) {
  auto g = open(llama_builder());
  TokenizerSpec s = tokenizer_spec_from_gguf(*g);
  EXPECT_EQ(s.kind, TokenizerKind::SentencePieceBPE);
  EXPECT_EQ(s.pre, PreTokenizer::None);
  EXPECT_TRUE(s.merges.empty());
  ASSERT_EQ(s.scores.size(), 8u);
  EXPECT_EQ(s.scores[6], -3.0f);
  EXPECT_TRUE(s.add_bos);            // SentencePiece default
  EXPECT_TRUE(s.add_space_prefix);   // SentencePiece default
  ASSERT_EQ(s.added.size(), 3u);     // <unk> (UNKNOWN), <s>, </s> (CONTROL); not BYTE or UNUSED
  EXPECT_EQ(s.added[0].content, "<unk>");
  EXPECT_EQ(s.added[1].content, "<s>");
  EXPECT_EQ(s.added[2].content, "</s>");
  for (const auto& a : s.added) EXPECT_TRUE(a.special);
  EXPECT_EQ(s.unk_id, 0);

  GgufBuilder b = llama_builder();
  b.kv_bool("tokenizer.ggml.add_space_prefix", false);
  b.kv_bool("tokenizer.ggml.add_bos_token", false);
  s = tokenizer_spec_from_gguf(*open(b));
  EXPECT_FALSE(s.add_space_prefix);
  EXPECT_FALSE(s.add_bos);
}

TEST_F(GgufTokenizerTest, MissingTokenizer) {
  GgufBuilder b;
  b.kv_string("general.architecture", "llama");
  auto g = open(b);
  try {
    tokenizer_spec_from_gguf(*g);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "GGUF '" + g->path() + "' has no tokenizer (tokenizer.ggml.model missing)");
  }
  EXPECT_EQ(chat_template_from_gguf(*g), std::nullopt);
}

TEST_F(GgufTokenizerTest, Errors) {
  GgufBuilder b;
  b.kv_string("tokenizer.ggml.model", "bert");
  expect_error(b, {"tokenizer.ggml.model 'bert' is not a tokenizer graft supports", "gpt2", "llama"});

  GgufBuilder c;
  c.kv_string("tokenizer.ggml.model", "gpt2");
  expect_error(c, {"'tokenizer.ggml.tokens' is missing"});

  GgufBuilder d;
  d.kv_u32("tokenizer.ggml.model", 2);
  expect_error(d, {"'tokenizer.ggml.model' has type uint32, expected a string"});

  GgufBuilder e = gpt2_builder();
  e.kvs.erase(e.kvs.begin() + 4);  // the merges
  expect_error(e, {"'tokenizer.ggml.merges' is missing or empty"});

  GgufBuilder f = gpt2_builder();
  f.kvs[3] = GgufBuilder().kv_i32s("tokenizer.ggml.token_type", {1, 1}).kvs[0];
  expect_error(f, {"'tokenizer.ggml.token_type' has 2 entries, but there are 8 tokens"});

  GgufBuilder g = gpt2_builder();
  g.kvs[3] = GgufBuilder().kv_i32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 9}).kvs[0];
  expect_error(g, {"'tokenizer.ggml.token_type' entry 7 (token '<unk>') is 9, expected 0..6"});

  GgufBuilder h = gpt2_builder();
  h.kv_u32("tokenizer.ggml.bos_token_id", 8);
  expect_error(h, {"'tokenizer.ggml.bos_token_id' is 8, outside the vocabulary [0, 8)"});

  GgufBuilder i = gpt2_builder();
  i.kvs[4] = GgufBuilder().kv_strings("tokenizer.ggml.merges", {"a b", "ab"}).kvs[0];
  expect_error(i, {"'tokenizer.ggml.merges' entry 1 'ab' is not a \"left right\" pair"});

  GgufBuilder j = gpt2_builder();
  j.kv_bool("tokenizer.ggml.add_bos_token", true);
  expect_error(j, {"'tokenizer.ggml.add_bos_token' is true but 'tokenizer.ggml.bos_token_id' is missing"});

  GgufBuilder k = llama_builder();
  k.kvs[3] = GgufBuilder().kv_f32s("tokenizer.ggml.scores", {0, 1}).kvs[0];
  expect_error(k, {"'tokenizer.ggml.scores' has 2 entries, but there are 8 tokens"});

  GgufBuilder l = llama_builder();
  l.kvs.erase(l.kvs.begin() + 3);  // the scores
  expect_error(l, {"neither 'tokenizer.ggml.scores' nor 'tokenizer.ggml.merges'"});

  // A bogus padding id is dropped, not refused.
  GgufBuilder m = gpt2_builder();
  m.kv_u32("tokenizer.ggml.padding_token_id", 4294967295u);
  EXPECT_EQ(tokenizer_spec_from_gguf(*open(m)).pad_id, std::nullopt);
}

}  // namespace
}  // namespace graft::text
