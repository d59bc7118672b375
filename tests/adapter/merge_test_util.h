// Shared by the merge tests: deterministic fixtures and an independent scalar reference of the
// formulas in merge.h, written as whole-update loops in the header's order (sums from +0,
// k ascending, updates in plan order, mul then add with no contraction: the project builds with
// -ffp-contract=off). Same policy and order => bit-exact comparisons.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "graft/adapter/merge.h"
#include "graft/core/error.h"
#include "support/errors.h"

namespace graft::adapter::merge_test {

// ---- fixtures ---------------------------------------------------------------------------------

// Deterministic values in [-scale, scale) without relying on std::uniform_real_distribution.
inline std::vector<float> rand_vals(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * (static_cast<float>(gen() >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f);
  return v;
}

inline Tensor make(DType dt, const Shape& shape, const std::vector<float>& v) {
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(dt, static_cast<int64_t>(v.size()))));
  convert_from_f32(v.data(), dt, bytes.data(), static_cast<int64_t>(v.size()));
  return Tensor::owned(dt, shape, std::move(bytes));
}

inline Tensor rand_tensor(DType dt, const Shape& shape, uint32_t seed, float scale = 1.0f) {
  return make(dt, shape, rand_vals(static_cast<size_t>(shape_numel(shape)), seed, scale));
}

// Values of a tensor through the scalar converters (independent of convert_to_f32).
inline std::vector<float> vals(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) {
    if (t.dtype == DType::F32)
      std::memcpy(&v[i], t.as<uint8_t>() + 4 * i, 4);
    else if (t.dtype == DType::BF16)
      v[i] = bf16_to_f32(t.as<uint16_t>()[i]);
    else
      v[i] = f16_to_f32(t.as<uint16_t>()[i]);
  }
  return v;
}

inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = t.as<uint8_t>();
  return std::vector<uint8_t>(p, p + t.nbytes());
}

// F32 values -> the bytes of `dt`, through the scalar converters.
inline std::vector<uint8_t> encode(const std::vector<float>& v, DType dt) {
  std::vector<uint8_t> out(static_cast<size_t>(dtype_bytes(dt, static_cast<int64_t>(v.size()))));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = dt == DType::BF16 ? f32_to_bf16(v[i]) : f32_to_f16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

inline float bf16r(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// Owns updates so PlannedUpdates can point at them.
struct Plan {
  std::deque<Update> updates;
  std::vector<PlannedUpdate> planned;
  const Update* add(Update u) {
    updates.push_back(std::move(u));
    return &updates.back();
  }
  void place(const Update* u, int64_t src, int64_t dst, int64_t rows, float strength = 1.0f) {
    planned.push_back(PlannedUpdate{u, src, dst, rows, strength});
  }
};

// ---- the reference ----------------------------------------------------------------------------

// Dense F32 factor: full, or lo·hi summed from +0 with k ascending.
inline std::vector<float> dense_factor(const Tensor& full, const Tensor& lo, const Tensor& hi, int64_t& rows,
                                       int64_t& cols) {
  if (full.data) {
    rows = full.shape[0];
    cols = full.shape[1];
    return vals(full);
  }
  rows = lo.shape[0];
  cols = hi.shape[1];
  const int64_t r = lo.shape[1];
  const auto l = vals(lo), h = vals(hi);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < r; ++k) acc = acc + l[i * r + k] * h[k * cols + j];
      w[i * cols + j] = acc;
    }
  return w;
}

// Dense s·kron(W1, W2) by the Kronecker index rule Δ[i1·m+i2, j1·n+j2] = (s·W1[i1,j1])·W2[i2,j2].
inline std::vector<float> dense_kron(const KroneckerUpdate& k, float s, int64_t& rows, int64_t& cols) {
  int64_t p, q, m, n;
  const auto w1 = dense_factor(k.w1, k.w1_a, k.w1_b, p, q);
  const auto w2 = dense_factor(k.w2, k.w2_a, k.w2_b, m, n);
  rows = p * m;
  cols = q * n;
  std::vector<float> d(static_cast<size_t>(rows * cols));
  for (int64_t i1 = 0; i1 < p; ++i1)
    for (int64_t j1 = 0; j1 < q; ++j1)
      for (int64_t i2 = 0; i2 < m; ++i2)
        for (int64_t j2 = 0; j2 < n; ++j2)
          d[(i1 * m + i2) * cols + j1 * n + j2] = (s * w1[i1 * q + j1]) * w2[i2 * n + j2];
  return d;
}

