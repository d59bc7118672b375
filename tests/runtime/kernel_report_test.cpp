// A model's weights on the kernels (runtime/kernels.h): prepare_weights prepares every matrix the
// forward pass multiplies, describe_kernels names the formats the model holds and the kernels that
// run them, activations_in_force says whether the activations are rounded.
#include <gtest/gtest.h>

#include <string>

#include "graft/core/affine_quant.h"
#include "graft/model/weights.h"
#include "graft/runtime/kernels.h"

namespace graft::runtime {
namespace {

// An mlx affine matrix [rows, cols] of `bits` in groups of 64 (values a small ramp).
AffineQuantized affine(int bits, int64_t rows, int64_t cols) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = 0.01f * static_cast<float>(static_cast<int64_t>(i % 97) - 48);
  Tensor t = Tensor::owned(DType::F32, {rows, cols},
                           std::vector<uint8_t>(reinterpret_cast<uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(v.data() + v.size())));
  return quantize_affine(t, bits, 64, DType::BF16);
}

TEST(KernelReport, PrepareWeightsCopiesWhereTheKernelRunsAndSaysSo) {
  ThreadPool pool(1);
  model::ModelWeights w;
  w.lm_head = model::Matrix::of(affine(8, 32, 128));
  const int64_t bytes = prepare_weights(w, pool);
  EXPECT_EQ(w.lm_head.interleaved != nullptr, compute::interleave_enabled_affine());
  EXPECT_EQ(bytes > 0, compute::interleave_enabled_affine());
  const std::string line = describe_kernels(w);
  EXPECT_NE(line.find("weights: mlx affine 8-bit x1 | kernels:"), std::string::npos) << line;
  EXPECT_EQ(line.find("affine 4/8-bit rows interleaved x16") != std::string::npos, compute::interleave_enabled_affine()) << line;
  EXPECT_EQ(activations_in_force(w, compute::Activations::Q8), std::string(compute::interleave_enabled_affine() ? "q8" : "f32"));
  EXPECT_EQ(activations_in_force(w, compute::Activations::F32), std::string("f32"));
}

}  // namespace
}  // namespace graft::runtime
