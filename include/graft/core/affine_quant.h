// mlx-lm's affine quantization ("mode": "affine"): a row-major [rows, cols] matrix is cut into
// groups of `group_size` consecutive columns; each group stores unsigned codes q in
// [0, 2^bits - 1] and one (scale, bias) pair, and w = scale·q + bias. Codes are packed LSB first
// into little-endian uint32 words along each row (32 / bits codes per word), exactly as mlx
// writes `<module>.weight` (uint32 [rows, cols·bits/32]), `.scales` and `.biases`
// ([rows, cols/group_size], in the model's float dtype).
//
// graft keeps the packed codes as stored (zero-copy), and scales/biases as stored when F32 or BF16
// (F16 is widened to F32 once at load): at 4-bit g64, F32 scales and biases would add a quarter
// to the bytes a decode step streams, BF16 an eighth. Every read widens them exactly to F32.
#pragma once
#include <cstdint>
#include <string>

#include "graft/core/tensor.h"

namespace graft {

struct AffineQuantized {
  Tensor packed;  // U32 [rows, cols·bits/32]
  Tensor scales;  // F32 or BF16 [rows, cols/group_size]
  Tensor biases;  // F32 or BF16 [rows, cols/group_size]
  int bits = 0;        // 4 or 8
  int group_size = 0;  // 32, 64 or 128
  int64_t rows = 0, cols = 0;

  int64_t nbytes() const { return packed.nbytes() + scales.nbytes() + biases.nbytes(); }
};

// Throws unless bits ∈ {4, 8}, group_size ∈ {32, 64, 128} and cols is a multiple of group_size;
// `what` names the tensor in the message.
void check_affine_params(int bits, int group_size, int64_t cols, const std::string& what);

// Builds the view from the three stored tensors, checking dtypes and shapes against [rows, cols]
// (F16 scales/biases are converted to F32). `what` names the module in errors.
AffineQuantized make_affine_quantized(const Tensor& packed, const Tensor& scales, const Tensor& biases, int bits,
                                      int group_size, int64_t rows, int64_t cols, const std::string& what);

// Row `row`'s scales and biases widened to F32 (cols/group_size each).
void affine_row_params(const AffineQuantized& q, int64_t row, float* scales, float* biases);

// w[row, c0 .. c0+n) in F32 (c0 and n multiples of group_size... or any range inside a row).
void dequantize_affine_row(const AffineQuantized& q, int64_t row, float* out);
// The whole matrix in F32 [rows, cols].
Tensor dequantize_affine(const AffineQuantized& q);

// Quantizes a F32/F16/BF16 [rows, cols] matrix the way mlx.core.quantize does (see the .cpp for
// the exact arithmetic); scales/biases are rounded to `scale_dtype` (the model dtype) as mlx
// stores them, and the returned view holds them widened back to F32 (exact). The result owns its
// storage.
AffineQuantized quantize_affine(const Tensor& w, int bits, int group_size, DType scale_dtype);

// Scales/biases (F32 or BF16) in `dtype` (what a checkpoint writer emits).
Tensor affine_param_as(const Tensor& f32_params, DType dtype);

}  // namespace graft
