// Internal to the runtime layer: GGUF Q4_0 / Q4_1 / Q8_0 weights copied at load into groups of 16 rows
// interleaved word by word (llama.cpp's "repack" idea), for the AVX512-VNNI kernel that keeps one
// output row per vector lane: one vpdpbusd multiplies four columns of 16 weight rows by the same
// four activation bytes (broadcast from memory), so a block of 32 columns × 16 rows is 8 integer
// instructions plus one F32 step, with no horizontal sum at the end (the fused kernels of
// matmul_q8_fused512.cpp spend about four times as many instructions per weight).
//
// Numeric model (the "block model", different from the 16-lane model of the other q8 kernels): over
// the blocks b of 32 columns in ascending order, from acc = 0,
//   acc = fma(float(Σ_{c∈b} q_w[c]·q_x[c]), d_w[b]·d_x[b], acc)
// and for Q4_1 (w = d_w·q_w + m_w, q_w the unsigned nibble) then
//   acc = fma(m_w[b], d_x[b]·float(Σ_{c∈b} q_x[c]), acc).
// The integer block sums are exact; each product of two scales is rounded once; one F32 chain per
// output element, so the result does not depend on m,
// the thread count or which rows share a call (a prefill row equals its decode). Against F32 math
// on the dequantized weights the only approximation is the activation rounding (matmul_q8.h's bound).
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "graft/core/tensor.h"
#include "graft/runtime/thread_pool.h"
#include "runtime/matmul_q8.h"

namespace graft::runtime {

// The interleaved copy of one [n, k] Q4_0, Q4_1 or Q8_0 weight. Group g holds rows 16g .. 16g + 15 (rows
// past n are zero codes with scale 0). Per block b of 32 columns, a group stores its codes as
// 64-byte words, lane r of word t = four bytes of row r:
//   Q4_0, Q4_1: 4 words; word t = the block's bytes qs[4t .. 4t + 3] (low nibbles: columns
//         4t .. 4t + 3, high nibbles: columns 16 + 4t ..), nibbles unsigned (Q4_0's code is
//         nibble − 8);
//   Q8_0: 8 words; word t = columns 4t .. 4t + 3 as q_w + 128 (unsigned).
// then, after all blocks' codes, per block the 16 rows' f16 scales d (32 bytes), for Q4_1 followed
// by their f16 mins m (32 bytes).
struct InterleavedBlocks {
  DType source = DType::Q8_0;  // Q4_0, Q4_1 or Q8_0
  int64_t n = 0, k = 0;
  int64_t blocks = 0;       // k / 32
  int64_t code_bytes = 0;   // per block and group: 256 (Q4_0, Q4_1) or 512 (Q8_0)
  int64_t scale_bytes = 0;  // per block and group: 32, or 64 with Q4_1's mins
  int64_t group_bytes = 0;  // codes and scales of one group, a multiple of 64
  std::shared_ptr<uint8_t[]> storage;
  const uint8_t* base = nullptr;  // 64-byte aligned

  int64_t groups() const { return (n + 15) / 16; }
  const uint8_t* codes(int64_t g) const { return base + g * group_bytes; }
  // Block b's 16 scales at scales(g) + b·scale_bytes / 2; Q4_1's mins 16 further.
  const uint16_t* scales(int64_t g) const {
    return reinterpret_cast<const uint16_t*>(codes(g) + blocks * code_bytes);
  }
  int64_t nbytes() const { return groups() * group_bytes; }
};

// Whether matmul runs interleaved copies of `t` weights on this CPU (the AVX512-VNNI q8 kernel is
// chosen and GRAFT_Q8_INTERLEAVE is not 0).
bool interleave_enabled(DType t);
bool interleavable(DType t);  // Q4_0, Q4_1 or Q8_0

// The copy (rows split over the pool). w: [n, k] of an interleavable type.
std::shared_ptr<const InterleavedBlocks> interleave_blocks(const Tensor& w, ThreadPool* pool = nullptr);
// Row j of the copy as the original GGUF blocks (tests: the layout round-trips).
void deinterleave_row(const InterleavedBlocks& w, int64_t j, uint8_t* row);

namespace detail {

// Activation rows as the block model reads them: act.q (signed codes), act.d4 (d_x, eight times per
// block) and act.sum32 (Σ q_x per block), which quantize_activations fills; the SIMD kernels read
// the same values packed by act.pack_blocks8 (call it first).
//
// Output columns [j0, j1) of rows 0 .. act.m − 1: y[i·ldy + j] (= or +=). `avx512`: the VNNI kernel
// (the CPU must have it), else the scalar model; the two agree bit for bit.
void interleaved_cols(const InterleavedBlocks& w, const Q8Activations& act, float* y, int64_t ldy, bool accumulate,
                      int64_t j0, int64_t j1, bool avx512);

// One group against every activation row: out[i·16 + r] = y[i, 16g + r].
void interleaved_group_scalar(const InterleavedBlocks& w, const Q8Activations& act, int64_t g, float* out);
void interleaved_group_avx512(const InterleavedBlocks& w, const Q8Activations& act, int64_t g, float* out);

}  // namespace detail
}  // namespace graft::runtime
