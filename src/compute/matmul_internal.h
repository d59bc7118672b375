// Internal to the compute layer (compute/weight.cpp dispatches through it): the per-ISA matmul kernels behind graft::compute::matmul().
#pragma once
#include <cstdint>

#include "graft/core/dtype.h"
#include "graft/core/tensor.h"

namespace graft::compute::detail {

// Distinct element types so kernels can overload on the weight format (both are 16-bit patterns).
struct bf16_t { uint16_t bits; };
struct f16_t { uint16_t bits; };

// One matmul, y[m, n] = x[m, k] · W[n, k]ᵀ (+ y). Kernels compute the output columns [j0, j1).
struct MatmulArgs {
  const float* x;
  int64_t m, k, n;
  const void* w;
  DType wtype;  // F32, F16 or BF16
  float* y;
  bool accumulate;
};

enum class Isa { Avx2, Avx512 };

// Whether this CPU (and OS) runs the kernels of `isa`.
bool isa_supported(Isa isa);
// The widest supported ISA: what matmul() uses.
Isa best_isa();
// Runs one ISA's kernel on columns [j0, j1); the ISA must be supported. Every output element is
// summed in one fixed order (one vector accumulator over k in steps of the vector width, a masked
// tail step, then a fixed horizontal tree), whatever the tile it falls in, so the result does not
// depend on j0/j1, the thread count or m: row i of a prefill equals the decode of x row i.
void matmul_cols(Isa isa, const MatmulArgs& a, int64_t j0, int64_t j1);

void matmul_cols_avx2(const MatmulArgs& a, int64_t j0, int64_t j1);
void matmul_cols_avx512(const MatmulArgs& a, int64_t j0, int64_t j1);

// Weight rows per prefill column group: a multiple of `nr` whose k * elem_bytes-byte rows fill
// about a quarter of Zen 4's 1 MiB L2, leaving room for the x rows streaming past.
int64_t prefill_col_block(int64_t k, int64_t elem_bytes, int64_t nr);

// Fails naming `who` unless w is a supported [n, k] weight and the pointers are usable.
void check_matmul_args(const char* who, const float* x, int64_t m, int64_t k, const Tensor& w, const float* y);

// Below this many multiply-adds per parallel_for chunk the dispatch costs more than it saves.
constexpr int64_t kMinChunkWork = 32 * 1024;

}  // namespace graft::compute::detail
