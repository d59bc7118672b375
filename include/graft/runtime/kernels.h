// Model-level kernel dispatch: a model::Matrix of any format (dense, GGUF blocks, mlx affine)
// onto the compute layer's kernels (compute/kernels.h: the numeric contract), how quantized weights
// meet the activations, and several projections of one x in one dispatch.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "graft/compute/kernels.h"

namespace graft::model {
struct Matrix;
struct ModelWeights;
}

namespace graft::runtime {

// The one entry point for a model's weight matrix, whatever its format (dense, GGUF blocks, mlx
// affine): dispatches by format, then by ISA.
void matmul(ThreadPool& pool, const float* x, int64_t m, const model::Matrix& w, float* y, bool accumulate = false,
            const compute::ColumnEpilogue* epilogue = nullptr);

// Copies the model's GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q6_K matrices and its mlx affine 4/8-bit matrices into the
// layout of the CPU's fastest integer kernel (16 rows interleaved, for AVX512-VNNI, AVX-VNNI or AVX2;
// GRAFT_Q8_INTERLEAVE=0 keeps them as stored, the affine ones on matmul_affine's F32 kernel). The
// copies change the summation order of those matrices, and for affine matrices round the
// activations to 8 bits per block of 32 (compute/interleaved_blocks.h: the block model); every other
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
// checks against the reference frameworks. Dense BF16 matrices: Q8 on CPUs with AVX512-BF16 rounds
// the activations to BF16 and runs vdpbf16ps (compute/bf16_dot.h; Matrix::bf16_activations), for
// every m, so prefill rows still equal their decode; F32 (and AVX2-only CPUs) keep the exact
// widening F32 kernel.
enum class Activations { Q8, F32 };
Activations parse_activations(std::string_view name, std::string_view option = "--activations");  // "q8" | "f32"
const char* activations_name(Activations a);
int64_t prepare_weights(model::ModelWeights& w, ThreadPool& pool, Activations a = Activations::Q8);
int64_t prepare_matrix(model::Matrix& m, ThreadPool& pool, Activations a = Activations::Q8);  // one matrix of it

// "weights: Q4_K x84 Q6_K x13 | kernels: gguf-blocks q8-activations avx512vnni": the model's
// matrix formats (lm_head and the seven projections of each layer) and the kernels they run on.
std::string describe_kernels(const model::ModelWeights& w);
// What `requested` means on these prepared weights: "q8" where some matrix takes rounded activations
// (8-bit blocks, or BF16 for vdpbf16ps), "f32" where none does (`--dtype f32`, F16 files, BF16 on a
// CPU without AVX512-BF16): the first stderr line and /props report this, not the option as typed.
const char* activations_in_force(const model::ModelWeights& w, Activations requested);

// Several matmuls on the same x (a layer's q/k/v, or gate/up) in one dispatch: each weight's
// per-call preparation done once (GGUF block weights share one activation quantization), then one
// parallel pass over all their output columns, each target's epilogue on its own columns. Every
// result equals matmul()'s for that target alone (kernels do not depend on the column cut).
struct MatmulTarget {
  const model::Matrix* w;
  float* y;
  const compute::ColumnEpilogue* epilogue = nullptr;
};
// `first` targets (no epilogues) are all computed before any epilogue of `targets`, and then
// after_first runs once: a pass the targets' epilogues depend on (an adapter's x·Aᵀ before the
// up-projections) in the same dispatch and the same activation quantization, instead of a
// dispatch of its own; its 16-row units are shared out among whichever threads run.
void matmul_many(ThreadPool& pool, const float* x, int64_t m, std::span<const MatmulTarget> targets,
                 std::span<const MatmulTarget> first = {}, const std::function<void()>& after_first = {});

}  // namespace graft::runtime
