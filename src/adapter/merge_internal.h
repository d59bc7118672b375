// Internal to merge.cpp / merge_kronecker.cpp: one validated update, with its small factors already
// read into F32, and the per-row arithmetic shared by the policies.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graft/adapter/merge.h"

namespace graft::adapter::detail {

struct Term {
  enum class Kind { LowRank, Kronecker, Diff, Replace };
  Kind kind = Kind::LowRank;
  int64_t src_row = 0, dst_row = 0, rows = 0;
  float s = 0.0f;  // f32(update scale · strength); never 0 (zero-scale updates are dropped)
  // LowRank: a = A [r, cols] in F32; b = the planned rows of B, [rows, r] in F32.
  int64_t r = 0;
  std::vector<float> a, b;
  // Kronecker: w1 = W1 [p, q], w2 = W2 [m, n] in F32 (formed from their factors when factored).
  int64_t p = 0, q = 0, m = 0, n = 0;
  std::vector<float> w1, w2;
  // Diff / Replace: rows of the diff or replacement value read on the fly, [*, cols] (1-D: cols 1).
  const Tensor* diff = nullptr;
  int64_t diff_row_bytes = 0;
};

// Reads a 2-D factor into F32, checking its dtype (F32/F16/BF16); `what` names it in errors.
std::vector<float> factor_f32(const Tensor& t, const std::string& what);

// Kronecker: validates the factor combination of `k` (update #index) and fills term.p/q/m/n/w1/w2.
void prepare_kronecker(const KroneckerUpdate& k, size_t index, Term& term);

// acc[q·n + j] = acc[q·n + j] + f32(f32(s·W1[p, q])·W2[r2, j]) for ΔW row `row` (p = row / m,
// r2 = row % m): one row of s·kron(W1, W2) added into an F32 row without forming kron.
void add_kronecker_row(const Term& t, int64_t row, float* acc);

}  // namespace graft::adapter::detail
