#include "graft/core/affine_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "graft/core/error.h"

namespace graft {

void check_affine_params(int bits, int group_size, int64_t cols, const std::string& what) {
  if (bits != 4 && bits != 8) fail(what, ": ", bits, "-bit quantization is not supported (supported: 4, 8)");
  if (group_size != 32 && group_size != 64 && group_size != 128)
    fail(what, ": group size ", group_size, " is not supported (supported: 32, 64, 128)");
  if (cols <= 0 || cols % group_size != 0)
    fail(what, ": ", cols, " columns are not a positive multiple of the group size ", group_size);
}

AffineQuantized make_affine_quantized(const Tensor& packed, const Tensor& scales, const Tensor& biases, int bits,
                                      int group_size, int64_t rows, int64_t cols, const std::string& what) {
  check_affine_params(bits, group_size, cols, what);
  const Shape want_packed = {rows, cols * bits / 32}, want_groups = {rows, cols / group_size};
  if (packed.dtype != DType::U32 || packed.shape != want_packed)
    fail(what, ".weight is ", dtype_name(packed.dtype), " ", shape_str(packed.shape), "; expected U32 ",
         shape_str(want_packed), " for ", bits, "-bit codes of a ", shape_str({rows, cols}), " matrix");
  for (const auto* t : {&scales, &biases}) {
    const char* name = t == &scales ? ".scales" : ".biases";
    if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16)
      fail(what, name, " has dtype ", dtype_name(t->dtype), "; expected F32, F16 or BF16");
    if (t->shape != want_groups)
      fail(what, name, " has shape ", shape_str(t->shape), "; expected ", shape_str(want_groups), " (group size ",
           group_size, ")");
  }
  AffineQuantized q;
  q.packed = packed;
  q.scales = scales.dtype == DType::F16 ? to_f32(scales) : scales;
  q.biases = biases.dtype == DType::F16 ? to_f32(biases) : biases;
  std::vector<float> v;
  for (const auto* t : {&q.scales, &q.biases}) {
    v.resize(static_cast<size_t>(t->numel()));
    convert_to_f32(t->dtype, t->data, v.data(), t->numel());
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]))
        fail(what, t == &q.scales ? ".scales" : ".biases", " holds a non-finite value at element ", i);
  }
  q.bits = bits;
  q.group_size = group_size;
  q.rows = rows;
  q.cols = cols;
  return q;
}

void affine_row_params(const AffineQuantized& q, int64_t row, float* scales, float* biases) {
  const int64_t groups = q.cols / q.group_size;
  for (auto [t, out] : {std::pair{&q.scales, scales}, std::pair{&q.biases, biases}})
    convert_to_f32(t->dtype, static_cast<const uint8_t*>(t->data) + dtype_bytes(t->dtype, row * groups), out, groups);
}

void dequantize_affine_row(const AffineQuantized& q, int64_t row, float* out) {
  const int64_t words = q.cols * q.bits / 32, groups = q.cols / q.group_size, per_word = 32 / q.bits;
  // Packed words may sit at any byte offset in a safetensors file (a BF16 tensor of odd length
  // before them): read them with memcpy.
  const uint8_t* w = static_cast<const uint8_t*>(q.packed.data) + row * words * 4;
  std::vector<float> sv(static_cast<size_t>(groups)), bv(static_cast<size_t>(groups));
  affine_row_params(q, row, sv.data(), bv.data());
  const float* s = sv.data();
  const float* b = bv.data();
  const uint32_t mask = (1u << q.bits) - 1;
  for (int64_t c = 0; c < q.cols; ++c) {
    uint32_t word;
    std::memcpy(&word, w + (c / per_word) * 4, 4);
    const uint32_t code = (word >> ((c % per_word) * q.bits)) & mask;
    const int64_t g = c / q.group_size;
    out[c] = s[g] * static_cast<float>(code) + b[g];
  }
}

Tensor dequantize_affine(const AffineQuantized& q) {
  Tensor t = Tensor::zeros_f32({q.rows, q.cols});
  float* p = t.mutable_as<float>();
  for (int64_t r = 0; r < q.rows; ++r) dequantize_affine_row(q, r, p + r * q.cols);
  return t;
}

