#include "graft/core/tensor.h"

#include <cstring>
#include <sstream>

#include "graft/core/error.h"

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

namespace {
// GGUF block formats, little-endian; layouts as in ggml's block_q8_0 / block_q4_0 / block_q4_1.
uint16_t rd16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

void dequant_q8_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 34, dst += 32) {
    float d = f16_to_f32(rd16(src));
    const int8_t* q = reinterpret_cast<const int8_t*>(src + 2);
    for (int i = 0; i < 32; ++i) dst[i] = d * static_cast<float>(q[i]);
  }
}
void dequant_q4_0(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 18, dst += 32) {
    float d = f16_to_f32(rd16(src));
    const uint8_t* q = src + 2;
    for (int i = 0; i < 16; ++i) {
      dst[i] = d * static_cast<float>((q[i] & 0x0f) - 8);
      dst[i + 16] = d * static_cast<float>((q[i] >> 4) - 8);
    }
  }
}
void dequant_q4_1(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, src += 20, dst += 32) {
    float d = f16_to_f32(rd16(src));
    float m = f16_to_f32(rd16(src + 2));
    const uint8_t* q = src + 4;
    for (int i = 0; i < 16; ++i) {
      dst[i] = d * static_cast<float>(q[i] & 0x0f) + m;
      dst[i + 16] = d * static_cast<float>(q[i] >> 4) + m;
    }
  }
}
}  // namespace

void convert_to_f32(DType t, const void* src, float* dst, int64_t n) {
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
    case DType::Q8_0: dequant_q8_0(b, dst, n); return;
    case DType::Q4_0: dequant_q4_0(b, dst, n); return;
    case DType::Q4_1: dequant_q4_1(b, dst, n); return;
    default: fail("cannot convert ", dtype_name(t), " to F32");
  }
}

void convert_from_f32(const float* src, DType t, void* dst, int64_t n) {
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
