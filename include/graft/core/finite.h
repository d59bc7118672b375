// Non-finite values in stored tensors. A NaN or infinity in a weight is not a number the model can
// use: one in a projection turns every later activation of the sequence into NaN, so loaders refuse
// it by name instead of letting generation print garbage (or fail at the first logit).
#pragma once
#include <cstdint>

#include "graft/core/tensor.h"
#include "graft/core/thread_pool.h"

namespace graft {

// The index of the first element of t that is NaN or ±inf, or -1 when there is none. F32, F16 and
// BF16 are checked element by element (on the bit patterns: a pass at memory speed); GGUF block
// formats through their f16 scale and min fields (the integer codes cannot be non-finite), and the
// index returned is the first element of the offending block. Other dtypes (integers): -1.
// With a pool, a large tensor is checked in parallel pieces (the same answer: the first of them).
int64_t first_non_finite(const Tensor& t, ThreadPool* pool = nullptr);

}  // namespace graft
