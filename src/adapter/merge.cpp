// merge_tensor: base weight + planned adapter updates -> one materialized tensor (formulas in
// merge.h). Work is split over output rows; each row's arithmetic is a fixed sequence of F32
// operations that depends only on the row, so results do not depend on chunking or thread count.
#include "graft/adapter/merge.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "adapter/merge_internal.h"
#include "graft/core/error.h"

namespace graft::adapter {

using detail::Term;

namespace {

struct PolicyNames {
  MergePolicy policy;
  const char* name;
  const char* kebab;
};
constexpr PolicyNames kPolicies[] = {
    {MergePolicy::RankWiseF32, "RankWiseF32", "rankwise-f32"},
    {MergePolicy::RoundedBF16Delta, "RoundedBF16Delta", "rounded-bf16-delta"},
    {MergePolicy::DeltaF32, "DeltaF32", "delta-f32"},
};

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

const char* kind_name(const Update& u) { return update_kind(u); }

bool plain_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

// bf16_to_f32(f32_to_bf16(x)) (round to nearest even, NaN kept quiet), written branch-free so the
// RoundedBF16Delta loop vectorizes.
inline float round_bf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
  const uint32_t quiet_nan = (b | 0x00400000u) & 0xffff0000u;
  const uint32_t r = (b & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
  float y;
  std::memcpy(&y, &r, 4);
  return y;
}

// Everything the row workers need, validated up front.
struct Plan {
  const Tensor* base = nullptr;
  int64_t rows = 0, cols = 0, base_row_bytes = 0;
  MergePolicy policy = MergePolicy::DeltaF32;
  DType out_dtype = DType::F32;
  int64_t out_row_bytes = 0;
  uint8_t* out = nullptr;
  std::vector<Term> terms;         // additive updates with a non-zero scale
  std::vector<Term> replacements;  // row ranges set to a replacement value (disjoint)
};

// Validates planned update #index against the base and, unless its scale is 0, appends its term.
void prepare(const PlannedUpdate& pu, size_t index, const Tensor& base, int64_t rows, int64_t cols,
             std::vector<Term>& terms, std::vector<Term>& replacements) {
  if (!pu.update) fail("merge: update #", index, " is null (base ", shape_str(base.shape), ")");
  const Update& u = *pu.update;
  const std::string id = "update #" + std::to_string(index) + " (" + kind_name(u) + ")";
  const std::string what = "merge: " + id;
  Term t;
  t.src_row = pu.src_row;
  t.dst_row = pu.dst_row;
  t.rows = pu.rows;
  int64_t dw_rows = 0, dw_cols = 0;
  if (const auto* lr = std::get_if<LowRankUpdate>(&u)) {
    if (base.shape.size() != 2)
      fail(what, ": a 1-D base ", shape_str(base.shape), " takes only diff or replace updates");
    if (lr->a.shape.size() != 2 || lr->b.shape.size() != 2 || lr->a.shape[0] != lr->b.shape[1])
      fail(what, ": A ", shape_str(lr->a.shape), " and B ", shape_str(lr->b.shape),
           " are not A [r, in] and B [out, r] with one rank r");
    if (!plain_float(lr->a.dtype) || !plain_float(lr->b.dtype))
      fail(what, ": A is ", dtype_name(lr->a.dtype), " and B is ", dtype_name(lr->b.dtype),
           " (factors must be F32, F16 or BF16)");
    t.kind = Term::Kind::LowRank;
    t.r = lr->a.shape[0];
    dw_rows = lr->b.shape[0];
    dw_cols = lr->a.shape[1];
    t.s = lr->scale * pu.strength;
  } else if (const auto* kr = std::get_if<KroneckerUpdate>(&u)) {
    if (base.shape.size() != 2)
      fail(what, ": a 1-D base ", shape_str(base.shape), " takes only diff or replace updates");
    t.kind = Term::Kind::Kronecker;
    detail::prepare_kronecker(*kr, index, t);
    dw_rows = t.p * t.m;
    dw_cols = t.q * t.n;
    t.s = kr->scale * pu.strength;
  } else if (const auto* dr = std::get_if<DoraUpdate>(&u)) {
    const LowRankUpdate& lr = dr->lora;
    if (base.shape.size() != 2)
      fail(what, ": a 1-D base ", shape_str(base.shape), " takes only diff or replace updates");
    if (lr.a.shape.size() != 2 || lr.b.shape.size() != 2 || lr.a.shape[0] != lr.b.shape[1])
      fail(what, ": A ", shape_str(lr.a.shape), " and B ", shape_str(lr.b.shape),
           " are not A [r, in] and B [out, r] with one rank r");
    if (!plain_float(lr.a.dtype) || !plain_float(lr.b.dtype) || !plain_float(dr->magnitude.dtype))
      fail(what, ": A, B and the magnitude must be F32, F16 or BF16");
    if (dr->magnitude.numel() != lr.b.shape[0] || dr->magnitude.shape.size() != 1)
      fail(what, ": magnitude ", shape_str(dr->magnitude.shape), " does not give one value per output row of B ",
           shape_str(lr.b.shape));
    t.kind = Term::Kind::Dora;
    t.r = lr.a.shape[0];
    dw_rows = lr.b.shape[0];
    dw_cols = lr.a.shape[1];
    t.s = lr.scale * pu.strength;
  } else if (const auto* hd = std::get_if<HadamardUpdate>(&u)) {
    if (base.shape.size() != 2)
      fail(what, ": a 1-D base ", shape_str(base.shape), " takes only diff or replace updates");
    t.kind = Term::Kind::Hadamard;
    const Shape dws = detail::prepare_hadamard(*hd, index, pu.src_row, pu.rows, t);
    dw_rows = dws[0];
    dw_cols = dws[1];
    t.s = hd->scale * pu.strength;
  } else if (const auto* df = std::get_if<DiffUpdate>(&u)) {
    if (df->diff.shape.size() != base.shape.size())
      fail(what, ": diff ", shape_str(df->diff.shape), " does not match the rank of base ", shape_str(base.shape));
    if (!plain_float(df->diff.dtype))
      fail(what, ": diff has dtype ", dtype_name(df->diff.dtype), " (expected F32, F16 or BF16)");
    t.kind = Term::Kind::Diff;
    t.diff = &df->diff;
    dw_rows = df->diff.shape[0];
    dw_cols = df->diff.shape.size() == 2 ? df->diff.shape[1] : 1;
    if (!df->diff.data && df->diff.numel() > 0) fail(what, ": diff ", shape_str(df->diff.shape), " has no data");
    t.diff_row_bytes = dtype_bytes(df->diff.dtype, dw_cols);
    t.s = df->scale * pu.strength;
  } else {
    const auto& rp = std::get<Replacement>(u);
    if (rp.value.shape.size() != base.shape.size())
      fail(what, ": replacement ", shape_str(rp.value.shape), " does not match the rank of base ",
           shape_str(base.shape));
    if (!plain_float(rp.value.dtype))
      fail(what, ": replacement has dtype ", dtype_name(rp.value.dtype), " (expected F32, F16 or BF16)");
    if (!rp.value.data && rp.value.numel() > 0)
      fail(what, ": replacement ", shape_str(rp.value.shape), " has no data");
    t.kind = Term::Kind::Replace;
    t.diff = &rp.value;
    dw_rows = rp.value.shape[0];
    dw_cols = rp.value.shape.size() == 2 ? rp.value.shape[1] : 1;
    t.diff_row_bytes = dtype_bytes(rp.value.dtype, dw_cols);
  }
  const Shape dw_shape = base.shape.size() == 1 ? Shape{dw_rows} : Shape{dw_rows, dw_cols};
  const std::string dw = (t.kind == Term::Kind::Replace ? "replacement " : "ΔW ") + shape_str(dw_shape);
  if (dw_cols != cols)
    fail(what, ": ", dw, " has ", dw_cols, " columns but base ", shape_str(base.shape), " has ", cols);
  if (pu.rows < 0 || pu.src_row < 0 || pu.dst_row < 0 || pu.src_row > dw_rows - pu.rows ||
      pu.dst_row > rows - pu.rows)
    fail(what, ": rows [", pu.src_row, ", ", pu.src_row + pu.rows, ") of ", dw, " -> base rows [", pu.dst_row,
         ", ", pu.dst_row + pu.rows, ") of ", shape_str(base.shape), " are out of range");
  if (t.kind == Term::Kind::Replace) {
    if (pu.rows == 0) return;
    for (const Term& r : replacements)
      if (pu.dst_row < r.dst_row + r.rows && r.dst_row < pu.dst_row + pu.rows)
        fail(what, ": base rows [", pu.dst_row, ", ", pu.dst_row + pu.rows, ") of ", shape_str(base.shape),
             " are also set by an earlier replacement (rows [", r.dst_row, ", ", r.dst_row + r.rows,
             ")); expected at most one replacement per row");
    replacements.push_back(std::move(t));  // unscaled: strength does not apply to a replacement
    return;
  }
  if (t.s == 0.0f || t.rows == 0) return;  // contributes nothing: the base stays exact
  if (t.kind == Term::Kind::LowRank || t.kind == Term::Kind::Dora) {
    const auto* dora = std::get_if<DoraUpdate>(&u);
    const LowRankUpdate& lr = dora ? dora->lora : std::get<LowRankUpdate>(u);
    if (dora) {
      if (!dora->magnitude.data) fail(what, ": magnitude has no data");
      t.mag.resize(static_cast<size_t>(t.rows));
      convert_to_f32(dora->magnitude.dtype,
                     static_cast<const uint8_t*>(dora->magnitude.data) + dtype_bytes(dora->magnitude.dtype, t.src_row),
                     t.mag.data(), t.rows);
    }
    t.a = detail::factor_f32(lr.a, id + " A");
    if (!lr.b.data) fail(what, ": B ", shape_str(lr.b.shape), " has no data");
    // Only the planned rows of B, read once.
    t.b.resize(static_cast<size_t>(t.rows * t.r));
    if (!t.b.empty())
      convert_to_f32(lr.b.dtype, static_cast<const uint8_t*>(lr.b.data) + dtype_bytes(lr.b.dtype, t.src_row * t.r),
                     t.b.data(), t.rows * t.r);
  }
  terms.push_back(std::move(t));
}

// acc[i] = acc[i] + c·x[i]: the axpy every policy is built from (mul then add, both rounded).
inline void axpy(float* __restrict acc, float c, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] = acc[i] + c * x[i];
}

// Rank terms over a row, tiled so a strip of the accumulator stays in registers across k (each
// element still sees its terms in k order, each mul and add rounded; no FMA under
// -ffp-contract=off). GCC/Clang vector extensions keep the strip in registers, which plain
// arrays do not:
//   kProduct = false: acc[i] = acc[i] + c[k]·x_k[i] for k = 0..nk-1      (RankWiseF32)
//   kProduct = true:  acc[i] = acc[i] + s·(Σ_k c[k]·x_k[i], from +0)      (P, then D += s·P)
typedef float v8f __attribute__((vector_size(32)));
inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }

