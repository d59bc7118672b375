// first_non_finite (graft/core/finite.h): element by element for F32/F16/BF16 on the bit patterns,
// through the f16 scale/min fields for GGUF blocks. Exact answers (an index), no tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "graft/core/convert.h"
#include "graft/core/finite.h"
#include "graft/core/gguf_blocks.h"

namespace graft {
namespace {

Tensor f32_tensor(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return Tensor::owned(DType::F32, {static_cast<int64_t>(v.size())}, std::move(b));
}

TEST(FirstNonFinite, FloatFormatsReportTheFirstBadElement) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t at : {0, 5, 63, 64, 130, 199}) {
      for (float bad : {nan, inf, -inf}) {
        std::vector<float> v(200, 0.5f);
        v[3] = -0.0f;
        v[7] = 1e-40f;  // denormal in F32, zero in F16/BF16: finite either way
        v[9] = t == DType::F16 ? 65504.0f : 3e38f;  // the largest finite values
        v[at] = bad;
        if (at + 10 < 200) v[at + 10] = nan;  // only the first one is reported
        Tensor f = f32_tensor(v);
        Tensor x = t == DType::F32 ? f : convert_tensor(f, t);
        EXPECT_EQ(first_non_finite(x), at) << dtype_name(t) << " value " << bad;
      }
      std::vector<float> ok(200, -2.0f);
      Tensor f = f32_tensor(ok);
      EXPECT_EQ(first_non_finite(t == DType::F32 ? f : convert_tensor(f, t)), -1) << dtype_name(t);
    }
}

TEST(FirstNonFinite, GgufBlocksThroughTheirScaleFields) {
  for (DType t : {DType::Q8_0, DType::Q4_1, DType::Q4_K, DType::Q6_K, DType::Q2_K}) {
    const int64_t bb = dtype_block_bytes(t), be = dtype_block_elems(t), blocks = 5;
    std::vector<uint8_t> bytes(static_cast<size_t>(bb * blocks), 0xff);  // codes of all ones: not scales
    for (int64_t b = 0; b < blocks; ++b)
      for (int off : gguf_block_f16_fields(t)) {
        const uint16_t h = f32_to_f16(0.25f);
        std::memcpy(&bytes[b * bb + off], &h, 2);
      }
    const Tensor good = Tensor::owned(t, {blocks * be}, bytes);
    EXPECT_EQ(first_non_finite(good), -1) << dtype_name(t);
    const std::vector<int> fields = gguf_block_f16_fields(t);
    const uint16_t inf = 0x7c00;
    std::memcpy(&bytes[3 * bb + fields.back()], &inf, 2);  // the min (or the only scale) of block 3
    EXPECT_EQ(first_non_finite(Tensor::owned(t, {blocks * be}, bytes)), 3 * be) << dtype_name(t);
  }
}

// With a pool, a large tensor is checked in pieces: the answer is still the first bad element, in
// whichever piece it lies and whatever a later piece holds.
TEST(FirstNonFinite, APoolFindsTheSameFirstElement) {
  ThreadPool pool(3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t n = int64_t{3} << 20;  // 12 MiB of F32: a dozen pieces
  for (DType t : {DType::F32, DType::BF16})
    for (int64_t at : {int64_t{0}, int64_t{1} << 20, n / 2 + 7, n - 1}) {
      std::vector<float> v(static_cast<size_t>(n), 0.5f);
      v[at] = nan;
      v[n - 1 - (at == n - 1)] = nan;  // a later one (or an earlier one when at is the last)
      Tensor f = f32_tensor(v);
      Tensor x = t == DType::F32 ? f : convert_tensor(f, t);
      const int64_t serial = first_non_finite(x);
      EXPECT_EQ(serial, at == n - 1 ? n - 2 : at) << dtype_name(t);
      EXPECT_EQ(first_non_finite(x, &pool), serial) << dtype_name(t) << " at " << at;
    }
  // GGUF blocks in pieces: block 20,000 of 40,000 Q8_0 blocks (1.3 MiB) has an infinite scale.
  const int64_t blocks = 40000, bb = dtype_block_bytes(DType::Q8_0), be = dtype_block_elems(DType::Q8_0);
  std::vector<uint8_t> bytes(static_cast<size_t>(bb * blocks), 0);
  const uint16_t inf = 0x7c00;
  std::memcpy(&bytes[20000 * bb], &inf, 2);
  std::memcpy(&bytes[39999 * bb], &inf, 2);
  EXPECT_EQ(first_non_finite(Tensor::owned(DType::Q8_0, {blocks * be}, bytes), &pool), 20000 * be);
}

}  // namespace
}  // namespace graft