Tensor affine_param_as(const Tensor& params, DType dtype) {
  if (dtype == params.dtype) return params;
  const Tensor f = params.dtype == DType::F32 ? params : to_f32(params);
  if (dtype == DType::F32) return f;
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(dtype, f.numel())));
  convert_from_f32(f.as<float>(), dtype, bytes.data(), f.numel());
  return Tensor::owned(dtype, f.shape, std::move(bytes));
}

namespace {
float round_to(float v, DType dtype) {
  if (dtype == DType::F32) return v;
  uint16_t h;
  convert_from_f32(&v, dtype, &h, 1);
  float back;
  convert_to_f32(dtype, &h, &back, 1);
  return back;
}
}  // namespace

// mlx.core.quantize (affine), per group of g values w (widened to F32):
//   lo = min w, hi = max w; n = 2^bits - 1
//   s = max((hi - lo) / n, 1e-7); neg = |lo| > |hi|; s = neg ? s : -s; edge = neg ? lo : hi
//   q0 = rint(edge / s); if q0 != 0: s = edge / q0; bias = (q0 == 0) ? 0 : edge
//   code = clamp(rint((w - bias) / s), 0, n)   (with the F32 s and bias, before rounding them)
//   stored scale, bias = s, bias rounded to the model dtype
// The edge snapping makes the value of larger magnitude exactly representable (code 0 or n).
AffineQuantized quantize_affine(const Tensor& w, int bits, int group_size, DType scale_dtype) {
  if (w.shape.size() != 2) fail("quantize: expected a 2-D matrix, got ", shape_str(w.shape));
  const int64_t rows = w.shape[0], cols = w.shape[1];
  check_affine_params(bits, group_size, cols, "quantize");
  const int64_t groups = cols / group_size, words = cols * bits / 32, per_word = 32 / bits;
  const float n_bins = static_cast<float>((1 << bits) - 1);
  std::vector<uint8_t> packed(static_cast<size_t>(rows * words * 4), 0);
  Tensor scales = Tensor::zeros_f32({rows, groups}), biases = Tensor::zeros_f32({rows, groups});
  uint32_t* pw = reinterpret_cast<uint32_t*>(packed.data());
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    convert_to_f32(w.dtype, static_cast<const uint8_t*>(w.data) + dtype_bytes(w.dtype, r * cols), row.data(), cols);
    for (int64_t g = 0; g < groups; ++g) {
      const float* v = row.data() + g * group_size;
      float lo = v[0], hi = v[0];
      for (int64_t i = 1; i < group_size; ++i) lo = std::min(lo, v[i]), hi = std::max(hi, v[i]);
      if (!std::isfinite(lo) || !std::isfinite(hi)) fail("quantize: row ", r, " holds a non-finite value");
      float s = std::max((hi - lo) / n_bins, 1e-7f);
      const bool neg = std::fabs(lo) > std::fabs(hi);
      s = neg ? s : -s;
      const float edge = neg ? lo : hi;
      const float q0 = std::nearbyint(edge / s);
      float bias = 0.0f;
      if (q0 != 0.0f) {
        s = edge / q0;
        bias = edge;
      }
      for (int64_t i = 0; i < group_size; ++i) {
        const float code = std::clamp(std::nearbyint((v[i] - bias) / s), 0.0f, n_bins);
        const int64_t c = g * group_size + i;
        pw[r * words + c / per_word] |= static_cast<uint32_t>(code) << ((c % per_word) * bits);
      }
      scales.mutable_as<float>()[r * groups + g] = round_to(s, scale_dtype);
      biases.mutable_as<float>()[r * groups + g] = round_to(bias, scale_dtype);
    }
  }
  AffineQuantized q;
  q.packed = Tensor::owned(DType::U32, {rows, words}, std::move(packed));
  q.scales = scales;
  q.biases = biases;
  q.bits = bits;
  q.group_size = group_size;
  q.rows = rows;
  q.cols = cols;
  return q;
}

}  // namespace graft
