// Tokenizer: byte-level BPE (GPT-2, Llama-3, Qwen2, SmolLM) and SentencePiece-style BPE with byte
// fallback (Llama-2, Mistral), with added/special tokens. Built from a tokenizer.json or from a
// normalized TokenizerSpec (which the GGUF loader fills from metadata).
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace graft::text {

enum class TokenizerKind {
  ByteLevelBPE,     // bytes mapped to printable unicode (GPT-2 table), regex pre-tokenizer
  SentencePieceBPE  // "▁" for spaces, merges (or scores) ranked, <0xXX> byte fallback
};

// Which regex pre-tokenizer a byte-level BPE uses.
// Gpt2: the GPT-2 regex. Llama3: the Llama-3 regex (digits in groups of 3). Qwen2: the Llama-3
// regex with single digits. SmolLM: each digit split off first, then the GPT-2 regex (HF
// Sequence[Digits(individual_digits), ByteLevel(use_regex)], llama.cpp "smollm"). None: no split.
enum class PreTokenizer { Gpt2, Llama3, Qwen2, SmolLM, None };

struct AddedToken {
  int32_t id;
  std::string content;
  bool special = true;  // special tokens are matched in text only when parse_special is set
  bool lstrip = false, rstrip = false;
};

struct TokenizerSpec {
  TokenizerKind kind = TokenizerKind::ByteLevelBPE;
  PreTokenizer pre = PreTokenizer::Gpt2;
  std::vector<std::string> vocab;  // id -> token text as stored (byte-level encoded or with "▁")
  // Merges in rank order as "left right" pairs. For SentencePiece GGUFs without merges, leave
  // empty and give scores: the merge rank of a pair is then derived from the merged token's score.
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<float> scores;
  std::vector<AddedToken> added;
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  bool add_bos = false;          // prepend BOS when encoding a prompt
  bool add_space_prefix = true;  // SentencePiece: prepend "▁" to the text (Llama-2 behaviour)
  bool add_eos = false;          // append EOS when encoding (rare; follows the add_bos override)
  // Byte-level BPE: a word that is itself a vocab entry is emitted whole, without merging (HF
  // `ignore_merges`). Always on for PreTokenizer::Llama3, as in llama.cpp.
  bool ignore_merges = false;
};

class Tokenizer {
 public:
  static Tokenizer from_spec(TokenizerSpec spec);
  // Reads tokenizer.json (and, if given, tokenizer_config.json for bos/eos/add_bos_token).
  // Supported: model BPE (merges as "a b" or ["a","b"], byte_fallback, fuse_unk, ignore_merges);
  // normalizers Sequence/Prepend/Replace/NFC; pre-tokenizers Sequence/Split/ByteLevel/Digits/
  // Metaspace/Punctuation/WhitespaceSplit; post-processors TemplateProcessing/ByteLevel/Sequence/
  // Roberta/Bert; decoders Sequence/ByteLevel/Replace/ByteFallback/Fuse/Strip/Metaspace. Anything
  // else, a missing or malformed file or an id out of range throws graft::Error naming the file and
  // field. A post-processor template in tokenizer.json decides add_bos (and its BOS id); without
  // one, add_bos_token / add_eos_token of tokenizer_config.json do.
  static Tokenizer from_files(const std::string& tokenizer_json,
                              const std::string& tokenizer_config_json = "");

  // Encodes text. With parse_special, special added tokens in the text become their ids
  // (non-special added tokens always do). add_bos follows the spec / tokenizer files (true for
  // Llama-2/3 style models) unless overridden; an explicit false also drops template suffix ids
  // (HF add_special_tokens=False). Invalid UTF-8 in `text` is encoded as U+FFFD.
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true,
                              std::optional<bool> add_bos = std::nullopt) const;
  // The raw bytes of one token (byte-level / ▁ / <0xXX> decoded); special tokens give their text.
  std::string token_bytes(int32_t id) const;
  // Decodes as HF `tokenizers` does (decoder chain of the tokenizer.json; for SentencePiece the
  // space added before the first word is removed). Special tokens decode to their text unless
  // skip_special. Throws graft::Error for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const;

  int32_t vocab_size() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // The id encode() puts first by default (the BOS it adds), or nullopt when it adds none.
  std::optional<int32_t> added_bos() const;
  std::optional<int32_t> token_id(std::string_view token) const;  // exact vocab/added lookup
  const std::string& token_text(int32_t id) const;                 // as stored in the vocab
  bool is_special(int32_t id) const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  Tokenizer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Streaming decoder: feed ids one at a time; returns only complete UTF-8 characters, holding back
// an incomplete tail until the next token completes it (flush() returns what is left). Bytes that
// can no longer form a character come out as U+FFFD as soon as that is certain. It concatenates
// token_bytes(), so unlike decode() it keeps the space of a leading SentencePiece "▁" (a stream
// continues a prompt).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace graft::text
