// Grammar-constrained decoding with llama.cpp's GBNF: a grammar is parsed once into an immutable
// program shared by every sequence that uses it; each sequence holds a GrammarMatcher, its position
// in the grammar, which says which vocabulary tokens may come next (a mask for the sampler) and
// advances over the bytes of the token that was chosen. Terminals are Unicode code points; text is
// UTF-8, and a token may end inside a character (the matcher keeps the partial character).
//
// Language (llama.cpp's grammars/README.md): rules `name ::= alternatives` with names
// [a-zA-Z0-9-]+; `|`; sequences; "literals" and [classes] with ranges, [^negation] and escapes
// (\n \t \r \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH); `.`; ( groups ); * + ? {m} {m,} {m,n};
// `#` comments. A rule ends at a newline, except inside parentheses, after `::=` and after `|`.
// Refused where llama.cpp is silent or lenient: a rule defined twice, an empty class `[]`, a range
// whose end is below its start, {m,n} with n < m. Not supported: token matches `<[id]>`, `<text>`,
// `!<...>` (kUnsupported).
//
// Non-goals: no tokenizer here (the caller gives the vocabulary's byte strings), no lazy grammars
// or triggers, no JSON-schema conversion.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace graft::engine {

class Grammar;     // compiled, immutable; defined in src/engine/grammar_program.h
class StackSpace;  // a matcher's cache of stack sets and byte transitions (src/engine/grammar_stacks.h)
class MaskCache;   // a matcher's recent token masks (src/engine/grammar_matcher.cpp)

// Limits of parse_grammar; exceeding one is a kLimit error.
inline constexpr size_t kGrammarMaxBytes = 100000;        // grammar text
inline constexpr int kGrammarMaxNesting = 200;            // depth of ( ) groups
inline constexpr uint32_t kGrammarMaxRepeat = 10000;      // m and n of {m,n}
inline constexpr size_t kGrammarMaxElements = 1 << 20;    // compiled program, after repetitions
// Live stacks in one matcher state: an ambiguous grammar (one that can be at many places at once)
// is refused with a kLimit error naming the grammar position, rather than slowing every token.
inline constexpr size_t kGrammarMaxStacks = 4096;

// Parses GBNF text. Throws graft::Error:
//   kBadRequest "grammar: line L, column C: <what was expected>" for a syntax error;
//   kBadRequest "grammar: rule 'x' is used but not defined (line L, column C)";
//   kBadRequest "grammar: no rule 'root'" (the `root` argument) and "grammar: empty" (no rules);
//   kBadRequest "grammar: rule 'x' is left-recursive (x -> y -> x, line L, column C)": a rule that
//     can reach itself before consuming input with something still to follow (the pushdown stack
//     would grow without bound). A cycle only through tail positions, such as the one ("a"?)*
//     makes, consumes no stack and is accepted;
//   kLimit for the limits above; kUnsupported for token matches.
std::shared_ptr<const Grammar> parse_grammar(std::string_view text, std::string_view root = "root");

// The vocabulary's token byte strings in a trie, built once per tokenizer and shared by every
// matcher (ids are positions in the vector). Nodes are stored in depth-first order, each with the
// index just past its subtree, so a walk can cut a whole branch in one step.
class TokenTrie {
 public:
  explicit TokenTrie(const std::vector<std::string>& token_bytes);
  size_t size() const { return token_count_; }        // number of token ids
  size_t node_count() const { return nodes_.size() - 1; }
  uint32_t max_length() const { return max_depth_; }  // longest token, in bytes

 private:
  friend class GrammarMatcher;
  void close(std::vector<uint32_t>& path);
  struct Node {
    uint32_t skip;    // first node after this node's subtree
    uint32_t tokens;  // this node's token ids are tokens_[tokens, next node's tokens)
    uint32_t depth;   // bytes from the root (children of the root have depth 1)
    uint8_t byte;
  };
  std::vector<Node> nodes_;  // preorder, plus one sentinel
  // Per node, the byte buckets (src/engine/grammar_stacks.h) of every byte below it: a walk that
  // finds them all leading a state back to itself takes the whole subtree at once.
  std::vector<uint64_t> below_;
  std::vector<uint32_t> tokens_;
  size_t token_count_ = 0;
  uint32_t max_depth_ = 0;
};

// One sequence's position in the grammar: the set of pushdown stacks of grammar positions it could
// be at (duplicates merged) and any partial UTF-8 character. Copyable; a matcher is used by one
// thread at a time (its const methods fill a private cache of the transitions they computed, so
// that the next call, and the next token, reuse them).
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);
  GrammarMatcher(const GrammarMatcher& other);
  GrammarMatcher& operator=(const GrammarMatcher& other);
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;
  ~GrammarMatcher();

  // allowed[id] = 1 when token id's bytes can be consumed from the current state (a token may end
  // in the middle of a UTF-8 character: the partial character must be a prefix of one the grammar
  // allows here); 0 otherwise, and 0 for empty tokens. `allowed` is resized to trie.size().
  // The last masks are kept by a key of the state in which positions of a bounded repetition
  // x{m,n} that no token can tell apart (more copies left than the longest token has bytes) are
  // equal, so a recurring state, and every character of a long bounded string, costs a copy of a
  // cached mask instead of a walk over the vocabulary.
  // This, accepts and accept throw kLimit if the bytes lead where the grammar is too ambiguous
  // (more than kGrammarMaxStacks stacks); the matcher's state is then unchanged.
  void allowed_tokens(const TokenTrie& trie, std::vector<uint8_t>& allowed) const;
  bool accepts(std::string_view bytes) const;  // would these bytes be consumed from here
  void accept(std::string_view bytes);         // advance; throws kInternal if !accepts(bytes)
  bool can_end() const;   // what was accepted so far is a complete sentence (EOS may come now)
  bool must_end() const;  // can_end and no further byte can be accepted
  size_t live_stacks() const;  // stacks in the current state (diagnostics, tests)
  size_t cached_masks_used() const { return cached_masks_used_; }  // allowed_tokens calls served by the cache

 private:
  void compact_if_large() const;
  void walk_trie(const TokenTrie& trie, std::vector<uint8_t>& allowed) const;  // the mask, uncached

  std::shared_ptr<const Grammar> grammar_;
  // The cache and the current state's id in it; const methods extend the cache and may rebuild it
  // (renumbering the state) when it grows large.
  mutable std::unique_ptr<StackSpace> space_;
  mutable uint32_t state_ = 0;
  mutable std::unique_ptr<MaskCache> masks_;  // created on first use; a copy starts without one
  mutable size_t cached_masks_used_ = 0;
};

}  // namespace graft::engine
