// Internal to the compute layer (compute/weight.cpp dispatches through it): GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q5_K / Q6_K weights, and mlx-lm affine 4-bit / 8-bit
// weights, copied at load into groups of 16 rows
// interleaved word by word (llama.cpp's "repack" idea), for the kernels that keep one output row per
// vector lane: one vpdpbusd multiplies four columns of 16 weight rows by the same four activation
// bytes (broadcast from memory), so a block of 32 columns × 16 rows is 8 integer instructions plus
// one F32 step, with no horizontal sum at the end (the fused kernels of matmul_q8_fused512.cpp spend
// about four times as many instructions per weight). AVX2 and AVX-VNNI (interleaved_256.inc) do the
// same on the two 256-bit halves of each word.
//
// Numeric model (the "block model", different from the 16-lane model of the other q8 kernels): over
// the blocks b of 32 columns in ascending order, from acc = 0, with S_h = Σ_{c∈h} q_w[c]·q_x[c] the
// integer sums of its halves h = 0 (columns 0..15) and 1 (16..31), whose activation scales are
// d_x[b]·2^e_h (matmul_q8.h: a scale per 16, the two a power of two apart; d_x[b] the smaller),
//   acc = fma(float(S_0·2^e_0 + S_1·2^e_1), d_w[b]·d_x[b], acc)   (the integer sum exact in int32)
// (Q6_K, a weight scale d·sc_h per half: acc = fma(float(S_h), (d·sc_h)·d_x[b, h], acc) for h = 0, 1,
// d_x[b, h] = d_x[b]·2^e_h)
// and for Q4_1 and the affine formats (w = d_w·q_w + m_w, q_w the unsigned code) then
//   acc = fma(m_w[b], s16[b, 0] + s16[b, 1], acc),  s16[b, h] = d_x[b, h]·float(Σ_{c∈h} q_x[c]).
// (GGUF Q4_K: d_w[b] = d·sc and m_w[b] = (−dmin)·m of the sub-block, formed from the copy's bytes, exact.)
// For an affine matrix (and a GGUF Q5_K one, copied as affine 5-bit: interleave_q5_k) d_w[b] and m_w[b] are the scale and bias of the mlx group (32, 64 or 128
// columns) that holds block b, kept in F32: mlx stores them as BF16 or F32, and BF16 → F16 would
// not be exact (range), BF16 → F32 is.
// The integer block sums are exact; each product of two scales is rounded once; one F32 chain per
// output element, so the result does not depend on m,
// the thread count or which rows share a call (a prefill row equals its decode). Against F32 math
// on the dequantized weights the only approximation is the activation rounding (matmul_q8.h's bound).
#pragma once
#include <cstdint>
#include <memory>
#include <span>

#include "graft/core/affine_quant.h"
#include "graft/core/tensor.h"
#include "graft/core/thread_pool.h"
#include "compute/matmul_q8.h"
#include "graft/compute/weight.h"

