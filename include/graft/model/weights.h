// The weights of a Llama-family decoder, read through a TensorSource by the family's name table.
// Matrices stay in their stored form: F32/F16/BF16 (zero-copy views of the mapping) or mlx affine
// quantized codes (packed uint32 + F32 scales/biases); norms and biases are small and converted
// to F32 (norms with the config's norm_weight_offset added: Gemma's (1 + w)).
#pragma once
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "graft/compute/weight.h"
#include "graft/core/affine_quant.h"
#include "graft/core/tensor.h"
#include "graft/core/thread_pool.h"
#include "graft/io/tensor_source.h"
#include "graft/model/config.h"
#include "graft/model/family.h"

namespace graft::model {

// One weight matrix: compute's Weight (stored form, prepared copy, activation rounding).
using Matrix = compute::Weight;

// One expert of a mixture-of-experts layer: a SwiGLU MLP [moe_inter, hidden] x2, [hidden, moe_inter].
struct ExpertWeights {
  Matrix gate, up, down;
};

struct LayerWeights {
  Tensor attn_norm;            // F32 [hidden]
  Matrix q, k, v, o;           // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  Tensor q_bias, k_bias, v_bias;  // F32 [q_dim], [kv_dim] x2 when attention_bias, else empty
  Tensor q_norm, k_norm;       // F32 [head_dim] when qk_norm, else empty
  Tensor mlp_norm;             // F32 [hidden]
  Tensor attn_post_norm, mlp_post_norm;  // F32 [hidden] when sandwich_norms, else empty
  Matrix gate, up, down;       // [inter, hidden] x2, [hidden, inter]; empty (rows 0) in a sparse layer
  // A sparse (mixture-of-experts) layer: the router [num_experts, hidden] and the experts.
  Matrix router;
  std::vector<ExpertWeights> experts;

  // Every matrix the layer holds (the seven projections, or attention, router and experts).
  std::vector<const Matrix*> matrices() const;
  std::vector<Matrix*> matrices();
  // The bytes one token reads: all of attention and, in a sparse layer, the router and `active`
  // experts (num_experts_per_tok) of average size; a dense layer's MLP whole.
  int64_t bytes_per_token(int64_t active) const;
};

struct ModelWeights {
  Matrix embed;       // [vocab, hidden]
  Tensor final_norm;  // F32 [hidden]
  Matrix lm_head;     // [vocab, hidden]; the same view as embed when tied
  std::vector<LayerWeights> layers;

  // The matrix a role names (a layer's projection, a router, an expert's projection, the embedding
  // or the head); null where this model has none (a norm, a bias, a missing layer or expert).
  const Matrix* matrix(const TensorRole& r) const;
};

// progress(done, total) is called after each tensor is read.
using LoadProgress = std::function<void(int64_t, int64_t)>;

class QuantizedCheckpointSource;

// The bits a fused matrix of a quantized base is quantized to (LoadOptions::fuse_dense).
inline constexpr int kRequantizeBits = 8;

struct WeightLoadOptions {
  LoadProgress progress;
  // Convert every dense matrix to this dtype (F32/F16/BF16) at load; unset keeps each matrix as
  // stored (zero-copy). Quantized matrices stay quantized.
  std::optional<DType> weight_dtype;
  // The checkpoint's quantized modules: their packed codes are used as stored.
  const QuantizedCheckpointSource* quantized = nullptr;
  // Fused matrices (read merged through `source`) of a quantized base, quantized again at 8 bits
  // (kRequantizeBits; LoadOptions::fuse_dense says why): mlx affine ones with their own group size,
  // GGUF ones as Q8_0; or (dense) kept as read.
  std::set<std::string> requantize;
  DType requantize_scale_dtype = DType::BF16;  // dtype the requantized scales are rounded to
  std::set<std::string> requantize_blocks;
  std::set<std::string> dense;
  // Quantize every dense matrix whose width divides by the group size at load (mlx affine, the
  // same bits as graft quantize / mlx_lm.convert -q; scales in the weight's dtype after
  // weight_dtype).
  std::optional<QuantSpec> quantize;
  // Copy matrices out of the file mapping into the process's own memory (--no-mmap).
  bool copy_weights = false;
  ThreadPool* pool = nullptr;  // checks large tensors for NaN / inf in parallel (serial when null)
};

// Reads and validates every tensor the config calls for: presence, dtype, shape. All problems are
// collected and reported in one error; tensors the model would not use are refused, not skipped.
ModelWeights load_weights(const ModelConfig& config, const io::TensorSource& source,
                          const WeightLoadOptions& options = {});

}  // namespace graft::model
