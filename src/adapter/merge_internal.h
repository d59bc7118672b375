// Internal to merge.cpp / merge_kronecker.cpp: one validated update, with its small factors already
// read into F32, and the per-row arithmetic shared by the policies.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "graft/adapter/merge.h"

namespace graft::adapter::detail {

struct Term {
  enum class Kind { LowRank, Kronecker, Diff, Replace, Hadamard, Dora };
  Kind kind = Kind::LowRank;
  int64_t src_row = 0, dst_row = 0, rows = 0;
  float s = 0.0f;  // f32(update scale · strength); never 0 (zero-scale updates are dropped)
  // LowRank and Dora: a = A [r, cols] in F32; b = the planned rows of B, [rows, r] in F32.
  // Dora: mag = the planned rows of the magnitude, [rows] in F32.
  int64_t r = 0;
  std::vector<float> a, b, mag;
  // Hadamard: h1a = planned rows of w1a [rows, r1], h1b = w1b [r1, cols]; likewise h2a/h2b with r2.
  int64_t r2 = 0;
  std::vector<float> h1a, h1b, h2a, h2b;
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

// Hadamard (LoHa): validates w1a/w1b/w2a/w2b of `h` (update #index) and reads them (planned rows of
// the a-factors only) into term.h1a/h1b/h2a/h2b; sets term.r, term.r2 and returns ΔW's [rows, cols].
Shape prepare_hadamard(const HadamardUpdate& h, size_t index, int64_t src_row, int64_t rows, Term& term);
// acc[i] = acc[i] + f32(f32(P1[i]·P2[i])·s) for planned row `local` (P1 = w1a·w1b and P2 = w2a·w2b
// rows, each summed from +0 in k order); tmp1/tmp2 are scratch rows of cols floats.
void add_hadamard_row(const Term& t, int64_t local, int64_t cols, float* acc, float* tmp1, float* tmp2);

// DoRA row (planned row `local`, base row `w`): delta[i] = f32(s·P[i]) (rounded through BF16 when
// bf16_delta), n = ‖w + delta‖ (squares summed in double, ascending i, rounded to F32),
// f = f32(m / n), then acc[i] = f32(f·f32(acc[i] + delta[i])). `delta` is scratch of cols floats.
void apply_dora_row(const Term& t, int64_t local, const float* w, int64_t cols, bool bf16_delta, float* acc,
                    float* delta);

}  // namespace graft::adapter::detail
