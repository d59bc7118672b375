#include "engine/grammar_stacks.h"

#include <algorithm>

#include "graft/core/error.h"

namespace graft::engine {

namespace {

using Kind = GrammarElement::Kind;

// Expansions visited while closing one stack; bounded so a pathological grammar fails fast.
constexpr size_t kMaxClosureVisits = 64 * kGrammarMaxStacks;

// Total length of a UTF-8 character from its first byte; 0 if it cannot start one.
int utf8_length(uint8_t lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// Bounds of the byte after `lead` that keep the character valid: no overlong forms, no
// surrogates, nothing past U+10FFFF. Later bytes are always 80..BF.
std::pair<uint8_t, uint8_t> second_byte_range(uint8_t lead) {
  switch (lead) {
    case 0xE0: return {0xA0, 0xBF};
    case 0xED: return {0x80, 0x9F};
    case 0xF0: return {0x90, 0xBF};
    case 0xF4: return {0x80, 0x8F};
    default: return {0x80, 0xBF};
  }
}

uint8_t byte_at(uint32_t packed, int i) { return static_cast<uint8_t>(packed >> (8 * i)); }

uint32_t decode(uint32_t packed, int len) {
  uint32_t cp = byte_at(packed, 0) & (0x7F >> len);
  for (int i = 1; i < len; ++i) cp = (cp << 6) | (byte_at(packed, i) & 0x3F);
  return cp;
}

// The code points a valid character starting with these bytes can still become: one range, since
// the remaining bytes are free within their bounds.
std::pair<uint32_t, uint32_t> completions(uint32_t packed, int have, int len) {
  uint32_t lo = packed, hi = packed;
  for (int i = have; i < len; ++i) {
    auto [a, b] = i == 1 ? second_byte_range(byte_at(packed, 0)) : std::pair<uint8_t, uint8_t>{0x80, 0xBF};
    lo |= static_cast<uint32_t>(a) << (8 * i);
    hi |= static_cast<uint32_t>(b) << (8 * i);
  }
  return {decode(lo, len), decode(hi, len)};
}

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h;
}

}  // namespace

StackSpace::StackSpace(const Grammar& g) : g_(g), byte_class_(g.byte_class), classes_(g.byte_class_count) {
  nodes_.push_back({UINT32_MAX, UINT32_MAX});  // kEmptyStack
  closure_at_.push_back(kUnknown);
  closure_size_.push_back(0);
  states_.push_back({});  // kDead: every byte leads back to it
  trans_.assign(classes_, kDead);
}

uint32_t StackSpace::node(uint32_t pos, uint32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(pos) << 32) | parent;
  auto [it, fresh] = node_ids_.emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (fresh) {
    nodes_.push_back({pos, parent});
    closure_at_.push_back(kUnknown);
    closure_size_.push_back(0);
  }
  return it->second;
}

void StackSpace::too_many(uint32_t pos) const {
  fail_as(ErrorKind::kLimit, "grammar: more than ", kGrammarMaxStacks, " live stacks at ",
          pos == UINT32_MAX ? std::string("the root") : g_.describe_position(pos),
          " (the grammar is too ambiguous here)");
}

std::pair<uint32_t, uint32_t> StackSpace::closure(uint32_t n) {
  if (closure_at_[n] != kUnknown) return {closure_at_[n], closure_size_[n]};
  // `seen_` marks nodes visited in this closure by generation, so it never needs clearing.
  if (++seen_gen_ == 0) {
    std::fill(seen_.begin(), seen_.end(), 0);
    seen_gen_ = 1;
  }
  work_.assign(1, n);
  found_.clear();
  size_t visits = 0;
  while (!work_.empty()) {
    const uint32_t m = work_.back();
    work_.pop_back();
    if (m >= seen_.size()) seen_.resize(std::max<size_t>(nodes_.size(), 2 * seen_.size()), 0);
    if (seen_[m] == seen_gen_) continue;
    seen_[m] = seen_gen_;
    if (++visits > kMaxClosureVisits) too_many(nodes_[n].pos);
    if (m == kEmptyStack) {
      found_.push_back(m);
      continue;
    }
    const Node top = nodes_[m];
    const GrammarElement& e = g_.elements[top.pos];
    if (e.kind == Kind::kTerminal) {
      if (!g_.classes[e.arg].empty()) found_.push_back(m);  // a class that matches nothing is a dead end
      continue;
    }
    // A rule reference: replace it by its continuation with each alternative on top. The
    // continuation is not pushed when the reference ends its alternative (a tail call), which is
    // why repetition loops do not grow the stack.
    const uint32_t cont = g_.elements[top.pos + 1].kind == Kind::kEnd ? top.parent : node(top.pos + 1, top.parent);
    for (uint32_t a : g_.rules[e.arg].alts) work_.push_back(g_.elements[a].kind == Kind::kEnd ? cont : node(a, cont));
  }
  std::sort(found_.begin(), found_.end());
  found_.erase(std::unique(found_.begin(), found_.end()), found_.end());
  if (found_.size() > kGrammarMaxStacks) too_many(nodes_[n].pos);
  closure_at_[n] = static_cast<uint32_t>(closure_pool_.size());
  closure_size_[n] = static_cast<uint32_t>(found_.size());
  closure_pool_.insert(closure_pool_.end(), found_.begin(), found_.end());
  return {closure_at_[n], closure_size_[n]};
}

