#include "graft/core/convert.h"

namespace graft {

Tensor convert_tensor(const Tensor& t, DType to) {
  if (t.dtype == to) return t;
  Tensor f = to_f32(t);
  if (to == DType::F32) return f;
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(to, t.numel())));
  convert_from_f32(f.as<float>(), to, bytes.data(), t.numel());
  return Tensor::owned(to, t.shape, std::move(bytes));
}

}  // namespace graft
