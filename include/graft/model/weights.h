// The weights of a Llama-family decoder, read through a TensorSource by the family's name table.
// Matrices stay in their stored dtype (F32/F16/BF16, zero-copy views of the mapping); norms and
// biases are small and converted to F32.
#pragma once
#include <functional>
#include <optional>
#include <vector>

#include "graft/core/tensor.h"
#include "graft/io/tensor_source.h"
#include "graft/model/config.h"

namespace graft::model {

struct LayerWeights {
  Tensor attn_norm;            // F32 [hidden]
  Tensor q, k, v, o;           // [q_dim, hidden], [kv_dim, hidden] x2, [hidden, q_dim]
  Tensor q_bias, k_bias, v_bias;  // F32 [q_dim], [kv_dim] x2 when attention_bias, else empty
  Tensor q_norm, k_norm;       // F32 [head_dim] when qk_norm, else empty
  Tensor mlp_norm;             // F32 [hidden]
  Tensor gate, up, down;       // [inter, hidden] x2, [hidden, inter]
};

struct ModelWeights {
  Tensor embed;       // [vocab, hidden]
  Tensor final_norm;  // F32 [hidden]
  Tensor lm_head;     // [vocab, hidden]; the same view as embed when tied
  std::vector<LayerWeights> layers;
};

// progress(done, total) is called after each tensor is read.
using LoadProgress = std::function<void(int64_t, int64_t)>;

// Reads and validates every tensor the config calls for: presence, dtype, shape. All problems are
// collected and reported in one error; tensors the model would not use are refused, not skipped.
// weight_dtype: convert every matrix to this dtype (F32/F16/BF16) at load; unset keeps each
// matrix as stored (zero-copy).
ModelWeights load_weights(const ModelConfig& config, const io::TensorSource& source,
                          const LoadProgress& progress = nullptr, std::optional<DType> weight_dtype = std::nullopt);

}  // namespace graft::model
