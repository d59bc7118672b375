// F32 → GGUF block formats, byte for byte as llama.cpp's `llama-quantize` writes them without an
// importance matrix (ggml's reference quantizers, quantize_row_<type>_ref): the same F32 operations
// in the same order (the build's -ffp-contract=off keeps them unfused, as ggml-base is compiled),
// the same rounding (nearest_int's 1.5·2²³ trick, truncating casts, roundf), the same scale
// searches (make_qkx2_quants for Q4_K's 32-element sub-blocks, make_qx_quants for Q6_K's 16).
// Checked against llama-quantize's own output tensor by tensor (tests/engine/smollm2_q4km_test.cpp)
// and against the `gguf` Python package's quantizers for the 32-element formats.
//
// Input must be finite (NaN has no defined code in ggml either); the caller checks.
#pragma once
#include <cstdint>

#include "graft/core/dtype.h"

namespace graft {

// True for the formats quantize_gguf_blocks writes: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K.
bool gguf_quantize_supported(DType t);

// Quantizes n F32 values (a multiple of the block size: 32, or 256 for the K-quants) to `dst`
// (n / block_elems blocks). Throws kUnsupported for another format, kInvalidArgument for a bad n.
void quantize_gguf_blocks(DType t, const float* src, void* dst, int64_t n);

}  // namespace graft
