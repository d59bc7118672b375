// A model's weights on this CPU's kernels: preparing all of them (compute/weight.h prepares one and
// dispatches every matmul), and what they run on, for the first stderr line and /props.
#pragma once
#include <cstdint>
#include <string>

#include "graft/compute/weight.h"

namespace graft::model {
struct ModelWeights;
}

namespace graft::runtime {

// Prepares every matrix of a model (not the embedding: it is read by rows, as stored) with
// compute::prepare_weight; returns the bytes copied. Call before a Transformer is built on them.
int64_t prepare_weights(model::ModelWeights& w, ThreadPool& pool, compute::Activations a = compute::Activations::Q8);

// "weights: Q4_K x84 Q6_K x13 | kernels: gguf-blocks q8-activations avx512vnni": the model's
// matrix formats (lm_head and the seven projections of each layer) and the kernels they run on.
std::string describe_kernels(const model::ModelWeights& w);
// What `requested` means on these prepared weights: "q8" where some matrix takes rounded activations
// (8-bit blocks, or BF16 for vdpbf16ps), "f32" where none does (`--dtype f32`, F16 files, BF16 on a
// CPU without AVX512-BF16): the first stderr line and /props report this, not the option as typed.
const char* activations_in_force(const model::ModelWeights& w, compute::Activations requested);

}  // namespace graft::runtime
