// Tensor-level compute kernels on the CPU (the compute layer, namespace graft::compute: no model
// types; runtime/kernels.h dispatches a model::Matrix of any format onto these).
//
// Activations are F32; dense weights (F32, F16 or BF16) are always
// accumulated in F32 (BF16/F16 weights widen exactly to F32; x is never rounded). (The one dense
// exception is opt-in and lives in compute/bf16_dot.h: BF16 weights against BF16-rounded x on
// vdpbf16ps, which compute::Activations::Q8 selects on AVX512-BF16 CPUs.) GGUF block
// weights (Q4_0 ... Q6_K, IQ4) are used as stored: each activation row is quantized once to 8 bits
// and multiplied with integer dot products (compute/matmul_q8.h: the error bound against F32 math). The widest ISA
// the CPU supports (AVX-512 F/BW/VL, else the AVX2/FMA/F16C baseline) is chosen at run time;
// GRAFT_MATMUL_ISA=avx2 forces the baseline. Every output element is summed in one fixed order,
// so results are bit-identical for any thread count and any m (a prefill row equals its decode).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "graft/core/affine_quant.h"
#include "graft/core/tensor.h"
#include "graft/core/thread_pool.h"

namespace graft::compute {

// Called by the worker that computed output columns [j0, j1) of every row, right after it did, so
// per-column follow-up work (bias, adapter terms) runs in the same parallel pass on hot data.
using ColumnEpilogue = std::function<void(int64_t j0, int64_t j1)>;

// y[m, n] = x[m, k] · W[n, k]ᵀ (+ y if accumulate). W is a row-major [n, k] tensor in F32/F16/BF16
// or a GGUF block format (rows of whole blocks).
// m = 1 is decode (matrix-vector, bandwidth-bound); m > 1 is prefill (matrix-matrix, blocked so
// each weight row is read once per block of activation rows).
void matmul(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
            bool accumulate = false, const ColumnEpilogue* epilogue = nullptr);

// The same product with x never rounded, whatever w's format: GGUF blocks are dequantized tile by
// tile (a few rows at a time, in L2) and run on the dense F32 kernels (compute::Activations::F32).
void matmul_f32_activations(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
                            bool accumulate = false, const ColumnEpilogue* epilogue = nullptr);

// Plain scalar reference of the same contract (tests compare the fast path against it).
void matmul_reference(const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
                      bool accumulate = false);

// Which kernel family matmul() dispatches to on this CPU: "avx512" or "avx2".
const char* matmul_isa();

// Which integer kernel GGUF block weights run on this CPU: "avx512vnni", "avxvnni", "avx2" (or
// GRAFT_Q8_KERNEL's choice).
const char* matmul_q8_kernel();

// y[m, n] = x[m, k] · Wᵀ (+ y) for an affine-quantized W [n, k] (4 or 8 bits), without ever
// dequantizing W: per weight row and group g, y += s_g·(Σ_{c∈g} q_c·x_c) + b_g·(Σ_{c∈g} x_c).
// This equals dequantize-then-matmul up to F32 rounding (the sums are regrouped). Every output
// element is summed in one fixed order, so results do not depend on m or the thread count.
void matmul_affine(ThreadPool& pool, const float* x, int64_t m, int64_t k, const AffineQuantized& w, float* y,
                   bool accumulate = false, const ColumnEpilogue* epilogue = nullptr);

// matmul_affine in two steps (matmul_many runs several weights on one x in one dispatch): x's
// group sums and slot-major copy, then output columns [j0, j1) of a weight with the same k, bits
// and group size.
struct AffinePrepared {
  int64_t m = 0, k = 0, group_size = 0;
  int bits = 0;
  std::vector<float> xsum, xp;
};
AffinePrepared prepare_affine(const float* x, int64_t m, int64_t k, const AffineQuantized& w);
void affine_cols(const AffinePrepared& p, const AffineQuantized& w, float* y, bool accumulate, int64_t j0, int64_t j1);

// The up-projection of an unfused adapter term on output columns [c0, c1):
//   y[c - c0] += s · Σ_k low[k] · bt[k, c]   (k ascending, one F32 sum per column, then scaled)
// bt = Bᵀ [r, cols] in F32 or BF16 (widened exactly), low = the row's down-projection [r].
void lora_up_add(const Tensor& bt, const float* low, float s, int64_t c0, int64_t c1, float* y);
// B [rows, r] in 8 bits for the integer up-projection (--lora-dtype q8_0): output row o keeps one
// scale d[o] = max_k |B[o, k]| / 127 and codes q[o, k] = round(B[o, k] / d[o]) (ties away from
// zero), stored as q + 128 (vpdpbusd's unsigned operand), 16 rows by 4 k at a time (64 bytes), k
// padded with zero codes to a multiple of 4 and rows to a multiple of 16. A row's error is at most
// d[o] / 2 per element. 20 bytes a row at rank 16 (an F32 Bᵀ: 64).
struct UpQ8 {
  int64_t rows = 0, r = 0, r4 = 0;
  std::vector<uint8_t> codes;  // q + 128, [rows16 / 16][r4 / 4][16][4]
  std::vector<float> scale;    // d, [rows16] (0 in the padding)
  int64_t bytes() const { return static_cast<int64_t>(codes.size() + 4 * scale.size()); }
  float at(int64_t o, int64_t k) const;  // d[o]·q[o, k]
};
UpQ8 quantize_up_q8(const float* b, int64_t rows, int64_t r);  // b = B [rows, r], row-major

// A row's down-projection low [r] rounded the same way, q = round(low / d_low) with d_low =
// max|low| / 127, to r4 codes (zero-padded); returns d_low and sets *offset = 128·Σ_k q[k], what the
// unsigned codes add to every row's sum.
float quantize_low_q8(const float* low, int64_t r, int64_t r4, int8_t* q, int32_t* offset);

// y[c - c0] += ((s·d_low)·d[c])·Σ_k q_low[k]·q[c, k] for c in [c0, c1): the sum is exact in int32,
// the scaling three F32 products in that order, so every ISA path gives the scalar loop's bits.
void lora_up_add_q8(const UpQ8& b, const int8_t* q_low, int32_t offset, float d_low, float s, int64_t c0, int64_t c1,
                    float* y);

}  // namespace graft::compute
