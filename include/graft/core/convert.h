// Whole-tensor dtype conversion through F32 (round to nearest even), shared by model loading and
// checkpoint writing.
#pragma once
#include "graft/core/tensor.h"

namespace graft {

// The tensor itself when it already has `to`; otherwise a new owned tensor in `to` (F32/F16/BF16).
Tensor convert_tensor(const Tensor& t, DType to);

}  // namespace graft
