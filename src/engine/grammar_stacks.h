// A matcher's working memory: pushdown stacks of grammar positions, hash-consed so that a stack is
// one node id (its top position and the id of the stack below it) and equal stacks are equal ids;
// states, each a sorted set of stacks plus any partial UTF-8 character; and a lazily filled
// transition table state x byte class -> state. Once a transition is known, consuming a byte is a
// table lookup, which is what makes a walk over a 49k-token trie cheap: the same few states recur
// at every node (inside a JSON string almost every byte leads back to the state it came from).
//
// Nothing is ever freed; the owner rebuilds the space from a snapshot of its current state when
// large() says the tables have grown too big.
#pragma once
#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "engine/grammar_program.h"

namespace graft::engine {

// Coarse byte buckets (at most 64) for the token trie's subtree summaries: each node of a
// TokenTrie records the buckets of the bytes below it, and a state which buckets lead back to
// itself, so a subtree of looping bytes (a word inside a JSON string) is allowed whole without
// walking it. Buckets keep apart what grammars usually tell apart: controls, each whitespace
// byte, each punctuation byte, digits, hex and other letters; non-ASCII bytes never loop (they
// start or continue a character).
inline constexpr int kByteBuckets = 46;
constexpr std::array<uint8_t, 256> make_byte_buckets() {
  std::array<uint8_t, 256> t{};
  constexpr const char* kPunct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";  // one bucket each
  for (int b = 0; b < 256; ++b) {
    int k = b < 0xC0 ? 42 : b < 0xE0 ? 43 : b < 0xF0 ? 44 : 45;  // continuation, 2-, 3-, 4-byte lead
    if (b < 0x80) k = b == '\t' ? 1 : b == '\n' ? 2 : b == '\r' ? 3 : b == ' ' ? 4 : 0;  // 0: controls
    if (b >= '0' && b <= '9') k = 5;
    if (b >= 'a' && b <= 'f') k = 6;
    if (b >= 'g' && b <= 'z') k = 7;
    if (b >= 'A' && b <= 'F') k = 8;
    if (b >= 'G' && b <= 'Z') k = 9;
    for (int i = 0; kPunct[i]; ++i)
      if (kPunct[i] == b) k = 10 + i;
    t[b] = static_cast<uint8_t>(k);
  }
  return t;
}
inline constexpr std::array<uint8_t, 256> kByteBucket = make_byte_buckets();
static_assert(kByteBuckets <= 64 && kByteBucket['~'] == 41 && kByteBucket[0x80] == 42);
inline int byte_bucket(uint8_t b) { return kByteBucket[b]; }

class StackSpace {
 public:
  static constexpr uint32_t kDead = 0;        // the state with no stack: nothing more can be consumed
  static constexpr uint32_t kEmptyStack = 0;  // the node of the empty stack: the sentence may end here

  // A state as plain positions (each stack bottom to top; an empty vector is the empty stack), to
  // move a state between spaces.
  struct Snapshot {
    std::vector<std::vector<uint32_t>> stacks;
    uint32_t partial = 0;  // bytes of an incomplete character, first byte lowest
    uint8_t partial_len = 0;
  };

  explicit StackSpace(const Grammar& g);

  uint32_t start();  // before any input: the root's alternatives
  // The state after one more byte (kDead if it cannot be consumed). Throws kLimit if the grammar
  // is too ambiguous there (more than kGrammarMaxStacks stacks).
  uint32_t next(uint32_t state, uint8_t byte) {
    const size_t at = static_cast<size_t>(state) * classes_ + byte_class_[byte];
    uint32_t t = trans_[at];
    if (t == kUnknown) {
      t = compute(state, byte);
      trans_[at] = t;
    }
    return t;
  }

  // Whether every byte of every bucket in `buckets` leads from `state` back to `state`. Buckets
  // are tested as needed and remembered per state.
  bool loops_over(uint32_t state, uint64_t buckets) {
    if (state < loops_.size() && (buckets & ~loops_[state].yes) == 0) return true;
    return test_loops(state, buckets);
  }

  bool can_end(uint32_t state) const;
  bool must_end(uint32_t state) const;
  size_t stack_count(uint32_t state) const { return states_[state].size; }

  // A key of `state` for caching token masks: each stack's grammar positions (top first) with a
  // chain link's k (Grammar::element_chain) clamped to `clamp`, every distinct stack once in a
  // canonical order, and any partial character. Set clamp past the longest token (in bytes): a
  // token then cannot tell the clamped links apart (each copy of x takes at least one byte, and
  // copies that take none can be left out), so states with equal keys allow the same tokens.
  void mask_key(uint32_t state, uint32_t clamp, std::vector<uint64_t>& key);

  Snapshot snapshot(uint32_t state) const;
  uint32_t restore(const Snapshot& s);
  bool large() const;

 private:
  static constexpr uint32_t kUnknown = UINT32_MAX;
  struct Node {
    uint32_t pos;     // grammar element on top
    uint32_t parent;  // the stack below
  };
  struct State {
    uint32_t begin = 0, size = 0;  // its stacks: set_pool_[begin, begin + size), sorted
    uint32_t partial = 0;
    uint8_t partial_len = 0;
  };

  uint32_t compute(uint32_t state, uint8_t byte);
  bool test_loops(uint32_t state, uint64_t buckets);
  uint32_t step(uint32_t state, uint32_t cp);  // consume one whole code point
  bool any_top_intersects(uint32_t state, uint32_t lo, uint32_t hi) const;
  uint32_t node(uint32_t pos, uint32_t parent);
  // The stack with `pos` on top of `parent` once its top is expanded down to terminals: stacks
  // with a terminal on top, or the empty stack. Returns its place in closure_pool_.
  std::pair<uint32_t, uint32_t> closure(uint32_t n);
  uint32_t intern(std::vector<uint32_t>& stacks, uint32_t partial, uint8_t partial_len);
  [[noreturn]] void too_many(uint32_t pos) const;

  const Grammar& g_;
  std::array<uint8_t, 256> byte_class_;
  size_t classes_;

  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> node_ids_;
  std::vector<uint32_t> closure_at_, closure_size_;  // per node; kUnknown until computed
  std::vector<uint32_t> closure_pool_;

  std::vector<State> states_;
  std::vector<uint32_t> set_pool_;
  std::unordered_multimap<uint64_t, uint32_t> state_ids_;
  std::vector<uint32_t> trans_;  // states_.size() x classes_
  struct Loops {
    uint64_t yes = 0, no = 0;  // buckets known to loop back / known not to
  };
  std::vector<Loops> loops_;  // per state, grown on demand

  // Scratch, kept to avoid allocating per transition.
  std::vector<uint32_t> work_, found_, acc_, tmp_, seen_;
  std::vector<uint64_t> key_positions_;
  std::vector<std::pair<uint32_t, uint32_t>> key_stacks_;
  uint32_t seen_gen_ = 0;
};

}  // namespace graft::engine