uint32_t StackSpace::intern(std::vector<uint32_t>& stacks, uint32_t partial, uint8_t partial_len) {
  if (stacks.empty()) return kDead;
  uint64_t h = mix(partial, partial_len);
  for (uint32_t s : stacks) h = mix(h, s);
  auto range = state_ids_.equal_range(h);
  for (auto it = range.first; it != range.second; ++it) {
    const State& st = states_[it->second];
    if (st.partial == partial && st.partial_len == partial_len && st.size == stacks.size() &&
        std::equal(stacks.begin(), stacks.end(), set_pool_.begin() + st.begin))
      return it->second;
  }
  const uint32_t id = static_cast<uint32_t>(states_.size());
  states_.push_back({static_cast<uint32_t>(set_pool_.size()), static_cast<uint32_t>(stacks.size()), partial, partial_len});
  set_pool_.insert(set_pool_.end(), stacks.begin(), stacks.end());
  trans_.resize(trans_.size() + classes_, kUnknown);
  state_ids_.emplace(h, id);
  return id;
}

uint32_t StackSpace::start() {
  acc_.clear();
  for (uint32_t a : g_.rules[g_.root].alts) {
    auto [at, size] = closure(g_.elements[a].kind == Kind::kEnd ? kEmptyStack : node(a, kEmptyStack));
    acc_.insert(acc_.end(), closure_pool_.begin() + at, closure_pool_.begin() + at + size);
  }
  std::sort(acc_.begin(), acc_.end());
  acc_.erase(std::unique(acc_.begin(), acc_.end()), acc_.end());
  if (acc_.size() > kGrammarMaxStacks) too_many(UINT32_MAX);
  return intern(acc_, 0, 0);
}

uint32_t StackSpace::step(uint32_t state, uint32_t cp) {
  acc_.clear();
  const State st = states_[state];
  for (uint32_t i = 0; i < st.size; ++i) {
    const uint32_t n = set_pool_[st.begin + i];
    if (n == kEmptyStack) continue;
    const Node top = nodes_[n];
    if (!g_.classes[g_.elements[top.pos].arg].contains(cp)) continue;
    const uint32_t after = g_.elements[top.pos + 1].kind == Kind::kEnd ? top.parent : node(top.pos + 1, top.parent);
    auto [at, size] = closure(after);
    acc_.insert(acc_.end(), closure_pool_.begin() + at, closure_pool_.begin() + at + size);
    if (acc_.size() > 4 * kGrammarMaxStacks) {  // bound the scratch before deduplicating
      std::sort(acc_.begin(), acc_.end());
      acc_.erase(std::unique(acc_.begin(), acc_.end()), acc_.end());
      if (acc_.size() > kGrammarMaxStacks) too_many(top.pos);
    }
  }
  std::sort(acc_.begin(), acc_.end());
  acc_.erase(std::unique(acc_.begin(), acc_.end()), acc_.end());
  if (acc_.size() > kGrammarMaxStacks) too_many(nodes_[acc_.back()].pos);
  return intern(acc_, 0, 0);
}

bool StackSpace::any_top_intersects(uint32_t state, uint32_t lo, uint32_t hi) const {
  const State& st = states_[state];
  for (uint32_t i = 0; i < st.size; ++i) {
    const uint32_t n = set_pool_[st.begin + i];
    if (n != kEmptyStack && g_.classes[g_.elements[nodes_[n].pos].arg].intersects(lo, hi)) return true;
  }
  return false;
}

uint32_t StackSpace::compute(uint32_t state, uint8_t byte) {
  const State st = states_[state];
  uint32_t partial = byte;
  int have = 1, len = 0;
  if (st.partial_len == 0) {
    if (byte < 0x80) return step(state, byte);
    len = utf8_length(byte);
    if (len == 0) return kDead;
  } else {
    const uint8_t lead = byte_at(st.partial, 0);
    len = utf8_length(lead);
    auto [lo, hi] = st.partial_len == 1 ? second_byte_range(lead) : std::pair<uint8_t, uint8_t>{0x80, 0xBF};
    if (byte < lo || byte > hi) return kDead;
    partial = st.partial | (static_cast<uint32_t>(byte) << (8 * st.partial_len));
    have = st.partial_len + 1;
    if (have == len) return step(state, decode(partial, len));
  }
  // An incomplete character: keep it if some stack could still take one of its completions.
  auto [lo, hi] = completions(partial, have, len);
  if (!any_top_intersects(state, lo, hi)) return kDead;
  tmp_.assign(set_pool_.begin() + st.begin, set_pool_.begin() + st.begin + st.size);
  return intern(tmp_, partial, static_cast<uint8_t>(have));
}

