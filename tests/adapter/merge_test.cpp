// merge_tensor: policy names, each policy bit-exact against the scalar reference in
// merge_test_util.h, fused-projection row placement, and fixtures that tell the policies apart.
#include "merge_test_util.h"

namespace graft::adapter::merge_test {
namespace {

// ---- policy names -----------------------------------------------------------------------------

TEST(MergePolicyName, ParsesCanonicalAndKebabFormsCaseInsensitively) {
  for (MergePolicy p : kPolicies) EXPECT_EQ(parse_merge_policy(policy_name(p)), p);
  EXPECT_EQ(parse_merge_policy("rankwise-f32"), MergePolicy::RankWiseF32);
  EXPECT_EQ(parse_merge_policy("Rounded-BF16-Delta"), MergePolicy::RoundedBF16Delta);
  EXPECT_EQ(parse_merge_policy("delta-f32"), MergePolicy::DeltaF32);
  EXPECT_EQ(parse_merge_policy("DELTAF32"), MergePolicy::DeltaF32);
}

TEST(MergePolicyName, UnknownNameListsTheAcceptedOnes) {
  const std::string msg = error_of([] { parse_merge_policy("bf16"); });
  for (const char* n :
       {"'bf16'", "RankWiseF32", "RoundedBF16Delta", "DeltaF32", "rankwise-f32", "rounded-bf16-delta", "delta-f32"})
    EXPECT_NE(msg.find(n), std::string::npos) << msg;
}

// ---- each policy against its reference loop ---------------------------------------------------

TEST(MergePolicy, DeltaF32MatchesReferenceLoop) { expect_policy_matches_reference(MergePolicy::DeltaF32); }
TEST(MergePolicy, RankWiseF32MatchesReferenceLoop) { expect_policy_matches_reference(MergePolicy::RankWiseF32); }
TEST(MergePolicy, RoundedBf16DeltaMatchesReferenceLoop) {
  expect_policy_matches_reference(MergePolicy::RoundedBF16Delta);
}

TEST(MergePolicy, RoundedBf16DeltaOutputIsBf16Representable) {
  Plan plan;
  mixed_updates(plan);
  const Tensor got =
      merge_tensor(rand_tensor(DType::F32, {7, 13}, 1, 0.1f), plan.planned, MergePolicy::RoundedBF16Delta, DType::F32);
  for (float x : vals(got)) EXPECT_EQ(bf16r(x), x);
}

// ---- fused projections ------------------------------------------------------------------------

TEST(MergeRows, FusedUpdateSplitIntoThreeBasesMatchesReferenceAndFusedMerge) {
  // One ΔW [21, 13] (q; k; v, 7 rows each) split into three [7, 13] bases.
  Plan plan;
  const auto* u =
      plan.add(LowRankUpdate{rand_tensor(DType::BF16, {3, 13}, 20), rand_tensor(DType::BF16, {21, 3}, 21), 0.625f});
  const auto fused_vals = rand_vals(21 * 13, 22, 0.1f);
  const Tensor fused = make(DType::BF16, {21, 13}, fused_vals);
  for (MergePolicy policy : kPolicies) {
    const Tensor fused_out = merge_tensor(fused, std::vector<PlannedUpdate>{{u, 0, 0, 21, 1.0f}}, policy, DType::BF16);
    for (int part = 0; part < 3; ++part) {
      SCOPED_TRACE(std::string(policy_name(policy)) + " part " + std::to_string(part));
      const std::vector<float> part_vals(fused_vals.begin() + part * 91, fused_vals.begin() + (part + 1) * 91);
      const Tensor base = make(DType::BF16, {7, 13}, part_vals);
      Plan one;
      one.place(u, 7 * part, 0, 7);
      expect_matches_reference(base, one, policy);
      // The part equals the same rows of the fused merge.
      const Tensor got = merge_tensor(base, one.planned, policy, DType::BF16);
      const auto all = bytes_of(fused_out);
      const std::vector<uint8_t> rows(all.begin() + part * 182, all.begin() + (part + 1) * 182);
      EXPECT_TRUE(same_bytes(bytes_of(got), rows, DType::BF16));
    }
  }
}

TEST(MergeRows, SeparateUpdatesPlacedIntoOneFusedBaseMatchReference) {
  // q [7, 13], k [4, 13], v [4, 13] adapters placed into a fused [15, 13] base; v also has a diff.
  Plan plan;
  const auto* q =
      plan.add(LowRankUpdate{rand_tensor(DType::F32, {3, 13}, 30), rand_tensor(DType::F32, {7, 3}, 31), 2.0f});
  const auto* k =
      plan.add(LowRankUpdate{rand_tensor(DType::F16, {2, 13}, 32), rand_tensor(DType::F16, {4, 2}, 33), 0.5f});
  const auto* v =
      plan.add(LowRankUpdate{rand_tensor(DType::BF16, {3, 13}, 34), rand_tensor(DType::BF16, {4, 3}, 35), 1.0f});
  const auto* vd = plan.add(DiffUpdate{rand_tensor(DType::F32, {4, 13}, 36, 0.02f), 1.0f});
  plan.place(q, 0, 0, 7);
  plan.place(k, 0, 7, 4, 0.9f);
  plan.place(v, 0, 11, 4, 1.1f);
  plan.place(vd, 0, 11, 4);
  for (MergePolicy policy : kPolicies)
    for (DType base_dt : kFloats) expect_matches_reference(rand_tensor(base_dt, {15, 13}, 37, 0.1f), plan, policy);
}

TEST(MergeRows, RowsNoUpdateCoversPassThroughUnderEveryPolicy) {
  // Only rows 2..4 are adapted; the F32 base's other rows keep their exact F32 bits.
  Plan plan;
  const auto* u = plan.add(DiffUpdate{rand_tensor(DType::F32, {3, 13}, 40), 1.0f});
  plan.place(u, 0, 2, 3);
  const Tensor base = rand_tensor(DType::F32, {7, 13}, 41);
  for (MergePolicy policy : kPolicies) {
    const auto got = vals(merge_tensor(base, plan.planned, policy, DType::F32));
    const auto want = vals(base);
    for (int64_t i = 0; i < 7 * 13; ++i)
      if (i / 13 < 2 || i / 13 > 4) {
        EXPECT_EQ(got[i], want[i]) << policy_name(policy) << " element " << i;
      }
  }
}

// ---- fixtures that tell the policies apart ----------------------------------------------------

TEST(MergePolicy, RankWiseF32DiffersFromDeltaF32OnHugeBase) {
  // W = 1e8 (F32 spacing 8 there); B = [1, 1], A = [[3 ...], [3 ...]]. DeltaF32: P = 6, 1e8 + 6
  // rounds to 1e8 + 8. RankWiseF32: 1e8 + 3 rounds back to 1e8, twice.
  Plan plan;
  const auto* u = plan.add(LowRankUpdate{make(DType::F32, {2, 4}, std::vector<float>(8, 3.0f)),
                                         make(DType::F32, {1, 2}, {1.0f, 1.0f}), 1.0f});
  plan.place(u, 0, 0, 1);
  const Tensor base = make(DType::F32, {1, 4}, std::vector<float>(4, 1e8f));
  const auto delta = vals(merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::F32));
  const auto rank_wise = vals(merge_tensor(base, plan.planned, MergePolicy::RankWiseF32, DType::F32));
  EXPECT_NE(delta, rank_wise);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(delta[i], 100000008.0f);
    EXPECT_EQ(rank_wise[i], 100000000.0f);
  }
  EXPECT_EQ(delta, reference(base, plan.planned, MergePolicy::DeltaF32));
  EXPECT_EQ(rank_wise, reference(base, plan.planned, MergePolicy::RankWiseF32));
}

