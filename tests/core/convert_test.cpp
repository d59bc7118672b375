// The row and transpose copies shared by the adapter, model and runtime layers (core/convert.h).
#include <gtest/gtest.h>

#include <vector>

#include "graft/core/convert.h"
#include "graft/core/error.h"

namespace graft {
namespace {

Tensor bf16_tensor(const Shape& shape, const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * 2);
  convert_from_f32(v.data(), DType::BF16, bytes.data(), static_cast<int64_t>(v.size()));
  return Tensor::owned(DType::BF16, shape, std::move(bytes));
}

TEST(Convert, RowsToF32ReadsTheRowsAsked) {
  const Tensor t = bf16_tensor({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(rows_to_f32(t, 1, 2), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(rows_to_f32(t, 0, 0), std::vector<float>{});
  const Tensor v = bf16_tensor({4}, {1, 2, 3, 4});  // 1-D: one element per row
  EXPECT_EQ(rows_to_f32(v, 2, 2), (std::vector<float>{3, 4}));
}

TEST(Convert, Transpose2dKeepsTheDtypeAndRefusesWhatIsNot2d) {
  const Tensor t = bf16_tensor({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor tt = transpose_2d(t);
  EXPECT_EQ(tt.dtype, DType::BF16);
  EXPECT_EQ(tt.shape, (Shape{3, 2}));
  EXPECT_EQ(rows_to_f32(tt, 0, 3), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_THROW(transpose_2d(bf16_tensor({6}, {1, 2, 3, 4, 5, 6})), Error);
}

}  // namespace
}  // namespace graft
