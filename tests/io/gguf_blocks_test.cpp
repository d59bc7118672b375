// Every GGUF block format graft reads, dequantized and compared bit for bit (tolerance: none) with
// the `gguf` Python package's reference gguf.quants.dequantize on the same bytes. Fixture:
// tests/fixtures/gguf/blocks.gguf from tools/gen_gguf_block_fixtures.py (gguf-py's quantizer for
// the formats it can write, random bytes with finite scales for the K-quants and IQ4).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"
#include "graft/io/checkpoint_writer.h"
#include "graft/io/gguf.h"
#include "graft/io/safetensors.h"
#include "map_source.h"
#include "test_paths.h"

namespace graft::io {
namespace {

class GgufBlocks : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufBlocks, DequantizeMatchesGgufPyBitForBit) {
  auto f = GgufFile::open(test::fixture("gguf/blocks.gguf"));
  const std::string name = GetParam();
  const Tensor q = f->tensor(name);
  const Tensor ref = f->tensor(name + ".ref");
  ASSERT_EQ(dtype_name(q.dtype), name);
  ASSERT_EQ(q.shape, ref.shape);
  ASSERT_EQ(ref.dtype, DType::F32);
  const Tensor got = to_f32(q);
  const float* g = got.as<float>();
  const float* r = ref.as<float>();
  int64_t mismatches = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, g + i, 4);
    std::memcpy(&b, r + i, 4);
    if (a != b && mismatches++ < 5) ADD_FAILURE() << name << " element " << i << ": " << g[i] << " vs " << r[i];
  }
  EXPECT_EQ(mismatches, 0);
  // The reference is not trivial: it has both signs and no more than a few zeros per block.
  int64_t pos = 0, neg = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) (r[i] > 0 ? pos : r[i] < 0 ? neg : pos) += r[i] != 0;
  EXPECT_GT(pos, ref.numel() / 8);
  EXPECT_GT(neg, ref.numel() / 8);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, GgufBlocks,
                         ::testing::Values("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                                           "Q6_K", "IQ4_NL", "IQ4_XS"));

TEST(GgufBlocksSizes, BlockGeometry) {
  EXPECT_EQ(dtype_block_elems(DType::Q4_K), 256);
  EXPECT_EQ(dtype_block_bytes(DType::Q4_K), 144);
  EXPECT_EQ(dtype_bytes(DType::Q6_K, 512), 420);
  EXPECT_EQ(dtype_bytes(DType::Q5_0, 64), 44);
  EXPECT_THROW(dtype_bytes(DType::Q2_K, 128), Error);
  std::vector<float> out(256);
  EXPECT_THROW(dequantize_gguf_blocks(DType::F16, nullptr, out.data(), 256), Error);
}

}  // namespace
}  // namespace graft::io

namespace graft::io {
namespace {

// A GGUF base fused into a safetensors checkpoint: block tensors have no safetensors dtype and are
// written dequantized (F32, or --dtype), equal to the reference dequantization.
TEST(GgufBlocksCheckpoint, BlockTensorsAreWrittenDequantized) {
  auto f = GgufFile::open(test::fixture("gguf/blocks.gguf"));
  test::MapSource src;
  src.t["w"] = f->tensor("Q4_K");
  const std::string dir = ::testing::TempDir() + "graft_blocks_ckpt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  write_checkpoint(src, dir, CheckpointWriteOptions{});
  auto st = SafetensorsFile::open(dir + "/model.safetensors");
  const Tensor back = st->tensor("w");
  ASSERT_EQ(back.dtype, DType::F32);
  const Tensor ref = f->tensor("Q4_K.ref");
  EXPECT_EQ(std::memcmp(back.data, ref.data, static_cast<size_t>(ref.nbytes())), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace graft::io