// The header's formulas as whole-update loops (no replacements): F32 values before the final
// conversion to the output dtype.
inline std::vector<float> reference(const Tensor& base, const std::vector<PlannedUpdate>& plan, MergePolicy policy) {
  const int64_t rows = base.shape[0], cols = base.shape.size() == 2 ? base.shape[1] : 1;
  std::vector<float> w = vals(base), d(w.size(), 0.0f);
  std::vector<bool> touched(static_cast<size_t>(rows), false);
  for (const PlannedUpdate& pu : plan) {
    const Update& u = *pu.update;
    if (const auto* lr = std::get_if<LowRankUpdate>(&u)) {
      const float s = lr->scale * pu.strength;
      if (s == 0.0f) continue;
      const auto a = vals(lr->a), b = vals(lr->b);
      const int64_t r = lr->a.shape[0];
      for (int64_t l = 0; l < pu.rows; ++l) {
        const int64_t o = pu.dst_row + l, src = pu.src_row + l;
        touched[o] = true;
        if (policy == MergePolicy::RankWiseF32) {
          for (int64_t k = 0; k < r; ++k) {
            const float bk = s * b[src * r + k];
            if (bk == 0.0f) continue;
            for (int64_t i = 0; i < cols; ++i) w[o * cols + i] = w[o * cols + i] + bk * a[k * cols + i];
          }
        } else {
          for (int64_t i = 0; i < cols; ++i) {
            float p = 0.0f;
            for (int64_t k = 0; k < r; ++k) p = p + b[src * r + k] * a[k * cols + i];
            d[o * cols + i] = d[o * cols + i] + s * p;
          }
        }
      }
      continue;
    }
    // Kronecker and diff: one dense term per element, added to W (rank-wise) or D.
    std::vector<float> term;
    if (const auto* kr = std::get_if<KroneckerUpdate>(&u)) {
      const float s = kr->scale * pu.strength;
      if (s == 0.0f) continue;
      int64_t kr_rows, kr_cols;
      term = dense_kron(*kr, s, kr_rows, kr_cols);
    } else {
      const auto& df = std::get<DiffUpdate>(u);
      const float s = df.scale * pu.strength;
      if (s == 0.0f) continue;
      term = vals(df.diff);
      for (auto& x : term) x = s * x;
    }
    float* acc = policy == MergePolicy::RankWiseF32 ? w.data() : d.data();
    for (int64_t l = 0; l < pu.rows; ++l) {
      const int64_t o = pu.dst_row + l, src = pu.src_row + l;
      touched[o] = true;
      for (int64_t i = 0; i < cols; ++i) acc[o * cols + i] = acc[o * cols + i] + term[src * cols + i];
    }
  }
  for (int64_t o = 0; o < rows; ++o) {
    if (!touched[o]) continue;
    for (int64_t i = 0; i < cols; ++i) {
      float& x = w[o * cols + i];
      if (policy == MergePolicy::DeltaF32) x = x + d[o * cols + i];
      if (policy == MergePolicy::RoundedBF16Delta) x = bf16r(x + bf16r(d[o * cols + i]));
    }
  }
  return w;
}

// First differing element, for readable failures.
inline ::testing::AssertionResult same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                             DType dt) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  const size_t es = dt == DType::F32 ? 4 : 2;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) return ::testing::AssertionFailure() << "element " << i / es << " differs";
  return ::testing::AssertionSuccess();
}

inline const MergePolicy kPolicies[] = {MergePolicy::RankWiseF32, MergePolicy::RoundedBF16Delta, MergePolicy::DeltaF32};
inline const DType kFloats[] = {DType::F32, DType::BF16, DType::F16};

// Merges `plan` into `base` for every output dtype and compares with the reference.
inline void expect_matches_reference(const Tensor& base, const Plan& plan, MergePolicy policy) {
  const auto ref = reference(base, plan.planned, policy);
  for (DType out : kFloats) {
    SCOPED_TRACE(std::string(policy_name(policy)) + " base " + std::string(dtype_name(base.dtype)) + " -> " +
                 std::string(dtype_name(out)));
    const Tensor got = merge_tensor(base, plan.planned, policy, out);
    ASSERT_EQ(got.dtype, out);
    ASSERT_EQ(got.shape, base.shape);
    EXPECT_TRUE(same_bytes(bytes_of(got), encode(ref, out), out));
  }
}

// out 7, in 13: two LoRAs (r 3 and 2; F32/BF16/F16 factors; one B entry 0) and a diff, with
// different scales and strengths (not powers of two, so folding a scale elsewhere would change
// bits), one update covering only rows 2..5.
inline void mixed_updates(Plan& plan) {
  auto b1 = rand_vals(7 * 3, 11, 0.5f);
  b1[4] = 0.0f;  // exercises RankWiseF32's skip
  const auto* u1 = plan.add(LowRankUpdate{rand_tensor(DType::F32, {3, 13}, 10), make(DType::F32, {7, 3}, b1), 0.3f});
  const auto* u2 = plan.add(
      LowRankUpdate{rand_tensor(DType::BF16, {2, 13}, 12), rand_tensor(DType::F16, {9, 2}, 13, 0.25f), -1.25f});
  const auto* u3 = plan.add(DiffUpdate{rand_tensor(DType::BF16, {7, 13}, 14, 0.01f), 0.75f});
  plan.place(u1, 0, 0, 7);
  plan.place(u2, 5, 2, 4, 0.7f);  // ΔW rows 5..8 -> base rows 2..5
  plan.place(u3, 0, 0, 7, 1.5f);
}

inline void expect_policy_matches_reference(MergePolicy policy) {
  for (DType base_dt : kFloats) {
    Plan plan;
    mixed_updates(plan);
    expect_matches_reference(rand_tensor(base_dt, {7, 13}, 1, 0.1f), plan, policy);
  }
}

inline std::string error_of(const std::function<void()>& f) { return test::message_of(f); }

// W1 [2, 3] (full, or w1_a [2, 2]·w1_b [2, 3]), W2 [4, 5] (full, or w2_a [4, 2]·w2_b [2, 5]).
inline KroneckerUpdate lokr(bool w1_factored, bool w2_factored, float scale) {
  KroneckerUpdate k;
  if (w1_factored) {
    k.w1_a = rand_tensor(DType::BF16, {2, 2}, 50);
    k.w1_b = rand_tensor(DType::F32, {2, 3}, 51);
  } else {
    k.w1 = rand_tensor(DType::F32, {2, 3}, 52);
  }
  if (w2_factored) {
    k.w2_a = rand_tensor(DType::F16, {4, 2}, 53, 0.5f);
    k.w2_b = rand_tensor(DType::F32, {2, 5}, 54, 0.5f);
  } else {
    k.w2 = rand_tensor(DType::BF16, {4, 5}, 55, 0.5f);
  }
  k.scale = scale;
  return k;
}

}  // namespace graft::adapter::merge_test
