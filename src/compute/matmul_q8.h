// Internal to the compute layer (compute/weight.cpp dispatches through it): matmul on GGUF block weights with 8-bit activations and integer
// dot products. Each activation row is quantized once, to int8 with an F32 scale per 16 columns,
// d = max|x| / 127, q = round(x / d), except that in each block of 32 the smaller of the two scales is
// the larger one divided by a power of two, 2^e (e <= 11: the largest that keeps the group's
// max|x| / d within 127; matmul_q8.cpp's scales_of). llama.cpp's scheme is one scale per 32 columns. Where one
// large activation sets a block's scale, the other 16 columns keep (nearly) their own resolution:
// the mean KL divergence against unrounded activations is 0.60× that of a scale per 32 (exact scales
// per 16: 0.54×, at 7-12 % more prefill time; issue 36, docs/PERFORMANCE.md "Accuracy"). The power of two is what keeps the
// integer kernels at one F32 step per block: the block model (interleaved_blocks.h) shifts the
// larger half's integer sum left by e and scales the block once by the smaller scale, exactly; the
// 16-lane model multiplies each 4 columns' scale (d4) as before.
//
// y[i, j] = Σ_c a[c/16]·q_w[c]·d_x[c/16]·q_x[c] + Σ_g b[g]·d_x[g]·Σ_{c∈g} q_x[c]
// The integer products are exact; the F32 part is summed lane by lane in a fixed order that
// depends only on the kernel's lane count (8: scalar, AVX2, AVX-VNNI; 16: AVX512-VNNI and its
// scalar emulation), so every kernel equals its scalar model bit for bit, and results do not
// depend on m, the column split or the thread count. Against F32 math on the dequantized weights
// the only approximation is the activation rounding: |error| ≤ Σ_groups (d_x / 2)·Σ_{c∈group} |w_c|
// (plus F32 rounding).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "graft/core/tensor.h"
#include "graft/compute/kernels.h"
#include "compute/quant_formats.h"