namespace graft::compute {

// Weight rows per interleaved group (one per 32-bit lane of a 512-bit vector) and columns per block.
inline constexpr int64_t kInterleavedRows = 16;
inline constexpr int64_t kInterleavedBlock = 32;

// What an interleaved copy was made from: a GGUF block type, or an mlx-lm affine matrix.
enum class InterleavedKind : uint8_t { Q4_0, Q4_1, Q8_0, Affine4, Affine8, Q5_0, Q5_1, Q6_K, Affine5, Q4_K };
const char* interleaved_kind_name(InterleavedKind k);

// The interleaved copy of one [n, k] weight. Group g holds rows 16g .. 16g + 15 (rows past n are
// zero codes with scale 0). Per block b of 32 columns, a group stores its codes as 64-byte words,
// lane r of word t = four bytes of row r:
//   Q4_0, Q4_1, Affine4, Q4_K: 4 words; word t = the block's GGUF bytes qs[4t .. 4t + 3] (low nibbles:
//         columns 4t .. 4t + 3, high nibbles: columns 16 + 4t ..), nibbles unsigned (Q4_0's code
//         is nibble − 8; mlx's LSB-first uint32 words are repacked into this order at copy time);
//   Q8_0: 8 words; word t = columns 4t .. 4t + 3 as q_w + 128 (unsigned);
//   Affine8: 8 words; word t = columns 4t .. 4t + 3, the unsigned codes as mlx stores them;
//   Q5_0, Q5_1, Affine5 (GGUF Q5_K's copy): the 5-bit code (Q5_0's is q_w + 16) as 4 nibble words, the GGUF qs bytes as for Q4,
//         then one word of fifth bits: lane r's byte e, bit t = the qh bit of column 4t + e, so that
//         word t's fifth bits are one shift and one mask away (5 bits a weight as stored, not 8).
//   Q6_K: the 6-bit code q (w = d·sc·(q − 32)) as 4 nibble words (low 4 bits, as Q4's), then two
//         words of high bits: word 4 + p, lane r's byte e, bits 2t, 2t + 1 = the high bits of column
//         16p + 4t + e (p = 0: columns 0..15, p = 1: 16..31), so that word t's are one shift and one
//         mask away (384 bytes: 6 bits a weight).
//   Q4_K: the nibbles q of the GGUF sub-block (w = (d·sc)·q − dmin·m), as Q4's 4 words.
// then, after all blocks' codes,
//   GGUF: per block the 16 rows' f16 scales d (32 bytes), for Q4_1 and Q5_1 followed by their f16 mins m
//         (32 bytes);
//   Q6_K: per super-block of 8 blocks (320 bytes), per block the 16 rows' int8 scales sc of columns
//         0..15 then of 16..31 (32 bytes), then the 16 rows' d as F32 (64 bytes): a half's scale is
//         d·sc, exact in F32 (11 × 8 significant bits), formed in the kernel (6.6 bits a weight in all);
//   Q4_K: per super-block of 8 blocks (320 bytes), per block the 16 rows' 6-bit scales sc then
//         their 6-bit mins m as bytes (32 bytes), then the 16 rows' f16 d (32 bytes) and f16 −dmin
//         (32 bytes), as the file stores them (4.625 bits a weight; the file: 4.5). The kernels form
//         d·sc and (−dmin)·m in F32, exact (11 × 6 significant bits), the very values an affine copy
//         with F32 parameters per block would hold (the block model's Q4_1 steps), at 40 bytes of
//         parameters per block instead of 128: decode streams every byte once, so the bytes set its speed;
//   affine: per mlx group of columns (2^param_shift blocks) the 16 rows' F32 scales then their F32
//         biases (128 bytes: stored once per group, not per block, so that a decode step streams
//         4 + 64/group_size bits per weight at 4-bit).
struct InterleavedBlocks {
  InterleavedKind kind = InterleavedKind::Q8_0;
  int64_t n = 0, k = 0;
  int64_t blocks = 0;       // k / 32
  int64_t code_bytes = 0;   // per block and group: 256 (4-bit), 320 (5-bit), 384 (6-bit) or 512 (8-bit)
  int64_t scale_bytes = 0;  // per block and group: 32, or 64 with Q4_1's mins; Q6_K, Q4_K: 40; affine: 128 >> param_shift
  int param_shift = 0;      // affine: log2(blocks per mlx group); 0 for GGUF
  int64_t group_bytes = 0;  // codes and scales of one group, a multiple of 64
  std::shared_ptr<uint8_t[]> storage;
  const uint8_t* base = nullptr;  // 64-byte aligned

