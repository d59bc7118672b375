// mlx-lm affine matrices (4 or 8 bits, groups of 32/64/128 columns) copied into the interleaved layout of
// interleaved_blocks.h, so that they run on the same block-model kernels as GGUF Q4_1 (4-bit: the
// same structure, w = scale·q + bias with q an unsigned nibble) and Q8_0 (8-bit: unsigned codes with a
// bias), and the inverse for tests.
#include <cstring>
#include <vector>

#include "graft/core/error.h"
#include "compute/interleaved_blocks.h"

namespace graft::compute {

namespace {
constexpr int64_t kRows = kInterleavedRows;
constexpr int64_t kBlock = kInterleavedBlock;

int log2_blocks(int group_size) { return group_size == 128 ? 2 : group_size == 64 ? 1 : 0; }

// Code c of a row of packed mlx words (LSB first: 32/bits codes per little-endian uint32).
uint32_t code_at(const uint32_t* words, int bits, int64_t c) {
  const int64_t per_word = 32 / bits;
  return (words[c / per_word] >> (bits * (c % per_word))) & ((1u << bits) - 1);
}
}  // namespace

std::shared_ptr<const InterleavedBlocks> interleave_affine(const AffineQuantized& w, ThreadPool* pool) {
  check_affine_params(w.bits, w.group_size, w.cols, "interleave_affine");
  const InterleavedKind kind = w.bits == 4 ? InterleavedKind::Affine4 : InterleavedKind::Affine8;
  auto out = detail::allocate_interleaved(kind, w.rows, w.cols, log2_blocks(w.group_size));
  InterleavedBlocks& b = *out;
  const int64_t words = w.cols * w.bits / 32, groups_per_row = w.cols / w.group_size;
  const auto* packed = static_cast<const uint32_t*>(w.packed.data);
  detail::fill_rows(b, pool, [&](int64_t g, int64_t r) {
    thread_local std::vector<float> scales, biases;
    scales.resize(static_cast<size_t>(groups_per_row));
    biases.resize(scales.size());
    auto* codes = const_cast<uint8_t*>(b.codes(g));
    auto* params = const_cast<float*>(b.params(g));
    const int64_t row = g * kRows + r;
    const uint32_t* src = packed + row * words;
    affine_row_params(w, row, scales.data(), biases.data());
    for (int64_t p = 0; p < groups_per_row; ++p) {
      params[p * 32 + r] = scales[static_cast<size_t>(p)];
      params[p * 32 + kRows + r] = biases[static_cast<size_t>(p)];
    }
    for (int64_t blk = 0; blk < b.blocks; ++blk) {
      uint8_t* dst = codes + blk * b.code_bytes + r * 4;
      const int64_t c0 = blk * kBlock;
      // 4-bit: GGUF's byte j = column j in the low nibble, column 16 + j in the high one, and
      // word t = bytes 4t .. 4t + 3. 8-bit: word t = columns 4t .. 4t + 3 as stored.
      for (int t = 0; t < (w.bits == 4 ? 4 : 8); ++t)
        for (int e = 0; e < 4; ++e) {
          const int64_t c = c0 + 4 * t + e;
          dst[t * 64 + e] = static_cast<uint8_t>(
              w.bits == 4 ? code_at(src, 4, c) | code_at(src, 4, c + 16) << 4 : code_at(src, 8, c));
        }
    }
  });
  return out;
}

void deinterleave_affine_row(const InterleavedBlocks& b, int64_t j, uint32_t* packed, float* scales, float* biases) {
  if (!b.affine() || b.kind == InterleavedKind::Affine5)
    fail_as(ErrorKind::kInternal, "deinterleave_affine_row: not an mlx 4/8-bit copy");
  const int bits = b.kind == InterleavedKind::Affine4 ? 4 : 8, per_word = 32 / bits;
  const int64_t g = j / kRows, r = j % kRows;
  std::memset(packed, 0, static_cast<size_t>(b.k * bits / 32) * 4);
  for (int64_t blk = 0; blk < b.blocks; ++blk) {
    const uint8_t* src = b.codes(g) + blk * b.code_bytes + r * 4;
    for (int64_t i = 0; i < kBlock; ++i) {
      const int t = static_cast<int>(i / 4), e = static_cast<int>(i % 4);
      const uint32_t code = bits == 8 ? src[t * 64 + e] : t < 4 ? src[t * 64 + e] & 0x0f : src[(t - 4) * 64 + e] >> 4;
      const int64_t c = blk * kBlock + i;
      packed[c / per_word] |= code << (bits * (c % per_word));
    }
  }
  for (int64_t p = 0; p < (b.blocks >> b.param_shift); ++p) {
    scales[p] = b.params(g)[p * 32 + r];
    biases[p] = b.params(g)[p * 32 + kRows + r];
  }
}

}  // namespace graft::compute
