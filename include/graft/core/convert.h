// Whole-tensor dtype conversion through F32 (round to nearest even), shared by model loading and
// checkpoint writing, and the row and transpose copies the adapter, model and runtime layers share.
#pragma once
#include <vector>

#include "graft/core/tensor.h"

namespace graft {

// The tensor itself when it already has `to`; otherwise a new owned tensor in `to` (F32/F16/BF16).
Tensor convert_tensor(const Tensor& t, DType to);

// Rows [row0, row0 + rows) of a row-major 1-D or 2-D tensor (any dtype convert_to_f32 reads; rows of
// a block type must hold whole blocks) as F32. The caller checks the bounds.
std::vector<float> rows_to_f32(const Tensor& t, int64_t row0, int64_t rows);

// A new owned [cols, rows] tensor holding tᵀ in t's dtype; t must be 2-D of a plain (not block) dtype.
Tensor transpose_2d(const Tensor& t);

}  // namespace graft
