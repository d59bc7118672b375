// TokenTrie and GrammarMatcher: the vocabulary walk that builds a token mask, and advancing a
// sequence's state over the bytes of the chosen token.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "engine/grammar_stacks.h"
#include "graft/core/error.h"

namespace graft::engine {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes) : token_count_(token_bytes.size()) {
  // Sorted byte strings visit the trie in preorder: a token's new nodes are always the latest
  // ones, and a node's subtree ends when a later token stops sharing its prefix.
  std::vector<uint32_t> order(token_bytes.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return token_bytes[a] < token_bytes[b] || (token_bytes[a] == token_bytes[b] && a < b);
  });
  std::vector<uint32_t> path;  // nodes from the root to the last token's end
  const std::string* prev = nullptr;
  for (uint32_t id : order) {
    const std::string& t = token_bytes[id];
    if (t.empty()) continue;  // an empty token consumes nothing: never allowed
    size_t common = 0;
    if (prev != nullptr)
      while (common < path.size() && common < t.size() && (*prev)[common] == t[common]) ++common;
    while (path.size() > common) close(path);
    for (size_t i = common; i < t.size(); ++i) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      nodes_.push_back({0, static_cast<uint32_t>(tokens_.size()), static_cast<uint32_t>(i + 1),
                        static_cast<uint8_t>(t[i])});
      below_.push_back(0);
    }
    tokens_.push_back(id);
    max_depth_ = std::max<uint32_t>(max_depth_, static_cast<uint32_t>(t.size()));
    prev = &t;
  }
  while (!path.empty()) close(path);
  nodes_.push_back({static_cast<uint32_t>(nodes_.size() + 1), static_cast<uint32_t>(tokens_.size()), 0, 0});
  below_.push_back(0);
}

// The deepest open node's subtree is complete: record where it ends and pass its bytes up.
void TokenTrie::close(std::vector<uint32_t>& path) {
  const uint32_t n = path.back();
  path.pop_back();
  nodes_[n].skip = static_cast<uint32_t>(nodes_.size());
  if (!path.empty()) below_[path.back()] |= below_[n] | (uint64_t{1} << byte_bucket(nodes_[n].byte));
}

// The last kEntries masks by StackSpace::mask_key, as bits (6 KB each for a 49k vocabulary),
// replaced oldest first. Tied to one trie: another (or a changed one) clears it.
class MaskCache {
 public:
  static constexpr size_t kEntries = 32;

  void use(const TokenTrie& trie) {
    if (trie_ == &trie && tokens_ == trie.size() && nodes_ == trie.node_count()) return;
    entries_.clear();
    next_ = 0;
    trie_ = &trie;
    tokens_ = trie.size();
    nodes_ = trie.node_count();
  }
  std::vector<uint64_t>& key() { return key_; }

  bool find(std::vector<uint8_t>& allowed) {
    hash_ = hash(key_);
    for (const Entry& e : entries_)
      if (e.hash == hash_ && e.key == key_) {
        unpack(e.bits, allowed);
        return true;
      }
    return false;
  }
  void store(const std::vector<uint8_t>& allowed) {
    if (entries_.size() < kEntries) entries_.emplace_back();
    Entry& e = entries_[next_];
    next_ = (next_ + 1) % kEntries;
    e.key = key_;
    e.hash = hash_;
    pack(allowed, e.bits);
  }

 private:
  struct Entry {
    std::vector<uint64_t> key, bits;
    uint64_t hash = 0;
  };
  static uint64_t hash(const std::vector<uint64_t>& key) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (uint64_t v : key) h = (h ^ v) * 0x100000001b3ull;
    return h;
  }
  // 8 mask bytes (each 0 or 1) to 8 bits and back.
  static void pack(const std::vector<uint8_t>& allowed, std::vector<uint64_t>& bits) {
    const size_t n = allowed.size();
    bits.assign((n + 63) / 64, 0);
    for (size_t i = 0; i < n; i += 8) {
      uint64_t v = 0;
      std::memcpy(&v, allowed.data() + i, std::min<size_t>(8, n - i));
      const uint64_t b = ((v & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56;  // byte j -> bit j
      bits[i / 64] |= b << (i % 64);
    }
  }
  static void unpack(const std::vector<uint64_t>& bits, std::vector<uint8_t>& allowed) {
    const size_t n = allowed.size();
    for (size_t i = 0; i < n; i += 8) {
      const uint64_t b = (bits[i / 64] >> (i % 64)) & 0xFF;
      // Byte j keeps bit j of b (b copied to every byte, masked); adding 0x7F sets a byte's top
      // bit exactly when it is not zero, without carrying into the next byte.
      const uint64_t x = (b * 0x0101010101010101ull) & 0x8040201008040201ull;
      const uint64_t v = ((x + 0x7F7F7F7F7F7F7F7Full) >> 7) & 0x0101010101010101ull;  // bit j -> byte j
      std::memcpy(allowed.data() + i, &v, std::min<size_t>(8, n - i));
    }
  }

  const TokenTrie* trie_ = nullptr;
  size_t tokens_ = 0, nodes_ = 0;
  std::vector<Entry> entries_;
  size_t next_ = 0;
  uint64_t hash_ = 0;
  std::vector<uint64_t> key_;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar)
    : grammar_(std::move(grammar)), space_(std::make_unique<StackSpace>(*grammar_)) {
  state_ = space_->start();
}

GrammarMatcher::GrammarMatcher(const GrammarMatcher& other)
    : grammar_(other.grammar_), space_(std::make_unique<StackSpace>(*grammar_)) {
  state_ = space_->restore(other.space_->snapshot(other.state_));
}

GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& other) {
  if (this != &other) {
    GrammarMatcher copy(other);
    *this = std::move(copy);
  }
  return *this;
}

GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;
GrammarMatcher::~GrammarMatcher() = default;

void GrammarMatcher::compact_if_large() const {
  if (!space_->large()) return;
  auto fresh = std::make_unique<StackSpace>(*grammar_);
  state_ = fresh->restore(space_->snapshot(state_));
  space_ = std::move(fresh);
}

void GrammarMatcher::allowed_tokens(const TokenTrie& trie, std::vector<uint8_t>& allowed) const {
  allowed.assign(trie.size(), 0);
  compact_if_large();
  StackSpace& space = *space_;
  if (!masks_) masks_ = std::make_unique<MaskCache>();
  masks_->use(trie);
  // Past the longest token no token can reach the end of a repetition (see mask_key).
  const uint32_t clamp = std::min<uint32_t>(trie.max_depth_ + 1, (1u << 24) - 1);
  space.mask_key(state_, clamp, masks_->key());
  if (masks_->find(allowed)) {
    ++cached_masks_used_;
    return;
  }
  walk_trie(trie, allowed);
  masks_->store(allowed);
}

void GrammarMatcher::walk_trie(const TokenTrie& trie, std::vector<uint8_t>& allowed) const {
  StackSpace& space = *space_;
  const TokenTrie::Node* nodes = trie.nodes_.data();
  const uint32_t* tokens = trie.tokens_.data();
  const uint32_t n = static_cast<uint32_t>(trie.node_count());
  // at[d]: the state after the first d bytes of the current path.
  std::vector<uint32_t> at(trie.max_depth_ + 1);
  at[0] = state_;
  for (uint32_t i = 0; i < n;) {
    const TokenTrie::Node& node = nodes[i];
    const uint32_t s = space.next(at[node.depth - 1], node.byte);
    if (s == StackSpace::kDead) {
      i = node.skip;  // no token below this prefix can be consumed
      continue;
    }
    // Every byte below leads back to s (a word inside a string): all of the subtree's tokens,
    // which are contiguous in preorder, are allowed.
    if (node.skip - i > 2 && space.loops_over(s, trie.below_[i])) {
      for (uint32_t t = node.tokens; t < nodes[node.skip].tokens; ++t) allowed[tokens[t]] = 1;
      i = node.skip;
      continue;
    }
    at[node.depth] = s;
    for (uint32_t t = node.tokens; t < nodes[i + 1].tokens; ++t) allowed[tokens[t]] = 1;
    ++i;
  }
}

bool GrammarMatcher::accepts(std::string_view bytes) const {
  compact_if_large();
  uint32_t s = state_;
  for (char c : bytes) {
    s = space_->next(s, static_cast<uint8_t>(c));
    if (s == StackSpace::kDead) return false;
  }
  return true;
}

void GrammarMatcher::accept(std::string_view bytes) {
  compact_if_large();
  uint32_t s = state_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    s = space_->next(s, static_cast<uint8_t>(bytes[i]));
    if (s == StackSpace::kDead)
      fail_as(ErrorKind::kInternal, "grammar: byte ", i, " of the ", bytes.size(),
              "-byte input cannot be consumed here (the sampler chose a token outside the grammar's mask?)");
  }
  state_ = s;
}

bool GrammarMatcher::can_end() const { return space_->can_end(state_); }
bool GrammarMatcher::must_end() const { return space_->must_end(state_); }
size_t GrammarMatcher::live_stacks() const { return space_->stack_count(state_); }

}  // namespace graft::engine
