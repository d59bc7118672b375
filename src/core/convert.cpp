#include "graft/core/convert.h"

#include <cstring>

#include "graft/core/error.h"

namespace graft {

Tensor convert_tensor(const Tensor& t, DType to) {
  if (t.dtype == to) return t;
  Tensor f = to_f32(t);
  if (to == DType::F32) return f;
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(to, t.numel())));
  convert_from_f32(f.as<float>(), to, bytes.data(), t.numel());
  return Tensor::owned(to, t.shape, std::move(bytes));
}

std::vector<float> rows_to_f32(const Tensor& t, int64_t row0, int64_t rows) {
  const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
  std::vector<float> out(static_cast<size_t>(rows * cols));
  if (!out.empty())
    convert_to_f32(t.dtype, static_cast<const uint8_t*>(t.data) + dtype_bytes(t.dtype, row0 * cols), out.data(),
                   rows * cols);
  return out;
}

Tensor transpose_2d(const Tensor& t) {
  if (t.shape.size() != 2) fail("transpose_2d: shape ", shape_str(t.shape), " is not 2-D");
  if (dtype_is_quantized(t.dtype)) fail("transpose_2d: dtype ", dtype_name(t.dtype), " is a block type");
  const int64_t rows = t.shape[0], cols = t.shape[1];
  const size_t es = static_cast<size_t>(dtype_bytes(t.dtype, 1));
  std::vector<uint8_t> out(static_cast<size_t>(t.nbytes()));
  const auto* src = static_cast<const uint8_t*>(t.data);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      std::memcpy(&out[static_cast<size_t>(c * rows + r) * es], src + static_cast<size_t>(r * cols + c) * es, es);
  return Tensor::owned(t.dtype, {cols, rows}, std::move(out));
}

}  // namespace graft