namespace graft::compute::detail {

enum class Q8Kernel { Scalar, Scalar16, Avx2, AvxVnni, Avx512Vnni };

const char* q8_kernel_name(Q8Kernel k);
bool q8_kernel_supported(Q8Kernel k);
// The fastest supported kernel, or GRAFT_Q8_KERNEL=scalar|scalar16|avx2|avxvnni|avx512vnni when set
// (and supported).
Q8Kernel best_q8_kernel();

// m activation rows of k columns (k a multiple of 32) quantized to int8, a scale per 16 columns.
struct Q8Activations {
  int64_t m = 0, k = 0;
  std::vector<int8_t> q;     // [m, k]
  std::vector<float> d4;     // [m, k / 4]: the group's scale d_x, once per four columns
  std::vector<float> s16;    // [m, k / 16]: d_x · Σ q_x over each 16 columns (the min term's input)
  std::vector<int32_t> sum16;  // [m, k / 16]: Σ q_x over each 16 columns (the interleaved codes' offsets)
  std::vector<int32_t> e16;  // [m, k / 16]: each group's shift e (its d_x = the block scale · 2^e, the
                             // block scale being the smaller of its two groups' d_x)
  // The AVX-512 fused kernels' layout (pack_rows8): rows in groups of eight (the last group may
  // hold fewer, R), chunk-major inside a group, one 128-byte record per 64-column chunk and row at
  // x8_records()[(g·8·chunks + c·R + r)·128]: the 64 codes as unsigned bytes q_x + 128 (so that
  // vpdpbusd takes the weights signed), then the 16 lanes of d4. A half chunk's missing columns are
  // q_x = 0 with d4 = 0. Every pointer a kernel needs for eight rows is one base plus constants.
  std::vector<uint8_t> x8;
  // s16 in the same grouping, eight floats (two chunks) per record: [(g·8·pairs + p·R + r)·8],
  // zero past k / 16 (formats with a min).
  std::vector<float> s8;
  void pack_rows8(bool with_min, ThreadPool* pool = nullptr);
  // The interleaved kernel's layout (pack_blocks8; interleaved_blocks.h): rows in groups of eight
  // (the last may hold fewer, R), block-major inside a group: row i0 + r's codes of block b at
  // xb[(i0·nb + b·R + r)·32] (nb = k / 32, i0 a multiple of 8), the d_x, shift e and Σ q_x of its
  // two halves (columns 0..15, 16..31) at xd / xe / xo[2·(i0·nb + b·R + r) + half], so that a kernel
  // reaches eight rows' data at constant offsets from one pointer (xo holds −32·Σ q_x: the start of a
  // Q6_K sum, whose codes are q + 32, and by an exact shift that of the others); at [i0·nb + b·R + r] the block
  // scale xdb (the smaller d_x) and xm = s16 of the two halves added (the min step's factor, rounded as the
  // block model rounds it: one broadcast load a block).
  std::vector<int8_t> xb;
  std::vector<float> xd;
  std::vector<int32_t> xe;
  std::vector<int32_t> xo;
  std::vector<float> xdb;
  std::vector<float> xm;
  void pack_blocks8(ThreadPool* pool = nullptr);
  const uint8_t* x8_records() const;  // x8's data, 64-byte aligned
};
// Rows split over the pool when one is given (results do not depend on it).
void quantize_activations(const float* x, int64_t m, int64_t k, Q8Activations& out, ThreadPool* pool = nullptr);

// Σ_lanes a4·d4·(Σ of four q_w·q_x) for one weight row and one activation row (k a multiple of 32).
// signed_codes: q_w is −128..127 (else 0..127, which lets AVX2 use maddubs directly).
using Q8Dot = float (*)(const int8_t* wq, const float* wa4, const int8_t* xq, const float* xd4, int64_t k,
                        bool signed_codes);
Q8Dot q8_dot(Q8Kernel k);

// lora_up_add_q8 (kernels.h) on a given kernel's integer path (tests compare them; AvxVnni runs AVX2's).
void lora_up_add_q8_with(Q8Kernel kernel, const UpQ8& b, const int8_t* q_low, int32_t offset, float d_low, float s,
                         int64_t c0, int64_t c1, float* y);
float q8_dot_scalar8(const int8_t*, const float*, const int8_t*, const float*, int64_t, bool);
float q8_dot_scalar16(const int8_t*, const float*, const int8_t*, const float*, int64_t, bool);
float q8_dot_avx2(const int8_t*, const float*, const int8_t*, const float*, int64_t, bool);
float q8_dot_avxvnni(const int8_t*, const float*, const int8_t*, const float*, int64_t, bool);
float q8_dot_avx512vnni(const int8_t*, const float*, const int8_t*, const float*, int64_t, bool);

// Σ_g b16[g]·s16[g] in the fixed 8-lane order (shared by every kernel).
float q8_min_term(const float* b16, const float* s16, int64_t groups);

// Fused kernels (unpack in registers, up to q8_fused_max_rows activation rows per pass over a
// weight row): out[r] = the unpack path's value for activation row i0 + r, bit for bit, r < rows.
using Q8FusedRows = void (*)(const uint8_t* row, int64_t k, const Q8Activations& act, int64_t i0, int rows,
                             float* out);
// The fused kernel for a format under a kernel choice, or nullptr (then the unpack path runs).
// GRAFT_Q8_FUSED=0 turns them off (comparisons).
Q8FusedRows q8_fused(Q8Kernel k, DType t);
int q8_fused_max_rows(Q8Kernel k);         // 8 with AVX-512 (32 vector registers), else 4
Q8FusedRows q8_fused_avx2(DType t);         // 8 lanes: AVX2 and AVX-VNNI
Q8FusedRows q8_fused_avx2_16lane(DType t);  // AVX2 code, the 16-lane model (same bits as the next)
Q8FusedRows q8_fused_avx512vnni(DType t);   // 16 lanes
// One activation row (decode) against four consecutive weight rows (row0, row0 + row_bytes, ...):
// out[w] = the fused kernel's value for weight row w, bit for bit. AVX512-VNNI only.
using Q8FusedWeightRows = void (*)(const uint8_t* row0, int64_t row_bytes, int64_t k, const Q8Activations& act,
                                   int64_t i0, float* out);
Q8FusedWeightRows q8_fused4_avx512vnni(DType t);
// The four-weight-row kernel for a call with m activation rows, or nullptr (m > 1, no AVX-512
// fused kernel for t, or the 256-bit code chosen).
Q8FusedWeightRows q8_fused4_for_rows(Q8Kernel k, DType t, int64_t m);

// The AVX-512 fused kernels read the packed records: call act.pack_rows8 before them (matmul_blocks
// does when q8_fused_needs_pack says so), and call them with i0 a multiple of 8.
bool q8_fused_needs_pack(Q8Kernel k, DType t, int64_t m);
// The kernel for a call with this many activation rows: with AVX-512, the 512-bit kernel (or, for
// m <= GRAFT_Q8_AVX2_ROWS, default 0, the 256-bit code of the same 16-lane model: the bits are the
// same, so a row's result does not depend on how many rows share the call).
Q8FusedRows q8_fused_for_rows(Q8Kernel k, DType t, int64_t m);

// matmul_blocks in two steps, so that several block weights on the same x (q/k/v, gate/up) share
// one quantization and one dispatch (matmul_many): the activations quantized, and packed when a
// fused AVX-512 kernel of one of `types` will read them; then output columns [j0, j1) of w.
void prepare_blocks(ThreadPool* pool, Q8Kernel kernel, const float* x, int64_t m, int64_t k,
                    std::span<const DType> types, Q8Activations& act, bool allow_fused = true);
void blocks_cols(Q8Kernel kernel, const Q8Activations& act, const Tensor& w, float* y, bool accumulate, int64_t j0,
                 int64_t j1, bool allow_fused = true);

// matmul() for a GGUF block weight [n, k], with an explicit kernel (tests); matmul() passes
// best_q8_kernel(). allow_fused = false forces the unpack path (tests compare the two).
void matmul_blocks(ThreadPool& pool, Q8Kernel kernel, const float* x, int64_t m, int64_t k, const Tensor& w,
                   float* y, bool accumulate, const ColumnEpilogue* epilogue, bool allow_fused = true);

}  // namespace graft::compute::detail
