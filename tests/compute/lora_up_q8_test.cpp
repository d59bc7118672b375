// The 8-bit up-projection of unfused adapter terms (--lora-dtype q8_0; compute/kernels.h UpQ8): the
// codes and scales are the documented rounding of B, and every integer path (scalar, AVX2 vpmaddwd,
// AVX512-VNNI vpdpbusd) gives the bits of the documented sum for ranks that need padding (1, 3, 17),
// row counts that are not whole groups of 16 and any column cut.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "compute/matmul_q8.h"
#include "graft/compute/kernels.h"

namespace graft::compute {
namespace {

// The documented rounding, written out again: d = max|v| / 127, q = round(v / d) (ties away).
struct Rounded {
  float d;
  std::vector<int> q;
};
Rounded round_row(const float* v, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  Rounded r{amax / 127.0f, std::vector<int>(static_cast<size_t>(n))};
  const float id = r.d != 0.0f ? 1.0f / r.d : 0.0f;
  for (int64_t i = 0; i < n; ++i) r.q[static_cast<size_t>(i)] = static_cast<int>(std::round(v[i] * id));
  return r;
}

TEST(UpQ8, EveryIntegerPathGivesTheDocumentedSumBitForBit) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int paths = 0;
  for (auto [rows, r] : {std::pair<int64_t, int64_t>{37, 1}, {16, 3}, {64, 16}, {45, 17}, {5, 8}}) {
    std::vector<float> b(static_cast<size_t>(rows * r));
    for (float& v : b) v = nd(rng) * 0.05f;
    for (int64_t k = 0; k < r; ++k) b[static_cast<size_t>(2 * r + k)] = 0.0f;  // an all-zero row: d = 0
    const UpQ8 q = quantize_up_q8(b.data(), rows, r);
    ASSERT_EQ(q.r4 % 4, 0);
    std::vector<Rounded> want;
    for (int64_t o = 0; o < rows; ++o) {
      want.push_back(round_row(&b[static_cast<size_t>(o * r)], r));
      for (int64_t k = 0; k < r; ++k) {
        ASSERT_EQ(q.at(o, k), want.back().d * static_cast<float>(want.back().q[static_cast<size_t>(k)]))
            << "row " << o << " k " << k;
        ASSERT_LE(std::fabs(q.at(o, k) - b[static_cast<size_t>(o * r + k)]), 0.5f * want.back().d * 1.0001f);
      }
    }
    std::vector<float> low(static_cast<size_t>(r));
    for (float& v : low) v = nd(rng);
    std::vector<int8_t> ql(static_cast<size_t>(q.r4), 99);
    int32_t offset = 0;
    const float d_low = quantize_low_q8(low.data(), r, q.r4, ql.data(), &offset);
    const Rounded lr = round_row(low.data(), r);
    ASSERT_EQ(d_low, lr.d);
    int32_t sum = 0;
    for (int64_t k = 0; k < q.r4; ++k) {
      ASSERT_EQ(ql[static_cast<size_t>(k)], k < r ? lr.q[static_cast<size_t>(k)] : 0) << k;
      sum += ql[static_cast<size_t>(k)];
    }
    ASSERT_EQ(offset, 128 * sum);
    const float s = 0.75f;
    for (auto kernel : {detail::Q8Kernel::Scalar, detail::Q8Kernel::Avx2, detail::Q8Kernel::AvxVnni,
                        detail::Q8Kernel::Avx512Vnni}) {
      if (!detail::q8_kernel_supported(kernel)) continue;
      ++paths;
      for (auto [c0, c1] : {std::pair<int64_t, int64_t>{0, rows}, {3, rows - 1}, {16, std::min<int64_t>(rows, 32)},
                            {rows - 1, rows}}) {
        if (c0 >= c1) continue;
        std::vector<float> y(static_cast<size_t>(c1 - c0), 0.25f), ref = y;
        detail::lora_up_add_q8_with(kernel, q, ql.data(), offset, d_low, s, c0, c1, y.data());
        for (int64_t o = c0; o < c1; ++o) {
          int32_t isum = 0;
          for (int64_t k = 0; k < r; ++k)
            isum += lr.q[static_cast<size_t>(k)] * want[static_cast<size_t>(o)].q[static_cast<size_t>(k)];
          ref[static_cast<size_t>(o - c0)] += ((s * d_low) * want[static_cast<size_t>(o)].d) * static_cast<float>(isum);
        }
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_EQ(y[i], ref[i]) << detail::q8_kernel_name(kernel) << " rows " << rows << " r " << r << " column "
                                  << c0 + static_cast<int64_t>(i);
      }
    }
  }
  EXPECT_GE(paths, 5 * 2);  // the scalar and AVX2 paths run on every x86-64-v3 machine
}

}  // namespace
}  // namespace graft::compute
