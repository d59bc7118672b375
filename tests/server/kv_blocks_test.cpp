// The slots' KV as blocks (server/kv_blocks.h) and the msgpack batch of server/kv_events.h. The
// stream as a router sees it, on the real server, is tests/server/test_kv_events.py (which also
// checks the block hash against Python's hashlib).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "server/kv_blocks.h"
#include "server/kv_events.h"

using graft::engine::Digest;
using graft::server::KvBlockEvent;
using graft::server::KvBlockTracker;
using graft::server::LoraTag;
using Kind = KvBlockEvent::Kind;

namespace {

std::vector<int32_t> iota(size_t n, int32_t from = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

const Digest kBase{};
const Digest kAdapter = [] {
  Digest d{};
  d[0] = 1;
  return d;
}();

}  // namespace

TEST(KvBlockTracker, StoresFullBlocksOnlyChainedToTheirParent) {
  KvBlockTracker t(2, 16);
  std::vector<KvBlockEvent> ev;
  t.sync(0, iota(40), kBase, {}, ev);  // 2 full blocks, 8 tokens over
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kStored);
  ASSERT_EQ(ev[0].hashes.size(), 2u);
  EXPECT_FALSE(ev[0].parent.has_value());
  EXPECT_EQ(ev[0].tokens, iota(32));
  EXPECT_LT(ev[0].hashes[0], uint64_t{1} << 63);
  const uint64_t second = ev[0].hashes[1];
  ev.clear();
  t.sync(0, iota(47), kBase, {}, ev);  // still 2 full blocks: nothing new
  EXPECT_TRUE(ev.empty());
  t.sync(0, iota(48), kBase, {}, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].hashes.size(), 1u);
  EXPECT_EQ(ev[0].parent, second);
  EXPECT_EQ(ev[0].tokens, iota(16, 32));
}

TEST(KvBlockTracker, SharedBlocksAreStoredOnceAndRemovedWithTheirLastHolder) {
  KvBlockTracker t(2, 16);
  std::vector<KvBlockEvent> ev;
  t.sync(0, iota(32), kBase, {}, ev);
  const std::vector<uint64_t> first = ev[0].hashes;
  ev.clear();
  std::vector<int32_t> other = iota(48);
  other[40] = 999;  // the same two blocks, then its own third
  t.sync(1, other, kBase, {}, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kStored);
  ASSERT_EQ(ev[0].hashes.size(), 1u);
  EXPECT_EQ(ev[0].parent, first[1]);
  const uint64_t third = ev[0].hashes[0];
  ev.clear();
  t.sync(0, iota(5), kBase, {}, ev);  // slot 0 drops both: slot 1 still holds them
  EXPECT_TRUE(ev.empty());
  t.sync(1, iota(20), kBase, {}, ev);  // slot 1 keeps block 0, drops 1 and its own 2
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kRemoved);
  EXPECT_EQ(ev[0].hashes, (std::vector<uint64_t>{first[1], third}));
}

TEST(KvBlockTracker, AdaptersMakeOtherChainsAndTagTheirBlocks) {
  KvBlockTracker t(2, 16);
  std::vector<KvBlockEvent> base, adapted;
  t.sync(0, iota(32), kBase, {}, base);
  const LoraTag tag{7, "pirate"};
  t.sync(1, iota(32), kAdapter, tag, adapted);
  ASSERT_EQ(adapted.size(), 1u);
  EXPECT_EQ(adapted[0].lora, tag);
  for (uint64_t h : adapted[0].hashes)
    EXPECT_EQ(std::count(base[0].hashes.begin(), base[0].hashes.end(), h), 0) << "an adapter block equals a base one";
  // The slot switching adapters drops its base chain and stores the adapter's (new, as slot 1
  // already holds the same adapted blocks: nothing to store).
  std::vector<KvBlockEvent> ev;
  t.sync(0, iota(32), kAdapter, tag, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, Kind::kRemoved);
  EXPECT_EQ(ev[0].hashes, base[0].hashes);
}

TEST(KvBlockTracker, ChangedTokensReplaceTheBlocksFromTheFirstChange) {
  KvBlockTracker t(1, 4);
  std::vector<KvBlockEvent> ev;
  t.sync(0, iota(12), kBase, {}, ev);
  const std::vector<uint64_t> old = ev[0].hashes;
  ev.clear();
  std::vector<int32_t> next = iota(12);
  next[5] = -1;  // in block 1
  t.sync(0, next, kBase, {}, ev);
  ASSERT_EQ(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, Kind::kRemoved);
  EXPECT_EQ(ev[0].hashes, (std::vector<uint64_t>{old[1], old[2]}));
  EXPECT_EQ(ev[1].kind, Kind::kStored);
  EXPECT_EQ(ev[1].parent, old[0]);
  EXPECT_EQ(ev[1].hashes.size(), 2u);
}

TEST(LoraTagOf, OneAdapterAtScaleOneIsItselfOthersAreNamedTogether) {
  graft::engine::Selection sel;
  EXPECT_EQ(graft::server::lora_tag(sel), LoraTag{});
  graft::engine::AdapterPick pick;
  pick.id = 3;
  pick.name = "pirate";
  pick.scale = 1.0f;
  sel.picks.push_back(pick);
  EXPECT_EQ(graft::server::lora_tag(sel), (LoraTag{3, "pirate"}));
  pick.id = 5;
  pick.name = "formal";
  pick.scale = 0.5f;
  sel.picks.push_back(pick);
  EXPECT_EQ(graft::server::lora_tag(sel), (LoraTag{std::nullopt, "pirate+formal*0.5"}));
}

TEST(KvEventBatch, IsVllmsArrayLayout) {
  const std::string b = graft::server::encode_kv_batch(1.5, {KvBlockEvent(Kind::kAllCleared)});
  // fixarray(3) [float64 1.5, fixarray(1) [fixarray(1) ["AllBlocksCleared"]], 0]
  const std::string want = std::string("\x93\xcb\x3f\xf8\0\0\0\0\0\0\x91\x91\xb0", 13) + "AllBlocksCleared" + std::string(1, '\0');
  EXPECT_EQ(b, want);
}

TEST(KvEventEndpoint, BindsAsVllmDoes) {
  EXPECT_TRUE(graft::server::binds("tcp://*:5557"));
  EXPECT_TRUE(graft::server::binds("ipc:///tmp/kv"));
  EXPECT_FALSE(graft::server::binds("tcp://10.0.0.3:5557"));
}
