// Compute kernels on the CPU. Activations are F32; dense weights (F32, F16 or BF16) are always
// accumulated in F32 (BF16/F16 weights widen exactly to F32; x is never rounded). GGUF block
// weights (Q4_0 ... Q6_K, IQ4) are used as stored: each activation row is quantized once to 8 bits
// and multiplied with integer dot products (runtime/matmul_q8.h: the error bound against F32 math). The widest ISA
// the CPU supports (AVX-512 F/BW/VL, else the AVX2/FMA/F16C baseline) is chosen at run time;
// GRAFT_MATMUL_ISA=avx2 forces the baseline. Every output element is summed in one fixed order,
// so results are bit-identical for any thread count and any m (a prefill row equals its decode).
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graft/core/affine_quant.h"
#include "graft/core/tensor.h"
#include "graft/runtime/thread_pool.h"

namespace graft::model {
struct Matrix;
struct ModelWeights;
}

namespace graft::runtime {

// Called by the worker that computed output columns [j0, j1) of every row, right after it did, so
// per-column follow-up work (bias, adapter terms) runs in the same parallel pass on hot data.
using ColumnEpilogue = std::function<void(int64_t j0, int64_t j1)>;

// y[m, n] = x[m, k] · W[n, k]ᵀ (+ y if accumulate). W is a row-major [n, k] tensor in F32/F16/BF16
// or a GGUF block format (rows of whole blocks).
// m = 1 is decode (matrix-vector, bandwidth-bound); m > 1 is prefill (matrix-matrix, blocked so
// each weight row is read once per block of activation rows).
void matmul(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
            bool accumulate = false, const ColumnEpilogue* epilogue = nullptr);

// The one entry point for a model's weight matrix, whatever its format (dense, GGUF blocks, mlx
// affine): dispatches by format, then by ISA.
void matmul(ThreadPool& pool, const float* x, int64_t m, const model::Matrix& w, float* y, bool accumulate = false,
            const ColumnEpilogue* epilogue = nullptr);

// Copies the model's GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q6_K matrices and its mlx affine 4/8-bit matrices into the
// layout of the CPU's fastest integer kernel (16 rows interleaved, for AVX512-VNNI, AVX-VNNI or AVX2;
// GRAFT_Q8_INTERLEAVE=0 keeps them as stored, the affine ones on matmul_affine's F32 kernel). The
// copies change the summation order of those matrices, and for affine matrices round the
// activations to 8 bits per block of 32 (runtime/interleaved_blocks.h: the block model); every other
// property holds (results independent of m and the thread count). Returns the bytes copied. Call
// before a Transformer is built on the weights.
//
// How quantized weights (GGUF blocks, mlx affine) meet the activations (`--activations` of generate
// and serve): Q8, the default, rounds each activation row to 8 bits per block of 32 and runs the
// integer kernels (interleaved copies where the CPU has them); F32 leaves the activations unrounded:
// GGUF blocks are dequantized tile by tile (a few rows at a time, in L2) and run on the dense F32
// kernel, so the logits equal those of the same file loaded with `--dtype f32` bit for bit (F32 math
// on the dequantized weights, transformers' numbers) without its 4-8x memory; mlx affine matrices
// stay on matmul_affine's F32 kernel (mlx-lm's numbers). Slower (prefill several times) and kept for
// checks against the reference frameworks.
enum class Activations { Q8, F32 };
Activations parse_activations(std::string_view name, std::string_view option = "--activations");  // "q8" | "f32"
const char* activations_name(Activations a);
int64_t prepare_weights(model::ModelWeights& w, ThreadPool& pool, Activations a = Activations::Q8);
int64_t prepare_matrix(model::Matrix& m, ThreadPool& pool, Activations a = Activations::Q8);  // one matrix of it

// Which integer kernel GGUF block weights run on this CPU: "avx512vnni", "avxvnni", "avx2" (or
// GRAFT_Q8_KERNEL's choice).
const char* matmul_q8_kernel();

// "weights: Q4_K x84 Q6_K x13 | kernels: gguf-blocks q8-activations avx512vnni": the model's
// matrix formats (lm_head and the seven projections of each layer) and the kernels they run on.
std::string describe_kernels(const model::ModelWeights& w);

// Plain scalar reference of the same contract (tests compare the fast path against it).
void matmul_reference(const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
                      bool accumulate = false);

// Which kernel family matmul() dispatches to on this CPU: "avx512" or "avx2".
const char* matmul_isa();

}  // namespace graft::runtime

namespace graft::runtime {

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

// Several matmuls on the same x (a layer's q/k/v, or gate/up) in one dispatch: each weight's
// per-call preparation done once (GGUF block weights share one activation quantization), then one
// parallel pass over all their output columns, each target's epilogue on its own columns. Every
// result equals matmul()'s for that target alone (kernels do not depend on the column cut).
struct MatmulTarget {
  const model::Matrix* w;
  float* y;
  const ColumnEpilogue* epilogue = nullptr;
};
// `first` targets (no epilogues) are all computed before any column of `targets`, and then
// after_first runs once: a pass the targets' epilogues depend on (an adapter's x·Aᵀ before the
// up-projections) in the same dispatch and the same activation quantization, instead of a
// dispatch of its own; its 16-row units are shared out among whichever threads run.
void matmul_many(ThreadPool& pool, const float* x, int64_t m, std::span<const MatmulTarget> targets,
                 std::span<const MatmulTarget> first = {}, const std::function<void()>& after_first = {});

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

}  // namespace graft::runtime
