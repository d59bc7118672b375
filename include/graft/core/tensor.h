// Tensor: a typed, shaped view of bytes plus whatever keeps those bytes alive (a file mapping or an
// owned buffer). Copying a Tensor copies the view, never the data.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graft/core/dtype.h"

namespace graft {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& s);  // "[4096, 16]"
int64_t shape_numel(const Shape& s);

struct Tensor {
  DType dtype = DType::F32;
  Shape shape;                     // row-major, outermost first (safetensors / PyTorch order)
  const void* data = nullptr;      // first byte
  std::shared_ptr<const void> owner;  // keeps `data` alive (mapping or buffer); may be null for views

  int64_t numel() const { return shape_numel(shape); }
  int64_t nbytes() const { return dtype_bytes(dtype, numel()); }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data); }

  // A new F32 tensor owning a zeroed buffer of the given shape.
  static Tensor zeros_f32(const Shape& shape);
  // A new tensor owning a copy of `bytes`.
  static Tensor owned(DType dtype, const Shape& shape, std::vector<uint8_t> bytes);
  // Writable access for tensors made by zeros_f32/owned (the caller must know it owns them).
  template <typename T>
  T* mutable_as() { return static_cast<T*>(const_cast<void*>(data)); }
};

// Converts any supported dtype (plain or GGUF block-quantized) to F32, n elements.
void convert_to_f32(DType src_type, const void* src, float* dst, int64_t n);
// Converts F32 to F32/F16/BF16 (round to nearest even).
void convert_from_f32(const float* src, DType dst_type, void* dst, int64_t n);
// A new owned F32 tensor with the same shape.
Tensor to_f32(const Tensor& t);

}  // namespace graft
