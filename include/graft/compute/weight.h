// A weight matrix in any stored form (dense, GGUF blocks, mlx affine) and the one dispatch from it
// onto the kernels (compute/kernels.h: the numeric contract): how quantized weights meet the
// activations, preparing a matrix for this CPU's fastest kernel, and several matmuls of one x in
// one dispatch. The seam a second backend plugs into.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "graft/compute/kernels.h"
#include "graft/core/affine_quant.h"
#include "graft/core/tensor.h"
#include "graft/core/thread_pool.h"

namespace graft::compute {

struct InterleavedBlocks;  // compute/interleaved_blocks.h (private to compute/)

// The kernel path a weight takes once prepared: the one switch matmul, matmul_many and the kernel
// report read.
enum class WeightKind {
  Dense,              // F32/F16/BF16 widened to F32: the per-ISA dense kernel
  Bf16Dot,            // BF16 with BF16-rounded activations on vdpbf16ps
  Blocks,             // GGUF blocks as stored, 8-bit activations
  BlocksF32,          // GGUF blocks dequantized per tile, unrounded F32 activations
  InterleavedBlocks,  // GGUF blocks interleaved x16 for the integer kernel, 8-bit activations
  InterleavedAffine,  // mlx affine codes interleaved x16, 8-bit activations
  Affine,             // mlx affine codes on the F32 affine kernel
};
// Whether a kind's kernel rounds the activations (to 8-bit blocks, or to BF16).
bool rounds_activations(WeightKind k);
// The kernels that run these kinds on this CPU, as `graft generate` reports them
// (" dense avx512 gguf-blocks q8-activations avx512-vnni (... rows interleaved x16)").
std::string describe_kernels(std::span<const WeightKind> kinds);

// One weight matrix [rows, cols] in its stored form: dense (F32/F16/BF16) or GGUF blocks, or
// affine-quantized (then `dense` is empty); plus what preparing it for this CPU added: an
// interleaved copy for the integer kernels, and how its activations are rounded. A model's
// matrices are Weights (model::Matrix); matmul() dispatches on the form, once, here.
struct Weight {
  Tensor dense;           // F32/F16/BF16 or GGUF blocks [rows, cols]
  AffineQuantized quant;  // when quantized()
  int64_t rows = 0, cols = 0;
  // A copy of GGUF Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q6_K blocks or mlx affine codes laid out for one integer kernel, made after load by
  // prepare_weight on CPUs that run it; matmul then reads it instead of `dense` (which
  // stays: embedding rows, adapters and tools read the stored form).
  std::shared_ptr<const InterleavedBlocks> interleaved;
  // GGUF blocks multiplied with unrounded F32 activations (Activations::F32, set by
  // prepare_weight): each tile of rows dequantized, then the dense F32 kernel.
  bool f32_activations = false;
  // BF16 weights multiplied with BF16-rounded activations on vdpbf16ps (Activations::Q8 on CPUs
  // with AVX512-BF16, set by prepare_weight; compute/bf16_dot.h: the arithmetic and its error).
  bool bf16_activations = false;

  bool quantized() const { return quant.bits != 0; }
  WeightKind kind() const;
  int64_t nbytes() const { return quantized() ? quant.nbytes() : dense.nbytes(); }
  static Weight of(Tensor t);
  static Weight of(AffineQuantized q);
};

// The one entry point for a weight matrix, whatever its format (dense, GGUF blocks, mlx
// affine): dispatches by format, then by ISA.
void matmul(ThreadPool& pool, const float* x, int64_t m, const Weight& w, float* y, bool accumulate = false,
            const compute::ColumnEpilogue* epilogue = nullptr);

// For one activation row x and y = matmul(x, w) (plus whatever the caller added): y[j] moved, for
// each j in rows, by (the dequantized row j · x, unrounded, in double) − (what matmul computed for
// j), so those outputs are what unrounded activations give. Only where w's kernel rounds the
// activations to 8 bits (WeightKind Blocks, InterleavedBlocks, InterleavedAffine; a no-op for the
// others). On the calling thread (callers run rows in parallel). The runtime refines a head's
// largest logits with it (runtime/transformer.cpp).
void refine_rows(const Weight& w, const float* x, std::span<const int64_t> rows, float* y);

// Copies GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 / Q4_K / Q6_K matrices and its mlx affine 4/8-bit matrices into the
// layout of the CPU's fastest integer kernel (16 rows interleaved, for AVX512-VNNI, AVX-VNNI or AVX2;
// GRAFT_Q8_INTERLEAVE=0 keeps them as stored, the affine ones on matmul_affine's F32 kernel). The
// copies change the summation order of those matrices, and for affine matrices round the
// activations to 8 bits with a scale per 16 columns (compute/matmul_q8.h, interleaved_blocks.h: the block model); every other
// property holds (results independent of m and the thread count). Returns the bytes copied. Call
// before a Transformer is built on the weights.
//
// How quantized weights (GGUF blocks, mlx affine) meet the activations (`--activations` of generate
// and serve): Q8, the default, rounds each activation row to 8 bits with a scale per 16 columns and runs the
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
// One matrix; pool null: the copy made on the calling thread (the same bytes).
int64_t prepare_weight(Weight& w, ThreadPool* pool, Activations a = Activations::Q8);
// Whether prepare_weight interleaves GGUF `t` matrices on this CPU (the q8 kernel chosen is AVX2,
// AVX-VNNI or AVX512-VNNI, and GRAFT_Q8_INTERLEAVE is not 0).
bool interleave_enabled(DType t);
bool interleavable(DType t);  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K
// The same for mlx affine matrices (4 or 8 bits): the same conditions. GRAFT_Q8_INTERLEAVE=0
// keeps them on matmul_affine's F32 kernel (the reference path).
bool interleave_enabled_affine();

// Several matmuls on the same x (a layer's q/k/v, or gate/up) in one dispatch: each weight's
// per-call preparation done once (GGUF block weights share one activation quantization), then one
// parallel pass over all their output columns, each target's epilogue on its own columns. Every
// result equals matmul()'s for that target alone (kernels do not depend on the column cut).
// A target may bring its own input x [rows, w->cols] (a layer's experts, each on the rows that
// chose it, as one grouped call): each distinct input is prepared once, all run in the one pass,
// and a target of 0 rows is left out.
struct MatmulTarget {
  const Weight* w;
  float* y;
  const compute::ColumnEpilogue* epilogue = nullptr;
  const float* x = nullptr;  // null: matmul_many's x (and its m rows)
  int64_t m = -1;            // with x: its rows (-1: matmul_many's m)
  // What this target multiplies: its own rows where it has them, else the call's x and m.
  const float* input(const float* call_x) const { return x ? x : call_x; }
  int64_t rows(int64_t call_m) const { return x && m >= 0 ? m : call_m; }
};
// `first` targets (no epilogues) are all computed before any epilogue of `targets`, and then
// after_first runs once: a pass the targets' epilogues depend on (an adapter's x·Aᵀ before the
// up-projections) in the same dispatch and the same activation quantization, instead of a
// dispatch of its own; its 16-row units are shared out among whichever threads run.
void matmul_many(ThreadPool& pool, const float* x, int64_t m, std::span<const MatmulTarget> targets,
                 std::span<const MatmulTarget> first = {}, const std::function<void()>& after_first = {});

}  // namespace graft::compute
