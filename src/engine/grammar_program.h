// The compiled form of a GBNF grammar: every rule's alternatives laid out in one element array
// (each alternative ends with a kEnd element), so a grammar position is one index and a pushdown
// stack is a list of indices. Groups and repetitions are lowered to generated rules while parsing
// (x* becomes R ::= x R | ε), which keeps the matcher down to terminals and rule references.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "graft/engine/grammar.h"

namespace graft::engine {

struct GrammarElement {
  enum class Kind : uint8_t { kEnd, kTerminal, kRule };
  Kind kind = Kind::kEnd;
  uint32_t arg = 0;     // kTerminal: index into Grammar::classes; kRule: index into Grammar::rules
  uint32_t source = 0;  // byte offset in the grammar text, for messages
};

struct GrammarRule {
  std::string name;        // the user's rule name; a generated rule carries its owner's
  uint32_t source = 0;     // offset of the definition (or of the group / repetition)
  bool generated = false;  // made for a group or a repetition
  // A link R_k ::= x R_(k-1) | ε of a bounded repetition's chain (x{m,n}): the chain's id (1-based,
  // 0 for every other rule) and k, the copies of x this link still allows.
  uint32_t chain = 0, chain_k = 0;
  std::vector<uint32_t> alts;  // index of each alternative's first element
};

// A set of code points as sorted, disjoint, inclusive ranges. Surrogates (U+D800-DFFF) are never
// members: UTF-8 input cannot contain them, and leaving them out lets an empty set mean "can never
// match" exactly.
struct CharClass {
  std::vector<std::pair<uint32_t, uint32_t>> ranges;
  bool contains(uint32_t cp) const;
  bool intersects(uint32_t lo, uint32_t hi) const;
  bool empty() const { return ranges.empty(); }
};

class Grammar {
 public:
  std::string text;  // the source, for line and column in messages
  std::vector<GrammarElement> elements;
  std::vector<GrammarRule> rules;
  std::vector<CharClass> classes;
  uint32_t root = 0;
  // Bytes that no terminal tells apart share a class, so a matcher computes one transition per
  // class instead of per byte: ASCII bytes by which terminal classes hold them; every other byte
  // alone (a lead or continuation byte of UTF-8), except those never valid in UTF-8, which share one.
  std::array<uint8_t, 256> byte_class{};
  uint32_t byte_class_count = 0;
  // Per element of a chain link's first alternative (x R_(k-1)): its chain, k and offset in the
  // alternative; {0, 0, 0} elsewhere, and empty when the grammar has no bounded repetition. Links
  // of one chain differ only in k, so a matcher can treat positions with k past the longest token
  // alike (StackSpace::mask_key).
  struct ChainLink {
    uint32_t chain = 0, k = 0, offset = 0;
  };
  std::vector<ChainLink> element_chain;

  // "line L, column C" (1-based; columns count characters) for a byte offset in `text`.
  std::string where(uint32_t offset) const;
  // "rule 'x', line L, column C" for an element position.
  std::string describe_position(uint32_t element) const;
};

// Builds the program from the text (grammar_parse.cpp); syntax and limit errors are thrown here.
// Rule references are resolved by name; `undefined` gets (name, offset of first use) for each
// referenced rule that has no definition.
Grammar parse_gbnf(std::string_view text, std::vector<std::pair<std::string, uint32_t>>& undefined);

// Checks a parsed program and fills the derived tables (grammar_check.cpp): the root rule exists,
// no rule is undefined, no left recursion; byte classes.
void check_grammar(Grammar& g, std::string_view root,
                   const std::vector<std::pair<std::string, uint32_t>>& undefined);

}  // namespace graft::engine
