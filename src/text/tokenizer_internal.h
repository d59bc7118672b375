// Internals of the tokenizer, shared by src/text/tokenizer*.cpp and the unit tests. Not part of
// the public interface.
//
// The encode pipeline mirrors HF `tokenizers`:
//   text -> split on non-normalized added tokens -> normalize each remaining piece -> split on
//   normalized added tokens -> pre-tokenize (regex splits, byte-level mapping, metaspace) ->
//   BPE model per word -> post-processor prefix/suffix ids.
// Decoding runs the tokenizer.json decoder chain on token strings.
#pragma once
#include <array>
#include <functional>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "graft/text/tokenizer.h"

namespace graft::text::detail {

// ---- UTF-8 (tokenizer_bytes.cpp) -------------------------------------------------------------

// Appends the UTF-8 encoding of a code point.
void utf8_append(std::string& out, char32_t cp);
// Decodes the code point at s[i] and advances i; s must be valid UTF-8 at i.
char32_t utf8_next(std::string_view s, size_t& i);
// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is invalid or incomplete.
size_t utf8_valid_len(std::string_view s, size_t i);
bool utf8_valid(std::string_view s);
// Converts bytes to valid UTF-8, replacing each maximal invalid subpart by U+FFFD (the Unicode /
// WHATWG / Rust from_utf8_lossy rule). When final is false, an incomplete but so far valid
// sequence at the end is not consumed; *consumed (if given) receives the bytes consumed.
std::string utf8_lossy(std::string_view s, bool final = true, size_t* consumed = nullptr);
// Unicode White_Space property (what Rust's char::is_whitespace and regex \s use).
bool is_unicode_whitespace(char32_t c);

// ---- GPT-2 byte-level table (tokenizer_bytes.cpp) -------------------------------------------

// The code point each byte maps to (printable bytes to themselves, others to U+0100...).
char32_t byte_to_unicode(uint8_t b);
// Maps every byte of `bytes` to its printable code point, UTF-8 encoded.
std::string byte_level_encode(std::string_view bytes);
// Inverse mapping; returns false (out untouched beyond what was appended) if a character is not
// in the table.
bool byte_level_decode(std::string_view text, std::string& out);

// ---- PCRE2 regex (tokenizer_regex.cpp) ------------------------------------------------------

// A compiled PCRE2 pattern (UTF + UCP, JIT when available). Shareable across threads.
class Regex {
 public:
  // Throws graft::Error naming the pattern on a compile error. `literal` escapes the pattern.
  explicit Regex(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches, left to right, as byte offsets [start, end); after an empty match
  // the search steps one character on. `s` must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  // Replaces every match with `with`.
  std::string replace_all(std::string_view s, std::string_view with) const;
  const std::string& pattern() const { return pattern_; }

 private:
  // Next match at or after `start`; false when there is none.
  bool find(std::string_view s, size_t start, size_t& mstart, size_t& mend,
            void* match_data) const;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

// The HF / llama.cpp split patterns.
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;

// ---- Normalizers and pre-tokenizers (tokenizer_pretok.cpp) ----------------------------------

struct NormStep {
  enum Kind { Prepend, Replace, NFC } kind = Prepend;
  std::string text;                   // Prepend: prefix; Replace: literal pattern
  std::string content;                // Replace: replacement
  std::shared_ptr<const Regex> re;    // Replace with a Regex pattern
};
void normalize(const std::vector<NormStep>& steps, std::string& s);
// NFC normalization in place (tokenizer_nfc.cpp); `s` must be valid UTF-8.
void nfc_normalize(std::string& s);

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct PreStep {
  enum Kind { Split, ByteLevel, Digits, Metaspace } kind = Split;
  std::shared_ptr<const Regex> re;    // Split pattern (literal patterns are escaped);
                                      // Metaspace: the literal replacement
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  bool add_prefix_space = false;      // ByteLevel
  bool use_regex = true;              // ByteLevel
  bool individual_digits = false;     // Digits
  std::string replacement = "\xE2\x96\x81";  // Metaspace ("▁")
  enum Prepend { Always, First, Never } prepend = Always;  // Metaspace
  bool split = true;                  // Metaspace
};

struct Piece {
  std::string text;
  bool at_origin = false;  // starts at offset 0 of the original input (Metaspace "first")
};
// Applies the pre-tokenizer steps; empty pieces are dropped.
void pretokenize(const std::vector<PreStep>& steps, std::vector<Piece>& pieces);
// One split of a piece by (start, end, is_match) matches, following HF's NormalizedString::split.
struct Match {
  size_t start, end;
  bool is_match;
};
std::vector<Piece> split_piece(const Piece& p, const std::vector<Match>& matches,
                               SplitBehavior behavior);

// ---- BPE model (tokenizer_bpe.cpp) ----------------------------------------------------------

// Transparent hash so maps keyed by std::string can be probed with a string_view.
struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StrMap = std::unordered_map<std::string, int32_t, StrHash, std::equal_to<>>;

struct BpeModel {
  StrMap vocab;  // model vocabulary (text -> id)
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::optional<int32_t> unk_id;
  std::array<int32_t, 256> byte_ids{};  // <0xXX> ids, -1 when absent
  // llama.cpp SentencePiece mode: no merges; merge the pair whose concatenation is in the vocab
  // with the highest score.
  bool use_scores = false;
  std::vector<float> scores;  // by id

  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  // Fills byte_ids from the vocabulary.
  void index_byte_tokens();
  // Adds a merge "a b" at the given rank; returns false if a, b or a+b is not in the vocab.
  bool add_merge(const std::string& a, const std::string& b, int32_t rank);
  // Tokenizes one pre-tokenized word, appending ids.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

 private:
  void tokenize_ranked(std::string_view word, std::vector<int32_t>& out) const;
  void tokenize_scored(std::string_view word, std::vector<int32_t>& out) const;
};

// ---- Added tokens (tokenizer_added.cpp) -----------------------------------------------------

struct AddedInfo {
  int32_t id;
  std::string content;
  bool special, lstrip, rstrip, single_word, normalized;
};

// Leftmost-longest matcher over a set of added tokens (HF AddedVocabulary split).
class AddedMatcher {
 public:
  void add(const std::string& pattern, int32_t index);  // index into the AddedInfo list
  bool empty() const { return nodes_.size() <= 1; }
  // Splits `text` into segments: (token index or -1, [start, end)). Special tokens are skipped
  // unless parse_special; lstrip/rstrip/single_word are honoured.
  struct Seg {
    int32_t token;
    size_t start, end;
  };
  std::vector<Seg> split(std::string_view text, const std::vector<AddedInfo>& tokens,
                         bool parse_special) const;

 private:
  struct Node {
    std::unordered_map<uint8_t, int32_t> next;
    int32_t token = -1;
  };
  std::vector<Node> nodes_{Node{}};
};

// ---- Decoders (tokenizer_decode.cpp) --------------------------------------------------------

struct DecStep {
  enum Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind = ByteLevel;
  std::string pattern, content;       // Replace (literal pattern) ; Strip content char
  std::shared_ptr<const Regex> re;    // Replace with a Regex pattern
  size_t start = 0, stop = 0;         // Strip
  std::string replacement = "\xE2\x96\x81";  // Metaspace
  bool prepend_never = false;         // Metaspace
};
// Runs the decoder chain (HF Decoder::decode: decode_chain, then concatenation).
std::string run_decoders(const std::vector<DecStep>& steps, std::vector<std::string> tokens);

// ---- The whole tokenizer ----------------------------------------------------------------------

struct TokenizerImpl {
  TokenizerKind kind = TokenizerKind::ByteLevelBPE;
  std::string source;  // file name (or "tokenizer spec") for error messages

  std::vector<std::string> id_to_token;  // every id (model and added); holes are empty
  std::vector<int8_t> id_added;  // -1: no token, 0: model, 1: added non-special, 2: special
  StrMap added_by_text;

  BpeModel model;
  std::vector<NormStep> normalizers;
  std::vector<PreStep> pre;
  std::vector<AddedInfo> added;
  AddedMatcher raw_matcher;         // added tokens with normalized=false
  AddedMatcher normalized_matcher;  // normalized=true (matched after normalization)
  bool has_decoder = true;
  std::vector<DecStep> decoders;
  std::string metaspace = "\xE2\x96\x81";  // what token_bytes turns into a space (SPM)

  std::vector<int32_t> bos_prefix, eos_suffix;  // post-processor ids
  bool has_template = false;                    // tokenizer.json has a post-processor with ids
  bool add_bos = false, add_eos = false;
  std::optional<int32_t> bos, eos, unk, pad;

  // Word cache (HF caches words too); guarded because encode is const and may run on threads.
  mutable std::mutex cache_mu;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  void check_id(int32_t id, const char* what) const;
  // Registers vocab/added tokens and builds the matchers; validates ids.
  void finish();
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;
  void encode_text(std::string_view text, bool parse_special, std::vector<int32_t>& out) const;
};

// Builds the pipeline for a tokenizer.json / reads tokenizer_config.json (tokenizer_json.cpp).
void load_tokenizer_json(TokenizerImpl& impl, const std::string& path);
void load_tokenizer_config(TokenizerImpl& impl, const std::string& path);
// Builds the pipeline for a normalized spec (tokenizer_spec.cpp).
void load_spec(TokenizerImpl& impl, TokenizerSpec spec);

}  // namespace graft::text::detail

namespace graft::text {
struct Tokenizer::Impl : detail::TokenizerImpl {};
}  // namespace graft::text
