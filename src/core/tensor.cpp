#include "graft/core/tensor.h"

#include <immintrin.h>

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
    // Eight at a time with the same rounding as the scalar converters (the KV cache writes every
    // key and value row through here): F16C's vcvtps2ph in round-to-nearest-even mode (eights with
    // a NaN go through f32_to_f16, whose NaN bits differ), and f32_to_bf16's integer rounding.
    case DType::F16: {
      auto* h = static_cast<uint16_t*>(dst);
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(src + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) {
          for (int64_t j = i; j < i + 8; ++j) h[j] = f32_to_f16(src[j]);
          continue;
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i),
                         _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      for (; i < n; ++i) h[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::BF16: {
      auto* h = static_cast<uint16_t*>(dst);
      int64_t i = 0;
      const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
      const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
      for (; i + 8 <= n; i += 8) {
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
        const __m256i hi = _mm256_srli_epi32(b, 16);
        const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(b, bias), _mm256_and_si256(hi, one)), 16);
        const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs_mask), inf);
        const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan);  // each lane in [0, 0xffff]
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xD8);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), _mm256_castsi256_si128(packed));
      }
      for (; i < n; ++i) h[i] = f32_to_bf16(src[i]);
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
