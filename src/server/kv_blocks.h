// graft's KV cache as fixed-size blocks, for the routers that read vLLM's KV-cache events (llm-d's
// precise prefix-cache scorer, NVIDIA Dynamo's KV router).
//
// graft keeps each slot's KV contiguous; to the outside a slot holding N tokens holds its first
// floor(N / B) blocks of B tokens (--kv-block-size, default 16, vLLM's). Block k's key chains its
// tokens to the block before it and to the adapter set that computed it:
//
//   hash_k = low 63 bits of SHA-256(hash_{k-1} as 8 bytes LE (0 for k = 0) || selection digest || tokens as int32 LE)
//
// so a block under an adapter never equals a base block, and the same text under other adapters or
// scales is another chain. Two slots holding the same block share it (a reference count): it is
// stored when the first takes it and removed when the last drops it, as vLLM reports blocks shared
// by prefix caching. (63 bits: positive in both the int64 and uint64 decoders routers use.)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graft/engine/adapter_registry.h"

namespace graft::server {

// What the event names as the adapter of a block: vLLM's lora_id and lora_name; none for the base.
struct LoraTag {
  std::optional<int64_t> id;
  std::string name;  // "" for the base
  bool operator==(const LoraTag&) const = default;
};

// The tag of a request's adapters: one adapter at scale 1 is itself (what an OpenAI `model` naming
// it selects); several, or another scale, are named "a*0.5+b" in id order with no id.
LoraTag lora_tag(const engine::Selection& selection);

struct KvBlockEvent {
  enum class Kind { kStored, kRemoved, kAllCleared };
  KvBlockEvent() = default;
  explicit KvBlockEvent(Kind k) : kind(k) {}
  Kind kind = Kind::kStored;
  std::vector<uint64_t> hashes;
  std::optional<uint64_t> parent;  // kStored: the block before the first, if any
  std::vector<int32_t> tokens;     // kStored: every token of the blocks, in order
  LoraTag lora;                    // kStored
};

class KvBlockTracker {
 public:
  KvBlockTracker(size_t slots, int64_t block_size);
  int64_t block_size() const { return block_size_; }

  // Slot `slot` now holds KV for `tokens` computed under `digest` (adapters `lora`): appends the
  // blocks it no longer holds (kRemoved, only those no other slot holds) and then those it newly
  // holds (kStored, only those no other slot held) to `out`.
  void sync(size_t slot, const std::vector<int32_t>& tokens, const engine::Digest& digest, const LoraTag& lora,
            std::vector<KvBlockEvent>& out);

 private:
  struct SlotBlocks {
    std::vector<uint64_t> hashes;
    std::vector<int32_t> tokens;  // the hashes' tokens (hashes.size() * block_size)
    engine::Digest digest{};
  };
  uint64_t block_hash(uint64_t parent, const engine::Digest& digest, const int32_t* tokens) const;

  int64_t block_size_;
  std::vector<SlotBlocks> slots_;
  std::unordered_map<uint64_t, int> refs_;
};

}  // namespace graft::server