  int64_t groups() const { return (n + kInterleavedRows - 1) / kInterleavedRows; }
  bool affine() const {
    return kind == InterleavedKind::Affine4 || kind == InterleavedKind::Affine8 || kind == InterleavedKind::Affine5;
  }
  const uint8_t* codes(int64_t g) const { return base + g * group_bytes; }
  // GGUF: block b's 16 scales at scales(g) + b·scale_bytes / 2; Q4_1's mins 16 further.
  const uint16_t* scales(int64_t g) const {
    return reinterpret_cast<const uint16_t*>(codes(g) + blocks * code_bytes);
  }
  // Affine: block b's 16 scales at params(g) + (b >> param_shift)·32, its 16 biases 16 further.
  const float* params(int64_t g) const { return reinterpret_cast<const float*>(codes(g) + blocks * code_bytes); }
  // Q6_K: block b's 32 int8 scales (16 rows of columns 0..15, then of 16..31) and its super-block's 16 d.
  const int8_t* q6k_scales(int64_t g, int64_t b) const {
    return reinterpret_cast<const int8_t*>(codes(g) + blocks * code_bytes + (b / 8) * 320 + (b % 8) * 32);
  }
  const float* q6k_d(int64_t g, int64_t b) const {
    return reinterpret_cast<const float*>(codes(g) + blocks * code_bytes + (b / 8) * 320 + 256);
  }
  // Q4_K: block b's 16 scales sc then 16 mins m (bytes), and its super-block's 16 f16 d then 16 f16 −dmin.
  const uint8_t* q4k_scales(int64_t g, int64_t b) const {
    return codes(g) + blocks * code_bytes + (b / 8) * 320 + (b % 8) * 32;
  }
  const uint16_t* q4k_d(int64_t g, int64_t b) const {
    return reinterpret_cast<const uint16_t*>(codes(g) + blocks * code_bytes + (b / 8) * 320 + 256);
  }
  int64_t nbytes() const { return groups() * group_bytes; }
};

// (interleave_enabled, interleavable, interleave_enabled_affine: graft/compute/weight.h.)

// The copy (rows split over the pool). w: [n, k] of an interleavable type; Q4_K goes to interleave_q4_k.
std::shared_ptr<const InterleavedBlocks> interleave_blocks(const Tensor& w, ThreadPool* pool = nullptr);
// The copy of a Q4_K matrix (interleaved_kquants.cpp; k a multiple of 256): kind Q4_K, the nibbles,
// 6-bit scales and mins and f16 d, −dmin as stored, so that d·sc and −dmin·m (both exact in F32)
// dequantize to the GGUF Q4_K values bit for bit (read back by deinterleave_q4_k_row).
std::shared_ptr<const InterleavedBlocks> interleave_q4_k(const Tensor& w, ThreadPool* pool = nullptr);
void deinterleave_q4_k_row(const InterleavedBlocks& w, int64_t j, uint8_t* row);
// The copy of a Q5_K matrix (interleaved_kquants.cpp; k a multiple of 256): as Q4_K's, an affine copy
// (kind Affine5: Q5_1's code words, F32 scale d·sc and bias −(dmin·m) per 32 columns, exact).
std::shared_ptr<const InterleavedBlocks> interleave_q5_k(const Tensor& w, ThreadPool* pool = nullptr);
// The copy of a Q6_K matrix (interleaved_kquants.cpp; k a multiple of 256): kind Q6_K, codes and
// scales as stored (no rounding), read back by deinterleave_q6_k_row.
std::shared_ptr<const InterleavedBlocks> interleave_q6_k(const Tensor& w, ThreadPool* pool = nullptr);
void deinterleave_q6_k_row(const InterleavedBlocks& w, int64_t j, uint8_t* row);
// Row j of the copy as the original GGUF blocks (tests: the layout round-trips). Not for Q5_K's (affine) copy.
void deinterleave_row(const InterleavedBlocks& w, int64_t j, uint8_t* row);
// The copy of an mlx affine matrix (interleaved_affine.cpp), and row j of it read back as mlx
// stores it: cols·bits/32 packed uint32 words, cols/group_size scales and biases (F32).
std::shared_ptr<const InterleavedBlocks> interleave_affine(const AffineQuantized& w, ThreadPool* pool = nullptr);
void deinterleave_affine_row(const InterleavedBlocks& w, int64_t j, uint32_t* packed, float* scales, float* biases);

namespace detail {
// An empty copy of `kind` for [n, k] with its sizes set and zeroed, 64-byte aligned storage.
std::shared_ptr<InterleavedBlocks> allocate_interleaved(InterleavedKind kind, int64_t n, int64_t k, int param_shift);
// Calls group(g) for every group of 16 rows of a copy being made, split over the pool.
template <class Group>
void fill_groups(const InterleavedBlocks& b, ThreadPool* pool, Group&& group) {
  auto groups = [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) group(g);
  };
  if (pool && b.groups() > 1)
    pool->parallel_for(b.groups(), groups);
  else
    groups(0, b.groups());
}
// Calls row(g, r) for every weight row 16g + r < n of a copy being made, the groups split over the
// pool (the mapping starts zeroed: rows past n keep zero codes, scales and biases).
template <class Row>
void fill_rows(const InterleavedBlocks& b, ThreadPool* pool, Row&& row) {
  fill_groups(b, pool, [&](int64_t g) {
    for (int64_t r = 0; r < kInterleavedRows && g * kInterleavedRows + r < b.n; ++r) row(g, r);
  });
}
}  // namespace detail

