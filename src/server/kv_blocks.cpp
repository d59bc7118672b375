#include "server/kv_blocks.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "graft/io/hash.h"

namespace graft::server {

LoraTag lora_tag(const engine::Selection& selection) {
  const auto& picks = selection.picks;
  if (picks.empty()) return {};
  if (picks.size() == 1 && picks[0].scale == 1.0f) return {picks[0].id, picks[0].name};
  LoraTag tag;
  for (const auto& p : picks) {
    char scale[32] = "";
    if (p.scale != 1.0f) std::snprintf(scale, sizeof scale, "*%g", static_cast<double>(p.scale));
    tag.name += (tag.name.empty() ? "" : "+") + p.name + scale;
  }
  return tag;
}

KvBlockTracker::KvBlockTracker(size_t slots, int64_t block_size) : block_size_(block_size), slots_(slots) {}

uint64_t KvBlockTracker::block_hash(uint64_t parent, const engine::Digest& digest, const int32_t* tokens) const {
  io::Hasher h;
  uint8_t p[8];
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(parent >> (8 * i));
  h.update(p, sizeof p);
  h.update(digest.data(), digest.size());
  for (int64_t i = 0; i < block_size_; ++i) {
    const uint32_t t = static_cast<uint32_t>(tokens[i]);
    const uint8_t le[4] = {static_cast<uint8_t>(t), static_cast<uint8_t>(t >> 8), static_cast<uint8_t>(t >> 16),
                           static_cast<uint8_t>(t >> 24)};
    h.update(le, sizeof le);
  }
  const io::Sha256Digest d = io::finish_sha256(h);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{d[static_cast<size_t>(i)]} << (8 * i);
  return v & ~(uint64_t{1} << 63);
}

void KvBlockTracker::sync(size_t slot, const std::vector<int32_t>& tokens, const engine::Digest& digest,
                          const LoraTag& lora, std::vector<KvBlockEvent>& out) {
  SlotBlocks& s = slots_.at(slot);
  const size_t b = static_cast<size_t>(block_size_);
  const size_t full = tokens.size() / b;
  // The blocks kept: those before the first whose tokens (or adapters) changed.
  size_t keep = 0;
  if (s.digest == digest) {
    const size_t n = std::min(s.hashes.size(), full);
    while (keep < n && std::equal(tokens.begin() + static_cast<std::ptrdiff_t>(keep * b),
                                  tokens.begin() + static_cast<std::ptrdiff_t>((keep + 1) * b),
                                  s.tokens.begin() + static_cast<std::ptrdiff_t>(keep * b)))
      ++keep;
  }
  if (keep < s.hashes.size()) {
    KvBlockEvent removed(KvBlockEvent::Kind::kRemoved);
    for (size_t k = keep; k < s.hashes.size(); ++k)
      if (--refs_[s.hashes[k]] == 0) {
        refs_.erase(s.hashes[k]);
        removed.hashes.push_back(s.hashes[k]);
      }
    if (!removed.hashes.empty()) out.push_back(std::move(removed));
    s.hashes.resize(keep);
    s.tokens.resize(keep * b);
  }
  s.digest = digest;
  if (full <= keep) return;
  // The new blocks, as runs of blocks no other slot holds (each run one event with its parent).
  KvBlockEvent stored;
  for (size_t k = keep; k < full; ++k) {
    const uint64_t parent = k ? s.hashes[k - 1] : 0;
    const int32_t* t = tokens.data() + k * b;
    const uint64_t h = block_hash(parent, digest, t);
    s.hashes.push_back(h);
    s.tokens.insert(s.tokens.end(), t, t + b);
    if (refs_[h]++ > 0) {  // held elsewhere already: ends a run
      if (!stored.hashes.empty()) out.push_back(std::move(stored));
      stored = {};
      continue;
    }
    if (stored.hashes.empty()) {
      stored.parent = k ? std::optional<uint64_t>(parent) : std::nullopt;
      stored.lora = lora;
    }
    stored.hashes.push_back(h);
    stored.tokens.insert(stored.tokens.end(), t, t + b);
  }
  if (!stored.hashes.empty()) out.push_back(std::move(stored));
}

}  // namespace graft::server