template <bool kProduct>
void rank_terms(float* __restrict acc, float s, const float* __restrict c, const float* const* x, int64_t nk,
                int64_t n) {
  const v8f zero = {};
  const v8f sv = zero + s;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    v8f t0 = kProduct ? zero : load8(acc + i), t1 = kProduct ? zero : load8(acc + i + 8);
    v8f t2 = kProduct ? zero : load8(acc + i + 16), t3 = kProduct ? zero : load8(acc + i + 24);
    for (int64_t k = 0; k < nk; ++k) {
      const v8f ck = zero + c[k];
      const float* xk = x[k] + i;
      t0 = t0 + ck * load8(xk);
      t1 = t1 + ck * load8(xk + 8);
      t2 = t2 + ck * load8(xk + 16);
      t3 = t3 + ck * load8(xk + 24);
    }
    if (kProduct) {
      t0 = load8(acc + i) + sv * t0;
      t1 = load8(acc + i + 8) + sv * t1;
      t2 = load8(acc + i + 16) + sv * t2;
      t3 = load8(acc + i + 24) + sv * t3;
    }
    store8(acc + i, t0);
    store8(acc + i + 8, t1);
    store8(acc + i + 16, t2);
    store8(acc + i + 24, t3);
  }
  for (; i + 8 <= n; i += 8) {
    v8f t = kProduct ? zero : load8(acc + i);
    for (int64_t k = 0; k < nk; ++k) t = t + (zero + c[k]) * load8(x[k] + i);
    store8(acc + i, kProduct ? load8(acc + i) + sv * t : t);
  }
  for (; i < n; ++i) {
    float t = kProduct ? 0.0f : acc[i];
    for (int64_t k = 0; k < nk; ++k) t = t + c[k] * x[k][i];
    acc[i] = kProduct ? acc[i] + s * t : t;
  }
}

