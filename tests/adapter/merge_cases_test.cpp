// merge_tensor: LoKr against a dense Kronecker reference, diffs and biases, replacements,
// strength 0, thread chunking and the errors for malformed plans.
#include <thread>

#include "merge_test_util.h"

namespace graft::adapter::merge_test {
namespace {

// ---- LoKr ---------------------------------------------------------------------------------------

TEST(MergeLokr, EveryFactorCombinationEqualsDenseKronReference) {
  // The reference builds the dense kron(W1, W2) with the explicit index rule; exact (bit for bit)
  // because both multiply in the same order, (s·W1[p,q])·W2[r2,j], and form factored W1/W2 with
  // k-ascending sums from +0. A different order (s·(W1·W2)) would differ by ~1 F32 ulp.
  for (bool f1 : {false, true})
    for (bool f2 : {false, true}) {
      SCOPED_TRACE("w1 " + std::string(f1 ? "factored" : "full") + ", w2 " + (f2 ? "factored" : "full"));
      Plan plan;
      const auto* u = plan.add(lokr(f1, f2, 0.7f));
      plan.place(u, 0, 0, 8, 1.25f);
      for (MergePolicy policy : kPolicies)
        for (DType base_dt : kFloats) expect_matches_reference(rand_tensor(base_dt, {8, 15}, 56, 0.1f), plan, policy);
    }
}

TEST(MergeLokr, RowSliceAndMixWithLoraMatchReference) {
  // Rows 3..7 of a LoKr ΔW [8, 15] into base rows 0..4, plus a LoRA on rows 2..5 of the same base.
  Plan plan;
  const auto* k = plan.add(lokr(true, false, -0.3f));
  const auto* l =
      plan.add(LowRankUpdate{rand_tensor(DType::F32, {2, 15}, 57), rand_tensor(DType::F32, {4, 2}, 58), 0.5f});
  plan.place(k, 3, 0, 5);
  plan.place(l, 0, 2, 4);
  for (MergePolicy policy : kPolicies)
    expect_matches_reference(rand_tensor(DType::BF16, {6, 15}, 59, 0.1f), plan, policy);
}

// ---- diffs, biases, replacements ------------------------------------------------------------------

TEST(MergeDiff, ScaledDiffMatchesReference) {
  Plan plan;
  const auto* u = plan.add(DiffUpdate{rand_tensor(DType::F16, {7, 13}, 60, 0.05f), 0.5f});
  plan.place(u, 0, 0, 7, 2.0f);
  for (MergePolicy policy : kPolicies)
    expect_matches_reference(rand_tensor(DType::F32, {7, 13}, 61, 0.1f), plan, policy);
}

TEST(MergeDiff, BiasDiffOnRowSliceMatchesReference) {
  // A fused bias delta [12]; elements 3..8 land on bias elements 2..7 of a [9] bias.
  Plan plan;
  const auto* u = plan.add(DiffUpdate{rand_tensor(DType::F32, {12}, 62, 0.05f), 1.5f});
  plan.place(u, 3, 2, 6);
  const Tensor base = rand_tensor(DType::BF16, {9}, 63);
  for (MergePolicy policy : kPolicies) expect_matches_reference(base, plan, policy);
  const auto got = vals(merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::BF16));
  EXPECT_EQ(got[0], vals(base)[0]);
  EXPECT_EQ(got[8], vals(base)[8]);
  EXPECT_NE(got[2], vals(base)[2]);
}

TEST(MergeReplacement, WinsOverEveryDelta) {
  Plan plan;
  mixed_updates(plan);
  const Tensor value = rand_tensor(DType::BF16, {7, 13}, 70);
  plan.place(plan.add(Replacement{value}), 0, 0, 7, 0.5f);  // strength does not scale a replacement
  const Tensor base = rand_tensor(DType::F32, {7, 13}, 71);
  for (MergePolicy policy : kPolicies)
    for (DType out : kFloats)
      EXPECT_TRUE(same_bytes(bytes_of(merge_tensor(base, plan.planned, policy, out)), encode(vals(value), out), out));
  // Already in the output dtype: the value itself, zero-copy.
  EXPECT_EQ(merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::BF16).data, value.data);
}

