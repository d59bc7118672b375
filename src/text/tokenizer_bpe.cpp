// BPE merge core: rank-ordered merges with a priority queue over a linked list of symbols (HF
// tokenizers' Word::merge_all), with byte fallback / unk handling as in HF's BPE::merge_word, and
// the llama.cpp SentencePiece variant that merges by vocabulary score when no merges are given.
#include <queue>

#include "text/tokenizer_internal.h"

namespace graft::text::detail {

namespace {

const char kHex[] = "0123456789ABCDEF";

std::string byte_token(uint8_t b) {
  std::string s = "<0x";
  s += kHex[b >> 4];
  s += kHex[b & 15];
  s += '>';
  return s;
}

// Byte length of the character at s[i] (1 for a stray byte, so malformed input still advances).
size_t char_len(std::string_view s, size_t i) {
  size_t n = utf8_valid_len(s, i);
  return n ? n : 1;
}

}  // namespace

void BpeModel::index_byte_tokens() {
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(byte_token(static_cast<uint8_t>(b)));
    byte_ids[b] = it == vocab.end() ? -1 : it->second;
  }
}

bool BpeModel::add_merge(const std::string& a, const std::string& b, int32_t rank) {
  auto ia = vocab.find(a), ib = vocab.find(b), im = vocab.find(a + b);
  if (ia == vocab.end() || ib == vocab.end() || im == vocab.end()) return false;
  // A repeated pair keeps the later rank, as HF's HashMap collect does.
  merges[key(ia->second, ib->second)] = {rank, im->second};
  return true;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (use_scores) {
    tokenize_scored(word, out);
    return;
  }
  if (ignore_merges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  tokenize_ranked(word, out);
}

void BpeModel::tokenize_ranked(std::string_view word, std::vector<int32_t>& out) const {
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  auto push = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, n + 1, true});
  };

  // Initial symbols: one per character; unknown characters become <0xXX> tokens (byte
  // fallback) or unk (consecutive unks fused when fuse_unk), or are dropped without either.
  bool pending_unk = false;
  for (size_t i = 0; i < word.size();) {
    size_t n = char_len(word, i);
    std::string_view ch = word.substr(i, n);
    i += n;
    auto it = vocab.find(ch);
    if (it != vocab.end()) {
      if (pending_unk) push(*unk_id), pending_unk = false;
      push(it->second);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (unsigned char c : ch) all = all && byte_ids[c] >= 0;
      if (all) {
        // HF pushes the bytes without flushing a pending unk first; keep its order.
        for (unsigned char c : ch) push(byte_ids[c]);
        continue;
      }
    }
    if (unk_id) {
      if (pending_unk && !fuse_unk) push(*unk_id);
      pending_unk = true;
    }
  }
  if (pending_unk) push(*unk_id);
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Cand {
    int32_t rank, pos, new_id;
  };
  auto worse = [](const Cand& a, const Cand& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> queue(worse);
  auto consider = [&](int32_t left) {
    int32_t right = syms[left].next;
    if (right < 0) return;
    auto it = merges.find(key(syms[left].id, syms[right].id));
    if (it != merges.end()) queue.push({it->second.first, left, it->second.second});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(syms.size()); ++i) consider(i);

  while (!queue.empty()) {
    Cand top = queue.top();
    queue.pop();
    Sym& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    Sym& right = syms[left.next];
    // Stale entry: the pair at this position changed since it was queued.
    auto it = merges.find(key(left.id, right.id));
    if (it == merges.end() || it->second.second != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = top.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

void BpeModel::tokenize_scored(std::string_view text, std::vector<int32_t>& out) const {
  struct Sym {
    size_t start, n;
    int32_t prev, next;
  };
  std::vector<Sym> syms;
  for (size_t i = 0; i < text.size();) {
    size_t n = char_len(text, i);
    int32_t idx = static_cast<int32_t>(syms.size());
    syms.push_back({i, n, idx - 1, idx + 1});
    i += n;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Bigram {
    float score;
    int32_t left, right;
    size_t size;
  };
  // Highest score first; equal scores: leftmost first (llama.cpp llm_bigram_spm::comparator).
  auto lower = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(lower)> queue(lower);
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    std::string_view t = text.substr(syms[left].start, syms[left].n + syms[right].n);
    auto it = vocab.find(t);
    if (it == vocab.end()) return;
    size_t id = static_cast<size_t>(it->second);
    float score = id < scores.size() ? scores[id] : 0.0f;
    queue.push({score, left, right, t.size()});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);

  while (!queue.empty()) {
    Bigram bg = queue.top();
    queue.pop();
    Sym& l = syms[bg.left];
    Sym& r = syms[bg.right];
    if (l.n == 0 || r.n == 0 || l.n + r.n != bg.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) syms[r.next].prev = bg.left;
    try_add(l.prev, bg.left);
    try_add(bg.left, l.next);
  }

  for (int32_t i = 0; i >= 0; i = syms[i].next) {
    std::string_view t = text.substr(syms[i].start, syms[i].n);
    auto it = vocab.find(t);
    if (it != vocab.end()) {
      out.push_back(it->second);
      continue;
    }
    // Only single characters can be missing (merged symbols are vocabulary entries): emit their
    // bytes as <0xXX> tokens, or unk where a byte token is absent.
    for (unsigned char c : t) {
      if (byte_ids[c] >= 0) {
        out.push_back(byte_ids[c]);
      } else if (unk_id) {
        out.push_back(*unk_id);
      }
    }
  }
}

}  // namespace graft::text::detail