void merge_rows(const Plan& plan, int64_t begin, int64_t end) {
  const int64_t cols = plan.cols;
  std::vector<float> wv(static_cast<size_t>(cols)), dv(static_cast<size_t>(cols)), tv(static_cast<size_t>(cols));
  float* __restrict w = wv.data();
  float* __restrict d = dv.data();
  float* __restrict tmp = tv.data();
  bool any_dora = false, any_hadamard = false;
  for (const Term& t : plan.terms) {
    any_dora = any_dora || t.kind == Term::Kind::Dora;
    any_hadamard = any_hadamard || t.kind == Term::Kind::Hadamard;
  }
  // DoRA rows keep the unmerged base row for the norm; LoHa needs a second scratch row.
  std::vector<float> base_row(static_cast<size_t>(any_dora ? cols : 0));
  std::vector<float> tmp2(static_cast<size_t>(any_dora || any_hadamard ? cols : 0));
  int64_t max_r = 0;
  for (const Term& t : plan.terms) max_r = std::max(max_r, t.r);
  std::vector<float> coef(static_cast<size_t>(max_r));
  std::vector<const float*> src_rows(static_cast<size_t>(max_r));
  const auto* base = static_cast<const uint8_t*>(plan.base->data);
  const bool rank_wise = plan.policy == MergePolicy::RankWiseF32;
  for (int64_t o = begin; o < end; ++o) {
    uint8_t* out = plan.out + o * plan.out_row_bytes;
    const Term* rep = nullptr;
    for (const Term& r : plan.replacements)
      if (o >= r.dst_row && o < r.dst_row + r.rows) rep = &r;
    if (rep) {  // the replacement row, converted to the output dtype; additive updates ignored
      const int64_t src = rep->src_row + (o - rep->dst_row);
      convert_to_f32(rep->diff->dtype, static_cast<const uint8_t*>(rep->diff->data) + src * rep->diff_row_bytes, w,
                     cols);
      convert_from_f32(w, plan.out_dtype, out, cols);
      continue;
    }
    convert_to_f32(plan.base->dtype, base + o * plan.base_row_bytes, w, cols);
    if (any_dora) std::copy(w, w + cols, base_row.begin());
    // Rank-wise adds every term straight into W; the other policies sum D first.
    float* acc = rank_wise ? w : d;
    bool touched = false;
    for (const Term& t : plan.terms) {
      if (o < t.dst_row || o >= t.dst_row + t.rows) continue;
      const int64_t local = o - t.dst_row;  // row within the planned slice
      const int64_t src = t.src_row + local;
      if (!touched && !rank_wise) std::fill(d, d + cols, 0.0f);
      touched = true;
      switch (t.kind) {
        case Term::Kind::Dora: {
          // Everything before a DoRA update is rescaled with it: first fold the pending D into W
          // (with the policy's rounding of D), then W = f ⊙ (W + s·P).
          const bool bf16_delta = plan.policy == MergePolicy::RoundedBF16Delta;
          if (!rank_wise) {
            for (int64_t i = 0; i < cols; ++i) w[i] = w[i] + (bf16_delta ? round_bf16(d[i]) : d[i]);
            std::fill(d, d + cols, 0.0f);
          }
          detail::apply_dora_row(t, local, base_row.data(), cols, bf16_delta, w, tmp2.data());
          break;
        }
        case Term::Kind::Hadamard: detail::add_hadamard_row(t, local, cols, acc, tmp, tmp2.data()); break;
        case Term::Kind::LowRank: {
          const float* brow = t.b.data() + local * t.r;
          int64_t nk = 0;
          for (int64_t k = 0; k < t.r; ++k) {
            const float b = rank_wise ? t.s * brow[k] : brow[k];
            if (rank_wise && b == 0.0f) continue;  // RankWiseF32 skips zero rank terms
            coef[nk] = b;
            src_rows[nk++] = t.a.data() + k * cols;
          }
          if (rank_wise)
            rank_terms<false>(w, 0.0f, coef.data(), src_rows.data(), nk, cols);
          else
            rank_terms<true>(d, t.s, coef.data(), src_rows.data(), nk, cols);
          break;
        }
        case Term::Kind::Kronecker: detail::add_kronecker_row(t, src, acc); break;
        case Term::Kind::Diff:
          convert_to_f32(t.diff->dtype, static_cast<const uint8_t*>(t.diff->data) + src * t.diff_row_bytes, tmp,
                         cols);
          axpy(acc, t.s, tmp, cols);
          break;
        case Term::Kind::Replace: break;  // kept in plan.replacements, never here
      }
    }
    // Rows no update touches pass through (as an unadapted tensor would, so fused and split
    // layouts agree); touched rows get W + D with the policy's rounding.
    if (touched && plan.policy == MergePolicy::DeltaF32) {
      for (int64_t i = 0; i < cols; ++i) w[i] = w[i] + d[i];
    } else if (touched && plan.policy == MergePolicy::RoundedBF16Delta) {
      for (int64_t i = 0; i < cols; ++i) w[i] = round_bf16(w[i] + round_bf16(d[i]));
    }
    convert_from_f32(w, plan.out_dtype, out, cols);
  }
}

