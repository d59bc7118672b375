#include "graft/core/tensor.h"

#include <cstring>
#include <sstream>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"

namespace graft {

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

Tensor Tensor::zeros_f32(const Shape& shape) {
  auto buf = std::make_shared<std::vector<float>>(static_cast<size_t>(shape_numel(shape)), 0.0f);
  Tensor t;
  t.dtype = DType::F32;
  t.shape = shape;
  t.data = buf->data();
  t.owner = std::shared_ptr<const void>(buf, buf->data());
  return t;
}

Tensor Tensor::owned(DType dtype, const Shape& shape, std::vector<uint8_t> bytes) {
  auto buf = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.data = buf->data();
  t.owner = std::shared_ptr<const void>(buf, buf->data());
  if (static_cast<int64_t>(buf->size()) != t.nbytes())
    fail("Tensor::owned: ", buf->size(), " bytes for ", dtype_name(dtype), " ", shape_str(shape));
  return t;
}


void convert_to_f32(DType t, const void* src, float* dst, int64_t n) {
  if (n <= 0) return;  // an empty tensor may have null pointers (memcpy with null is undefined)
  const auto* b = static_cast<const uint8_t*>(src);
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    // 16-bit elements are read with memcpy: a file may place a tensor at any byte offset.
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    default:
      if (dtype_is_quantized(t)) return dequantize_gguf_blocks(t, src, dst, n);
      fail("cannot convert ", dtype_name(t), " to F32");
  }
}

void convert_from_f32(const float* src, DType t, void* dst, int64_t n) {
  if (n <= 0) return;  // as convert_to_f32
  switch (t) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(src[i]);
      return;
    }
    default: fail("cannot convert F32 to ", dtype_name(t));
  }
}

Tensor to_f32(const Tensor& t) {
  Tensor out = Tensor::zeros_f32(t.shape);
  convert_to_f32(t.dtype, t.data, out.mutable_as<float>(), t.numel());
  return out;
}

}  // namespace graft
