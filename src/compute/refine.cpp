// refine_rows (graft/compute/weight.h): chosen output rows of an 8-bit-activation matmul moved to
// their value on unrounded activations. The rounded value is recomputed the way matmul computed it
// (kernels do not depend on m or on the column cut, so these are the same bits), the exact one is
// the dequantized row's dot product with x in double, and the difference is added: whatever else
// matmul's caller added to y (an adapter's term) stays.
#include <algorithm>
#include <vector>

#include "compute/interleaved_blocks.h"
#include "compute/matmul_q8.h"
#include "graft/compute/weight.h"
#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"

namespace graft::compute {

namespace {

// Row j of w as F32 (GGUF blocks or mlx affine codes).
void dequantize_row(const Weight& w, int64_t j, float* out) {
  if (w.quantized()) return dequantize_affine_row(w.quant, j, out);
  const int64_t row_bytes = dtype_bytes(w.dense.dtype, w.cols);
  dequantize_gguf_blocks(w.dense.dtype, static_cast<const uint8_t*>(w.dense.data) + j * row_bytes, out, w.cols);
}

}  // namespace

void refine_rows(const Weight& w, const float* x, std::span<const int64_t> rows, float* y) {
  const WeightKind kind = w.kind();
  if (rows.empty() ||
      (kind != WeightKind::Blocks && kind != WeightKind::InterleavedBlocks && kind != WeightKind::InterleavedAffine))
    return;  // the others' activations are not rounded to 8 bits (BF16's are: a different error, left)
  for (int64_t j : rows)
    if (j < 0 || j >= w.rows) fail_as(ErrorKind::kInternal, "refine_rows: row ", j, " of a matrix of ", w.rows);
  const int64_t k = w.cols;
  const detail::Q8Kernel q8 = detail::best_q8_kernel();
  detail::Q8Activations act;
  thread_local std::vector<float> rounded, row;
  rounded.resize(static_cast<size_t>(w.rows));
  row.resize(static_cast<size_t>(k));
  if (kind == WeightKind::Blocks) {
    const DType t = w.dense.dtype;
    detail::prepare_blocks(nullptr, q8, x, 1, k, std::span(&t, 1), act);
    for (int64_t j : rows) detail::blocks_cols(q8, act, w.dense, rounded.data(), false, j, j + 1);
  } else {
    detail::quantize_activations(x, 1, k, act);
    detail::prepare_interleaved(act, q8, nullptr);
    std::vector<int64_t> groups;  // each row's group of 16, once however many rows it holds
    for (int64_t j : rows) groups.push_back(j / kInterleavedRows);
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    for (int64_t g : groups)
      detail::interleaved_cols(*w.interleaved, act, rounded.data(), w.rows, false, g * kInterleavedRows,
                               std::min(w.rows, (g + 1) * kInterleavedRows), q8);
  }
  for (int64_t j : rows) {
    dequantize_row(w, j, row.data());
    double exact = 0;
    for (int64_t c = 0; c < k; ++c) exact += static_cast<double>(row[static_cast<size_t>(c)]) * x[c];
    y[j] += static_cast<float>(exact - rounded[static_cast<size_t>(j)]);
  }
}

}  // namespace graft::compute