// A copy of `t` in `dtype` (the same tensor, shared, when it already has that dtype).
Tensor convert_whole(const Tensor& t, DType dtype) {
  if (t.dtype == dtype) return t;
  std::vector<float> f(static_cast<size_t>(t.numel()));
  if (!f.empty()) convert_to_f32(t.dtype, t.data, f.data(), t.numel());
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(dtype, t.numel())));
  if (!f.empty()) convert_from_f32(f.data(), dtype, bytes.data(), t.numel());
  return Tensor::owned(dtype, t.shape, std::move(bytes));
}

}  // namespace

const char* policy_name(MergePolicy p) {
  for (const auto& e : kPolicies)
    if (e.policy == p) return e.name;
  return "?";
}

MergePolicy parse_merge_policy(const std::string& s) {
  for (const auto& e : kPolicies)
    if (iequals(s, e.name) || iequals(s, e.kebab)) return e.policy;
  fail("unknown merge policy '", s,
       "' (expected RankWiseF32, RoundedBF16Delta or DeltaF32, or rankwise-f32, rounded-bf16-delta, delta-f32)");
}

Tensor merge_tensor(const Tensor& base, std::span<const PlannedUpdate> updates, MergePolicy policy, DType out_dtype,
                    ThreadPool* pool) {
  if (!plain_float(out_dtype))
    fail("merge: output dtype ", dtype_name(out_dtype), " is not F32, F16 or BF16 (base ", shape_str(base.shape),
         ")");
  if (base.shape.size() != 1 && base.shape.size() != 2)
    fail("merge: base ", shape_str(base.shape), " must be 1-D or 2-D");
  const int64_t rows = base.shape[0];
  const int64_t cols = base.shape.size() == 2 ? base.shape[1] : 1;
  if (rows < 0 || cols < 0) fail("merge: base ", shape_str(base.shape), " has a negative dimension");
  if (cols % dtype_block_elems(base.dtype) != 0)
    fail("merge: base ", shape_str(base.shape), " rows are not whole ", dtype_name(base.dtype), " blocks");

  Plan plan;
  for (size_t i = 0; i < updates.size(); ++i) prepare(updates[i], i, base, rows, cols, plan.terms, plan.replacements);
  if (plan.replacements.size() == 1) {  // one replacement of the whole tensor: just the value
    const Term& r = plan.replacements[0];
    if (r.rows == rows && r.src_row == 0 && r.diff->shape == base.shape) return convert_whole(*r.diff, out_dtype);
  }
  if (plan.terms.empty() && plan.replacements.empty()) return convert_whole(base, out_dtype);  // pass-through
  if (!base.data && base.numel() > 0) fail("merge: base ", shape_str(base.shape), " has no data");

  plan.base = &base;
  plan.rows = rows;
  plan.cols = cols;
  plan.base_row_bytes = dtype_bytes(base.dtype, cols);
  plan.policy = policy;
  plan.out_dtype = out_dtype;
  plan.out_row_bytes = dtype_bytes(out_dtype, cols);
  // Every byte is written below, so the buffer is not zeroed first.
  auto buf = std::make_shared_for_overwrite<uint8_t[]>(static_cast<size_t>(plan.out_row_bytes * rows));
  plan.out = buf.get();
  auto work = [&plan](int64_t b, int64_t e) { merge_rows(plan, b, e); };
  if (pool)
    pool->parallel_for(rows, work, 16);
  else
    work(0, rows);
  Tensor result;
  result.dtype = out_dtype;
  result.shape = base.shape;
  result.data = buf.get();
  result.owner = std::shared_ptr<const void>(std::move(buf), plan.out);
  return result;
}

}  // namespace graft::adapter
