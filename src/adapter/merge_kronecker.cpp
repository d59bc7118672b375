// LoKr (Kronecker) updates for merge_tensor: W1 and W2 are formed in F32 (they are small) and each
// ΔW row is produced block by block from them; the dense kron(W1, W2) is never allocated.
#include <cstddef>

#include "adapter/merge_internal.h"
#include "graft/core/error.h"

namespace graft::adapter::detail {

std::vector<float> factor_f32(const Tensor& t, const std::string& what) {
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    fail("merge: ", what, " has dtype ", dtype_name(t.dtype), " (factors must be F32, F16 or BF16)");
  if (!t.data && t.numel() > 0) fail("merge: ", what, " ", shape_str(t.shape), " has no data");
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) convert_to_f32(t.dtype, t.data, out.data(), t.numel());
  return out;
}

namespace {

bool present(const Tensor& t) { return !t.shape.empty() || t.data != nullptr; }

// W = full, or W = lo·hi (lo [rows, r], hi [r, cols]) summed over k ascending from +0 in F32.
// Sets rows/cols; `side` is "w1" or "w2".
std::vector<float> form_factor(const Tensor& full, const Tensor& lo, const Tensor& hi, const std::string& side,
                               size_t index, int64_t& rows, int64_t& cols) {
  const std::string who = "update #" + std::to_string(index) + " (lokr): ";
  const bool has_full = present(full), has_lo = present(lo), has_hi = present(hi);
  if (has_full) {
    if (has_lo || has_hi)
      fail("merge: ", who, "gives both ", side, " ", shape_str(full.shape), " and ", side, "_a/", side,
           "_b factors; expected one of them");
    if (full.shape.size() != 2) fail("merge: ", who, side, " must be 2-D, got ", shape_str(full.shape));
    rows = full.shape[0];
    cols = full.shape[1];
    return factor_f32(full, who + side);
  }
  if (!has_lo || !has_hi)
    fail("merge: ", who, "needs ", side, " or both ", side, "_a and ", side, "_b (got ", side, "_a ",
         shape_str(lo.shape), ", ", side, "_b ", shape_str(hi.shape), ")");
  if (lo.shape.size() != 2 || hi.shape.size() != 2 || lo.shape[1] != hi.shape[0])
    fail("merge: ", who, side, "_a ", shape_str(lo.shape), " and ", side, "_b ", shape_str(hi.shape),
         " do not form a product (expected [p, r] and [r, q])");
  rows = lo.shape[0];
  cols = hi.shape[1];
  const int64_t r = lo.shape[1];
  const std::vector<float> l = factor_f32(lo, who + side + "_a");
  const std::vector<float> h = factor_f32(hi, who + side + "_b");
  std::vector<float> w(static_cast<size_t>(rows * cols), 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict wr = w.data() + i * cols;
    for (int64_t k = 0; k < r; ++k) {
      const float c = l[static_cast<size_t>(i * r + k)];
      const float* __restrict hr = h.data() + k * cols;
      for (int64_t j = 0; j < cols; ++j) wr[j] = wr[j] + c * hr[j];
    }
  }
  return w;
}

}  // namespace

void prepare_kronecker(const KroneckerUpdate& k, size_t index, Term& term) {
  term.w1 = form_factor(k.w1, k.w1_a, k.w1_b, "w1", index, term.p, term.q);
  term.w2 = form_factor(k.w2, k.w2_a, k.w2_b, "w2", index, term.m, term.n);
}

void add_kronecker_row(const Term& t, int64_t row, float* acc) {
  const int64_t p = row / t.m, r2 = row % t.m;
  const float* __restrict w2r = t.w2.data() + r2 * t.n;
  for (int64_t q = 0; q < t.q; ++q) {
    const float c = t.s * t.w1[static_cast<size_t>(p * t.q + q)];
    float* __restrict out = acc + q * t.n;
    for (int64_t j = 0; j < t.n; ++j) out[j] = out[j] + c * w2r[j];
  }
}

}  // namespace graft::adapter::detail