bool StackSpace::test_loops(uint32_t state, uint64_t buckets) {
  if (state >= loops_.size()) loops_.resize(states_.size());
  uint64_t unknown = buckets & ~(loops_[state].yes | loops_[state].no);
  while (unknown != 0 && (buckets & loops_[state].no) == 0) {
    const int k = __builtin_ctzll(unknown);
    unknown &= unknown - 1;
    bool loops = k < byte_bucket(0x80);  // a byte of a multi-byte character never loops
    for (int b = 0; loops && b < 0x80; ++b)
      if (byte_bucket(static_cast<uint8_t>(b)) == k) loops = next(state, static_cast<uint8_t>(b)) == state;
    // next() may have added states; `state` is unchanged but loops_ may need to grow.
    if (state >= loops_.size()) loops_.resize(states_.size());
    (loops ? loops_[state].yes : loops_[state].no) |= uint64_t{1} << k;
  }
  return (buckets & ~loops_[state].yes) == 0;
}

bool StackSpace::can_end(uint32_t state) const {
  const State& st = states_[state];
  return st.partial_len == 0 && st.size > 0 && set_pool_[st.begin] == kEmptyStack;  // sorted: 0 first
}

bool StackSpace::must_end(uint32_t state) const { return can_end(state) && states_[state].size == 1; }

void StackSpace::mask_key(uint32_t state, uint32_t clamp, std::vector<uint64_t>& key) {
  const State& st = states_[state];
  auto position = [&](uint32_t pos) -> uint64_t {
    if (g_.element_chain.empty() || g_.element_chain[pos].chain == 0) return pos;
    const Grammar::ChainLink& c = g_.element_chain[pos];
    return uint64_t{1} << 63 | static_cast<uint64_t>(c.chain) << 32 | static_cast<uint64_t>(c.offset) << 24 |
           std::min(c.k, clamp);
  };
  key_positions_.clear();
  key_stacks_.clear();
  for (uint32_t i = 0; i < st.size; ++i) {
    const uint32_t begin = static_cast<uint32_t>(key_positions_.size());
    for (uint32_t n = set_pool_[st.begin + i]; n != kEmptyStack; n = nodes_[n].parent)
      key_positions_.push_back(position(nodes_[n].pos));
    key_stacks_.push_back({begin, static_cast<uint32_t>(key_positions_.size())});
  }
  // Stacks that differ only in clamped links become equal: sort them as sequences, keep each once.
  const uint64_t* p = key_positions_.data();
  auto less = [p](const std::pair<uint32_t, uint32_t>& a, const std::pair<uint32_t, uint32_t>& b) {
    return std::lexicographical_compare(p + a.first, p + a.second, p + b.first, p + b.second);
  };
  auto same = [p](const std::pair<uint32_t, uint32_t>& a, const std::pair<uint32_t, uint32_t>& b) {
    return std::equal(p + a.first, p + a.second, p + b.first, p + b.second);
  };
  std::sort(key_stacks_.begin(), key_stacks_.end(), less);
  key_stacks_.erase(std::unique(key_stacks_.begin(), key_stacks_.end(), same), key_stacks_.end());
  key.assign(1, static_cast<uint64_t>(st.partial) << 8 | st.partial_len);
  for (const auto& [b, e] : key_stacks_) {
    key.push_back(e - b);  // lengths keep the flattened sequences apart
    key.insert(key.end(), p + b, p + e);
  }
}

StackSpace::Snapshot StackSpace::snapshot(uint32_t state) const {
  Snapshot s;
  const State& st = states_[state];
  s.partial = st.partial;
  s.partial_len = st.partial_len;
  for (uint32_t i = 0; i < st.size; ++i) {
    std::vector<uint32_t> positions;
    for (uint32_t n = set_pool_[st.begin + i]; n != kEmptyStack; n = nodes_[n].parent) positions.push_back(nodes_[n].pos);
    std::reverse(positions.begin(), positions.end());
    s.stacks.push_back(std::move(positions));
  }
  return s;
}

uint32_t StackSpace::restore(const Snapshot& s) {
  acc_.clear();
  for (const auto& positions : s.stacks) {
    uint32_t n = kEmptyStack;
    for (uint32_t pos : positions) n = node(pos, n);
    acc_.push_back(n);
  }
  std::sort(acc_.begin(), acc_.end());
  acc_.erase(std::unique(acc_.begin(), acc_.end()), acc_.end());
  return intern(acc_, s.partial, s.partial_len);
}

bool StackSpace::large() const {
  // About 4 MB of transitions (thousands of states for a JSON grammar); rebuilding costs one cold
  // mask, well under a millisecond.
  return nodes_.size() > (1u << 18) || trans_.size() > (1u << 20) || closure_pool_.size() > (1u << 20) ||
         set_pool_.size() > (1u << 20);
}

}  // namespace graft::engine