namespace detail {

// Activation rows as the block model reads them: act.q (signed codes), act.d4 (d_x, four times per
// 16 columns), act.e16, act.sum16 and act.s16 (shift, Σ q_x and d_x·Σ q_x per 16 columns), which
// quantize_activations fills (the block scale is the smaller d_x of its halves); the AVX512-VNNI kernel
// reads the same values packed by act.pack_blocks8 (call it first), the others read them as they are.
//
// Output columns [j0, j1) of rows 0 .. act.m − 1: y[i·ldy + j] (= or +=), by the group kernel of
// the q8 kernel `kernel` (the CPU must have it): Avx512Vnni, AvxVnni or Avx2 (the scalar kernels: the
// scalar model). All agree bit for bit.
void interleaved_cols(const InterleavedBlocks& w, const Q8Activations& act, float* y, int64_t ldy, bool accumulate,
                      int64_t j0, int64_t j1, Q8Kernel kernel);
// Whether `kernel`'s group kernel reads the packed activations, and the packing when it does: call
// after quantize_activations, before interleaved_cols.
bool interleaved_reads_packed(Q8Kernel kernel);
void prepare_interleaved(Q8Activations& act, Q8Kernel kernel, ThreadPool* pool);  // pool null: this thread

// One group against every activation row: out[i·16 + r] = y[i, 16g + r].
void interleaved_group_scalar(const InterleavedBlocks& w, const Q8Activations& act, int64_t g, float* out);
void interleaved_group_avx512(const InterleavedBlocks& w, const Q8Activations& act, int64_t g, float* out);
void interleaved_group_avxvnni(const InterleavedBlocks& w, const Q8Activations& act, int64_t g, float* out);
void interleaved_group_avx2(const InterleavedBlocks& w, const Q8Activations& act, int64_t g, float* out);

// Shared by the SIMD group kernels. Per format: bytes of codes per block and group, of scales (GGUF:
// per block; affine: per mlx group, the F32 scale and bias record), the codes' offset (Q4_0's
// nibbles are code + 8, Q8_0's bytes code + 128; the others store the unsigned code itself),
// whether a min (bias) follows.
template <InterleavedKind K>
struct InterleavedFmt {
  static constexpr bool kAffine = K == InterleavedKind::Affine4 || K == InterleavedKind::Affine8 || K == InterleavedKind::Affine5;
  // GGUF Q4_K: nibble words, and per block 6-bit scales and mins with the super-block's f16 d, −dmin.
  static constexpr bool kQ4K = K == InterleavedKind::Q4_K;
  static constexpr bool kNibbles = K == InterleavedKind::Q4_0 || K == InterleavedKind::Q4_1 || K == InterleavedKind::Affine4 || kQ4K;
  // Nibble words plus a word of fifth bits; multiplied as 8-bit codes (0..31).
  static constexpr bool kFive = K == InterleavedKind::Q5_0 || K == InterleavedKind::Q5_1 || K == InterleavedKind::Affine5;
  // Q6_K: nibble words plus two words of high bit pairs, 8-bit codes 0..63; and a weight scale per
  // 16 columns (every block is two integer sums, words 0..3 and 4..7, for the activations' scales).
  static constexpr bool kSix = K == InterleavedKind::Q6_K;
  static constexpr bool kMin = K == InterleavedKind::Q4_1 || K == InterleavedKind::Q5_1 || kAffine || kQ4K;
  static constexpr int kCodeBytes = kNibbles ? 256 : kFive ? 320 : kSix ? 384 : 512;
  static constexpr int kScaleBytes = kAffine ? 128 : (K == InterleavedKind::Q4_1 || K == InterleavedKind::Q5_1) ? 64 : (kSix || kQ4K) ? 40 : 32;
  static constexpr int32_t kOffset = K == InterleavedKind::Q4_0   ? 8
                                     : K == InterleavedKind::Q8_0 ? 128
                                     : K == InterleavedKind::Q5_0 ? 16
                                     : kSix                       ? 32
                                                                  : 0;
};

// Calls f.template operator()<K>() with the copy's kind as a constant.
template <class F>
decltype(auto) with_kind(InterleavedKind k, F&& f) {
  switch (k) {
    case InterleavedKind::Q4_0: return f.template operator()<InterleavedKind::Q4_0>();
    case InterleavedKind::Q4_1: return f.template operator()<InterleavedKind::Q4_1>();
    case InterleavedKind::Affine4: return f.template operator()<InterleavedKind::Affine4>();
    case InterleavedKind::Affine8: return f.template operator()<InterleavedKind::Affine8>();
    case InterleavedKind::Q5_0: return f.template operator()<InterleavedKind::Q5_0>();
    case InterleavedKind::Q5_1: return f.template operator()<InterleavedKind::Q5_1>();
    case InterleavedKind::Q6_K: return f.template operator()<InterleavedKind::Q6_K>();
    case InterleavedKind::Affine5: return f.template operator()<InterleavedKind::Affine5>();
    case InterleavedKind::Q4_K: return f.template operator()<InterleavedKind::Q4_K>();
    default: return f.template operator()<InterleavedKind::Q8_0>();
  }
}

// Decode streams each weight byte once from L3 or memory, and the hardware prefetcher stops at 4 KiB
// page boundaries: each block asks for the group's bytes this far on (GRAFT_Q8_PREFETCH, default
// 2048; a cursor advancing code_bytes + scale_bytes per block covers the codes, the scales and the
// next group; prefetches past the end never fault).
int64_t interleaved_prefetch_ahead();

// Runs tile.template operator()<R>(i) over rows [i, m) in tiles of R = kMax rows, then the rest in
// one smaller tile (a kernel keeps R activation rows against one load of the weights).
template <int kMax, class Tile>
void for_row_tiles(int64_t i, int64_t m, Tile&& tile) {
  for (; i + kMax <= m; i += kMax) tile.template operator()<kMax>(i);
  if constexpr (kMax > 1) for_row_tiles<kMax - 1>(i, m, tile);
}

}  // namespace detail
}  // namespace graft::compute