TEST(MergeReplacement, RowSlicedReplacementSetsOnlyItsRows) {
  // Rows 7..13 of a fused [21, 13] replacement set base rows 0..6 of a [10, 13] base; rows 7..9
  // get the diff as usual.
  Plan plan;
  const Tensor value = rand_tensor(DType::F32, {21, 13}, 72);
  const auto* d = plan.add(DiffUpdate{rand_tensor(DType::F32, {10, 13}, 73), 1.0f});
  plan.place(d, 0, 0, 10);
  plan.place(plan.add(Replacement{value}), 7, 0, 7);
  const Tensor base = rand_tensor(DType::F32, {10, 13}, 74);
  const auto got = vals(merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::F32));
  const auto v = vals(value);
  Plan diff_only;
  diff_only.place(d, 0, 0, 10);
  const auto ref = reference(base, diff_only.planned, MergePolicy::DeltaF32);
  for (int64_t i = 0; i < 130; ++i) EXPECT_EQ(got[i], i < 91 ? v[91 + i] : ref[i]) << i;
}

TEST(MergeDiff, QuantizedBaseIsDequantizedRowByRow) {
  // A Q8_0 base [2, 32] (one block per row: f16 scale 0.5, int8 values) merges like its F32
  // dequantization.
  std::vector<uint8_t> q(2 * 34);
  for (int row = 0; row < 2; ++row) {
    const uint16_t half = f32_to_f16(0.5f);
    std::memcpy(q.data() + row * 34, &half, 2);
    for (int i = 0; i < 32; ++i) q[row * 34 + 2 + i] = static_cast<uint8_t>(static_cast<int8_t>(i - 16 + row));
  }
  const Tensor base = Tensor::owned(DType::Q8_0, {2, 32}, q);
  Plan plan;
  plan.place(plan.add(DiffUpdate{rand_tensor(DType::F32, {2, 32}, 64), 0.3f}), 0, 0, 2);
  const auto ref = reference(to_f32(base), plan.planned, MergePolicy::DeltaF32);
  EXPECT_TRUE(same_bytes(bytes_of(merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::F32)),
                         encode(ref, DType::F32), DType::F32));
}

// ---- strength 0, threads ------------------------------------------------------------------------

TEST(MergeStrength, ZeroStrengthReturnsTheBaseBitForBit) {
  Plan plan;
  mixed_updates(plan);
  for (auto& pu : plan.planned) pu.strength = 0.0f;
  plan.place(plan.add(DiffUpdate{rand_tensor(DType::F32, {7, 13}, 80), 0.0f}), 0, 0, 7);  // scale 0
  auto base_vals = rand_vals(7 * 13, 81);
  base_vals[0] = -0.0f;  // -0 + 0 would give +0
  base_vals[5] = 0.0f;
  for (DType base_dt : kFloats) {
    const Tensor base = make(base_dt, {7, 13}, base_vals);
    for (MergePolicy policy : kPolicies)
      for (DType out : kFloats) {
        SCOPED_TRACE(std::string(policy_name(policy)) + " " + std::string(dtype_name(base_dt)) + " -> " +
                     std::string(dtype_name(out)));
        const Tensor got = merge_tensor(base, plan.planned, policy, out);
        EXPECT_TRUE(same_bytes(bytes_of(got), encode(vals(base), out), out));
        if (out == base_dt) {
          EXPECT_EQ(got.data, base.data);  // pass-through is zero-copy
        }
      }
  }
}

TEST(MergeThreads, ResultIndependentOfChunking) {
  Plan plan;
  const auto* u =
      plan.add(LowRankUpdate{rand_tensor(DType::BF16, {3, 15}, 90), rand_tensor(DType::BF16, {21, 3}, 91), 1.0f});
  const auto* k = plan.add(lokr(true, true, 0.5f));
  plan.place(u, 0, 0, 21);
  plan.place(k, 0, 3, 8);
  // 70 rows: merge_tensor hands out at least 16 rows a chunk, so pools of 2-4 threads cut inside
  // the updates' rows (at 17, 23, 35, 52).
  const Tensor base = rand_tensor(DType::BF16, {70, 15}, 92, 0.1f);
  for (MergePolicy policy : kPolicies) {
    const auto serial = bytes_of(merge_tensor(base, plan.planned, policy, DType::F32));
    for (int threads : {1, 2, 3, 4}) {
      SCOPED_TRACE(std::string(policy_name(policy)) + " threads " + std::to_string(threads));
      ThreadPool pool(threads);
      EXPECT_TRUE(
          same_bytes(bytes_of(merge_tensor(base, plan.planned, policy, DType::F32, &pool)), serial, DType::F32));
    }
  }
}

// ---- errors ---------------------------------------------------------------------------------------

