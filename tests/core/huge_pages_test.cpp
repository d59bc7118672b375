// core/huge_pages.h: large buffers get their own 2 MiB-aligned region, small ones 4 KiB-aligned
// slices of shared regions that outlive the allocator's move to a new region; all zeroed and
// writable over their whole length. (Whether the kernel backs them with huge pages depends on its
// THP setting; the decode speed it buys is measured in bench/, not asserted here.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "graft/core/huge_pages.h"

namespace graft {
namespace {

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

TEST(HugePages, LargeBuffersAreAlignedZeroedAndWritable) {
  for (size_t bytes : {size_t{1} << 20, (size_t{3} << 20) + 17, size_t{8} << 20}) {
    auto b = huge_page_buffer(bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % (size_t{2} << 20), 0u) << bytes;
    EXPECT_TRUE(all_zero(b.get(), bytes));
    std::memset(b.get(), 0xAB, bytes);
    EXPECT_EQ(b[bytes - 1], 0xAB);
  }
}

TEST(HugePages, SmallBuffersAreDistinctSlicesThatOutliveTheirRegion) {
  std::vector<std::shared_ptr<uint8_t[]>> bufs;
  for (int i = 0; i < 200; ++i) {  // 200 x 300 KB: several 32 MiB regions
    bufs.push_back(huge_page_buffer(300 * 1000));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bufs.back().get()) % 4096, 0u);
    EXPECT_TRUE(all_zero(bufs.back().get(), 300 * 1000));
    std::memset(bufs.back().get(), i + 1, 300 * 1000);
  }
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(bufs[i][0], static_cast<uint8_t>(i + 1));
    EXPECT_EQ(bufs[i][300 * 1000 - 1], static_cast<uint8_t>(i + 1));
  }
  EXPECT_NE(huge_page_buffer(0), nullptr);
}

}  // namespace
}  // namespace graft
