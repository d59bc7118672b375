// Projections of one x with their adapters' terms inside one matmul_many, the shared core of
// Transformer::project_many and the experts' gate/up/down (transformer_experts.cpp): the
// up-projections run in each projection's column epilogue, by the worker that computed those
// columns (no extra pass over y, no extra dispatch), and down passes x·Aᵀ over all rows of x can
// run as the matmul_many's first targets (the same dispatch and activation quantization).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "graft/runtime/kernels.h"
#include "graft/runtime/lora.h"

namespace graft::runtime {

// One term's up-projection: for r < n, y row rows[r] (row r when rows is null) += the term of
// low row r at sequence scale scales[r].
struct TermUp {
  const LoraTerm* term;
  const float* low;  // [n, low_width()]: the term's down pass
  int64_t n;
  const float* scales;
  const int64_t* rows = nullptr;
};

struct AdaptedTarget {
  const model::Matrix* w;
  float* y;
  const Tensor* bias = nullptr;  // none when null or without data
  std::vector<TermUp> ups;       // applied in this order
  const float* x = nullptr;      // its own input [m, w->cols] (MatmulTarget's), else the call's x
  int64_t m = -1;                // with x: its rows (-1: the call's m, as MatmulTarget's)
};

// Down passes on all rows of x (or of their own input, as AdaptedTarget's) at those rows'
// sequence scales (TermsDown's arguments).
struct RowDowns {
  std::vector<TermDown> terms;
  const std::vector<float>* scales;
  const float* x = nullptr;
  int64_t m = -1;
};

// y = x·Wᵀ (+ bias) + the ups, for every target (on its own input where it has one), as one
// matmul_many. The bias comes before the terms, or after them when one is DoRA (a DoRA term
// rescales what comes before it, never the bias: PEFT and mlx-lm add the bias after the rescale). `downs` run as the first targets, in
// order, and finish before any epilogue reads them; ups whose down pass ran earlier need none.
void matmul_adapted(ThreadPool& pool, const float* x, int64_t m, std::span<const AdaptedTarget> targets,
                    std::span<const RowDowns> downs = {});

}  // namespace graft::runtime
