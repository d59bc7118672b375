// LoHa (Hadamard) and DoRA updates for merge_tensor. Both are row-local: row o of the result needs
// only row o of the base and of the factors, so they follow the same row split (and fused-projection
// row slices) as low-rank updates.
#include <cmath>
#include <cstddef>

#include "adapter/merge_internal.h"
#include "graft/core/convert.h"
#include "graft/core/error.h"

namespace graft::adapter::detail {

namespace {

// Rows [row0, row0 + rows) of a 2-D factor in F32.
std::vector<float> rows_f32(const Tensor& t, int64_t row0, int64_t rows, const std::string& what) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    fail("merge: ", what, " has dtype ", dtype_name(t.dtype), " (factors must be F32, F16 or BF16)");
  if (!t.data && t.numel() > 0) fail("merge: ", what, " ", shape_str(t.shape), " has no data");
  return rows_to_f32(t, row0, rows);
}

// out[i] = Σ_k c[k]·x[k·cols + i], from +0, k ascending.
void row_product(const float* c, const float* x, int64_t nk, int64_t cols, float* __restrict out) {
  for (int64_t i = 0; i < cols; ++i) out[i] = 0.0f;
  for (int64_t k = 0; k < nk; ++k) {
    const float ck = c[k];
    const float* __restrict xk = x + k * cols;
    for (int64_t i = 0; i < cols; ++i) out[i] = out[i] + ck * xk[i];
  }
}

inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

}  // namespace

Shape prepare_hadamard(const HadamardUpdate& h, size_t index, int64_t src_row, int64_t rows, Term& term) {
  const std::string who = "merge: update #" + std::to_string(index) + " (loha): ";
  for (const Tensor* t : {&h.w1a, &h.w1b, &h.w2a, &h.w2b})
    if (t->shape.size() != 2) fail(who, "factors must be 2-D (w1a ", shape_str(h.w1a.shape), ", w1b ",
                                    shape_str(h.w1b.shape), ", w2a ", shape_str(h.w2a.shape), ", w2b ",
                                    shape_str(h.w2b.shape), ")");
  if (h.w1a.shape[1] != h.w1b.shape[0] || h.w2a.shape[1] != h.w2b.shape[0] || h.w1a.shape[0] != h.w2a.shape[0] ||
      h.w1b.shape[1] != h.w2b.shape[1])
    fail(who, "w1a ", shape_str(h.w1a.shape), ", w1b ", shape_str(h.w1b.shape), ", w2a ", shape_str(h.w2a.shape),
         ", w2b ", shape_str(h.w2b.shape), " are not w1a [out, r1], w1b [r1, in], w2a [out, r2], w2b [r2, in]");
  const int64_t out_rows = h.w1a.shape[0];
  if (src_row < 0 || rows < 0 || src_row > out_rows - rows) return {out_rows, h.w1b.shape[1]};  // caller reports
  term.r = h.w1a.shape[1];
  term.r2 = h.w2a.shape[1];
  term.h1a = rows_f32(h.w1a, src_row, rows, "loha w1a");
  term.h2a = rows_f32(h.w2a, src_row, rows, "loha w2a");
  term.h1b = rows_f32(h.w1b, 0, h.w1b.shape[0], "loha w1b");
  term.h2b = rows_f32(h.w2b, 0, h.w2b.shape[0], "loha w2b");
  return {out_rows, h.w1b.shape[1]};
}

void add_hadamard_row(const Term& t, int64_t local, int64_t cols, float* __restrict acc, float* tmp1,
                      float* tmp2) {
  row_product(t.h1a.data() + local * t.r, t.h1b.data(), t.r, cols, tmp1);
  row_product(t.h2a.data() + local * t.r2, t.h2b.data(), t.r2, cols, tmp2);
  for (int64_t i = 0; i < cols; ++i) acc[i] = acc[i] + (tmp1[i] * tmp2[i]) * t.s;
}

void apply_dora_row(const Term& t, int64_t local, const float* w, int64_t cols, bool bf16_delta, float* __restrict acc,
                    float* __restrict delta) {
  row_product(t.b.data() + local * t.r, t.a.data(), t.r, cols, delta);
  for (int64_t i = 0; i < cols; ++i) delta[i] = t.s * delta[i];
  if (bf16_delta)
    for (int64_t i = 0; i < cols; ++i) delta[i] = round_bf16(delta[i]);
  double sq = 0;
  for (int64_t i = 0; i < cols; ++i) {
    const double v = static_cast<double>(w[i] + delta[i]);
    sq += v * v;
  }
  const float n = static_cast<float>(std::sqrt(sq));
  const float f = t.mag[static_cast<size_t>(local)] / n;
  for (int64_t i = 0; i < cols; ++i) acc[i] = f * (acc[i] + delta[i]);
}

}  // namespace graft::adapter::detail