TEST(MergeErrors, RowRangeOutOfBoundsNamesShapes) {
  Plan plan;
  const auto* u =
      plan.add(LowRankUpdate{rand_tensor(DType::F32, {3, 13}, 1), rand_tensor(DType::F32, {7, 3}, 2), 1.0f});
  const Tensor base = rand_tensor(DType::F32, {5, 13}, 3);
  plan.place(u, 4, 0, 5);  // ΔW rows 4..8 of 7
  std::string msg = error_of([&] { merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::F32); });
  EXPECT_NE(msg.find("[7, 13]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[5, 13]"), std::string::npos) << msg;
  plan.planned[0] = {u, 0, 3, 3, 1.0f};  // base rows 3..5 of 5
  msg = error_of([&] { merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::F32); });
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[5, 13]"), std::string::npos) << msg;
}

TEST(MergeErrors, ColumnMismatchNamesShapes) {
  Plan plan;
  plan.place(plan.add(LowRankUpdate{rand_tensor(DType::F32, {3, 12}, 1), rand_tensor(DType::F32, {7, 3}, 2), 1.0f}), 0,
             0, 7);
  const std::string msg = error_of([&] {
    merge_tensor(rand_tensor(DType::F32, {7, 13}, 3), plan.planned, MergePolicy::DeltaF32, DType::F32);
  });
  EXPECT_NE(msg.find("[7, 12]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[7, 13]"), std::string::npos) << msg;
}

TEST(MergeErrors, ReplacementShapeMismatchNamesShapes) {
  Plan plan;
  plan.place(plan.add(Replacement{rand_tensor(DType::F32, {7, 12}, 1)}), 0, 0, 7);
  const std::string msg = error_of([&] {
    merge_tensor(rand_tensor(DType::F32, {7, 13}, 3), plan.planned, MergePolicy::DeltaF32, DType::F32);
  });
  EXPECT_NE(msg.find("[7, 12]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[7, 13]"), std::string::npos) << msg;
}

TEST(MergeErrors, FactorRankMismatchNamesShapes) {
  Plan plan;
  plan.place(plan.add(LowRankUpdate{rand_tensor(DType::F32, {3, 13}, 1), rand_tensor(DType::F32, {7, 2}, 2), 1.0f}), 0,
             0, 7);
  const std::string msg = error_of([&] {
    merge_tensor(rand_tensor(DType::F32, {7, 13}, 3), plan.planned, MergePolicy::DeltaF32, DType::F32);
  });
  EXPECT_NE(msg.find("A [3, 13]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("B [7, 2]"), std::string::npos) << msg;
}

TEST(MergeErrors, LowRankOnOneDimensionalBaseIsRefused) {
  Plan plan;
  plan.place(plan.add(LowRankUpdate{rand_tensor(DType::F32, {1, 1}, 1), rand_tensor(DType::F32, {7, 1}, 2), 1.0f}), 0,
             0, 7);
  const std::string msg =
      error_of([&] { merge_tensor(rand_tensor(DType::F32, {7}, 3), plan.planned, MergePolicy::DeltaF32, DType::F32); });
  EXPECT_NE(msg.find("1-D base [7]"), std::string::npos) << msg;
}

TEST(MergeErrors, AmbiguousLokrFactorsAreRefused) {
  KroneckerUpdate k = lokr(false, false, 1.0f);
  k.w1_a = rand_tensor(DType::F32, {2, 2}, 1);
  k.w1_b = rand_tensor(DType::F32, {2, 3}, 2);
  Plan plan;
  plan.place(plan.add(k), 0, 0, 8);
  const std::string msg = error_of([&] {
    merge_tensor(rand_tensor(DType::F32, {8, 15}, 3), plan.planned, MergePolicy::DeltaF32, DType::F32);
  });
  EXPECT_NE(msg.find("w1 [2, 3]"), std::string::npos) << msg;
}

TEST(MergeErrors, OverlappingReplacementsAndNullUpdatesAreRefused) {
  Plan plan;
  const auto* r = plan.add(Replacement{rand_tensor(DType::F32, {7, 13}, 1)});
  plan.place(r, 0, 0, 7);
  plan.place(r, 0, 3, 4);
  const Tensor base = rand_tensor(DType::F32, {7, 13}, 2);
  EXPECT_NE(error_of([&] { merge_tensor(base, plan.planned, MergePolicy::DeltaF32, DType::F32); }).find("replacement"),
            std::string::npos);
  const std::vector<PlannedUpdate> null_plan{{nullptr, 0, 0, 7, 1.0f}};
  EXPECT_NE(error_of([&] { merge_tensor(base, null_plan, MergePolicy::DeltaF32, DType::F32); }).find("null"),
            std::string::npos);
  EXPECT_THROW(merge_tensor(base, {}, MergePolicy::DeltaF32, DType::I8), Error);
}

}  // namespace
}  // namespace graft::adapter::merge_test