TEST(MergePolicy, RoundedBf16DiffersFromDeltaF32) {
  // W = 1.0 (BF16 0x3F80; BF16 spacing 2^-7 there), D = 2^-8 + 2^-18 (exact in F32).
  //   DeltaF32, BF16 out: 1 + 2^-8 + 2^-18 is just above the midpoint 1 + 2^-8 -> 0x3F81 (1 + 2^-7).
  //   RoundedBF16Delta: bf16(D) = 2^-8 (0x3B80: the 2^-18 is below BF16's 2^-15 spacing at 2^-8),
  //   then 1 + 2^-8 is an exact tie -> even mantissa -> 0x3F80 (1.0).
  // Element 1: W = 1.0, D = 2^-6: exact in both (0x3F82).
  const float d0 = 1.0f / 256 + 1.0f / 262144;
  Plan plan;
  const auto* u =
      plan.add(LowRankUpdate{make(DType::F32, {1, 2}, {d0, 1.0f / 64}), make(DType::F32, {1, 1}, {1.0f}), 1.0f});
  plan.place(u, 0, 0, 1);
  const Tensor base = make(DType::BF16, {1, 2}, {1.0f, 1.0f});
  const Tensor delta = merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::BF16);
  const Tensor rounded = merge_tensor(base, plan.planned, MergePolicy::RoundedBF16Delta, DType::BF16);
  EXPECT_EQ(delta.as<uint16_t>()[0], 0x3F81);
  EXPECT_EQ(rounded.as<uint16_t>()[0], 0x3F80);
  EXPECT_EQ(delta.as<uint16_t>()[1], 0x3F82);
  EXPECT_EQ(rounded.as<uint16_t>()[1], 0x3F82);
}

