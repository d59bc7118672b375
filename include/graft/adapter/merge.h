// Merge arithmetic: base weight + adapter updates -> one materialized tensor, under a policy the
// caller chooses explicitly. The formulas, per element (o = output row, i = input column):
//
//   P_u[o,i] = Σ_k B_u[o,k]·A_u[k,i]          (F32, k ascending; one P per low-rank update u)
//
//   DeltaF32 (default; PEFT / ComfyUI / kohya convention):
//     D[o,i] = Σ_u f32(s_u·P_u[o,i])           (updates in plan order), W' = f32(W + D), one final
//                                               rounding to the output dtype
//   RankWiseF32 (scale folded into B, the rank-r product never formed):
//     for u in order, for k = 0..r-1: b = f32(s_u·B_u[o,k]); skip if b == 0;
//       W[o,i] = f32(W[o,i] + b·A_u[k,i])       (then one rounding to the output dtype)
//   RoundedBF16Delta:
//     D as in DeltaF32, W' = bf16(W + bf16(D))  (two round-to-nearest-even steps; output BF16)
//
// Kronecker (LoKr) updates contribute D block by block: block (p, q) of ΔW is s·w1[p,q]·W2, with
// W1/W2 formed from their low-rank factors when given; the full dense ΔW is never allocated. Under
// RankWiseF32 they are added like DeltaF32 terms (they have no rank order). Diff updates add
// s·diff. A Replacement makes the result exactly the replacement (converted to the output dtype),
// whatever else targets the tensor. With no updates the base passes through unchanged.
// All arithmetic is F32 with contraction off (-ffp-contract=off), so results are reproducible
// and independent of the thread count.
//
// Exact order details (the reference tests follow them bit for bit):
//   * s_u = f32(update.scale · strength). Updates with s_u == 0 (or rows == 0) are dropped after
//     validation, so strength 0 everywhere returns the base exactly (signed zeros included).
//   * Sums (P, D, a factored W1 = w1_a·w1_b, W2 = w2_a·w2_b) start from +0 and add in ascending
//     index order; a term is f32(s_u·P_u[o,i]), f32(s_u·diff[o,i]) or f32(f32(s_u·W1[p,q])·W2[r2,j])
//     for LoKr (o = p·m + r2, i = q·n + j).
//   * Rows that no (non-zero) update covers pass through unchanged under every policy (as an
//     unadapted tensor would, so fused and split layouts agree); covered rows get f32(W + D)
//     (DeltaF32), bf16(W + bf16(D)) (RoundedBF16Delta) or the rank-wise sums.
//   * Replacement: its PlannedUpdate row range works as for deltas (value rows [src_row, +rows) ->
//     base rows [dst_row, +rows); same rank and column count as the base). Those rows become the
//     value's rows, converted to the output dtype; deltas on them are ignored. Replacements may
//     not overlap. strength does not scale a replacement (whether strength 0 drops it is the
//     caller's policy).
//   * Pass-through (no replacement, no non-zero update): the base itself, zero-copy, when out_dtype
//     equals its dtype, else a converted copy. Likewise one whole-tensor replacement (value shape
//     == base shape) already in out_dtype.
//   * 1-D bases (biases) are [n] treated as n rows of one column; they take diff/replace only.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/thread_pool.h"

namespace graft::adapter {

enum class MergePolicy { RankWiseF32, RoundedBF16Delta, DeltaF32 };
const char* policy_name(MergePolicy p);
// Parses "RankWiseF32" / "rankwise-f32" style names; throws listing the accepted names.
MergePolicy parse_merge_policy(const std::string& s);

// One update applied to a row range of a base tensor: rows [src_row, src_row + rows) of the
// update's ΔW land on base rows [dst_row, dst_row + rows). This expresses both a fused external
// projection split into the model's tensors and separate adapters placed into a fused tensor.
// `strength` is the user's multiplier, applied on top of the update's own (metadata) scale.
struct PlannedUpdate {
  const Update* update = nullptr;
  int64_t src_row = 0;
  int64_t dst_row = 0;
  int64_t rows = 0;
  float strength = 1.0f;
};

// base: a 1-D or 2-D tensor in F32/F16/BF16 (a GGUF block type also works when rows are whole
// blocks: it is dequantized row by row). Factors, diffs and replacements: F32/F16/BF16. Returns a
// tensor in out_dtype (F32/F16/BF16), new unless passed through as described above;
// RoundedBF16Delta rounds every row it adds to through BF16 (those rows are exactly representable
// in BF16); untouched and replaced rows pass through as described above.
Tensor merge_tensor(const Tensor& base, std::span<const PlannedUpdate> updates, MergePolicy policy, DType out_dtype,
                    ThreadPool* pool = nullptr);  // rows in parallel on the caller's pool (serial: null)

}  // namespace graft::adapter