TEST(MergePolicy, RoundedBf16DeltaRoundsSpecialValuesLikeF32ToBf16) {
  // NaN, infinities, overflow past the largest BF16, subnormals and signed zeros take the same
  // path as graft::f32_to_bf16 (the reference), in a row long enough for the vectorized loop.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float big = std::numeric_limits<float>::max();
  std::vector<float> w = {1.0f, 2.0f, -1.0f, big, 1e-40f, -0.0f, 0.0f, big, -big, 3.0f, 1.0f + 1.0f / 256};
  std::vector<float> d = {nan, inf, -inf, big, 1e-40f, -0.0f, -0.0f, 1e30f, -1e30f, 0.0f, 1.0f / 65536};
  const int64_t n = static_cast<int64_t>(w.size());
  for (int64_t i = 0; i < 40 - n; ++i) {
    w.push_back(0.1f * static_cast<float>(i));
    d.push_back(-0.01f * static_cast<float>(i));
  }
  Plan plan;
  plan.place(plan.add(DiffUpdate{make(DType::F32, {1, 40}, d), 1.0f}), 0, 0, 1);
  const Tensor base = make(DType::F32, {1, 40}, w);
  const auto ref = reference(base, plan.planned, MergePolicy::RoundedBF16Delta);
  const Tensor got = merge_tensor(base, plan.planned, MergePolicy::RoundedBF16Delta, DType::F32);
  EXPECT_TRUE(same_bytes(bytes_of(got), encode(ref, DType::F32), DType::F32));
}

TEST(MergePolicy, RankWiseF32SkipsZeroRankTerms) {
  // B = [[0]]: RankWiseF32 skips b == 0, so W = -0.0 stays -0.0 and an infinite A entry is never
  // multiplied; DeltaF32 forms P = 0·A (+0 and 0·inf = NaN) and adds it: -0 + +0 = +0.
  Plan plan;
  const auto* u = plan.add(LowRankUpdate{make(DType::F32, {1, 2}, {1.0f, std::numeric_limits<float>::infinity()}),
                                         make(DType::F32, {1, 1}, {0.0f}), 1.0f});
  plan.place(u, 0, 0, 1);
  const Tensor base = make(DType::F32, {1, 2}, {-0.0f, 2.0f});
  const auto rank_wise = vals(merge_tensor(base, plan.planned, MergePolicy::RankWiseF32, DType::F32));
  const auto delta = vals(merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::F32));
  EXPECT_TRUE(std::signbit(rank_wise[0]) && rank_wise[0] == 0.0f);
  EXPECT_EQ(rank_wise[1], 2.0f);
  EXPECT_TRUE(!std::signbit(delta[0]) && delta[0] == 0.0f);
  EXPECT_TRUE(std::isnan(delta[1]));
}

}  // namespace
}  // namespace graft::adapter::merge_test
