// The forward pass of a Llama-family decoder over a batch of sequences. Each sequence brings its
// own KV cache and new tokens; all new tokens of all sequences go through every projection as one
// matrix (prefill and multi-sequence decode share the same code), attention is per sequence.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "graft/model/config.h"
#include "graft/model/weights.h"
#include "graft/runtime/kv_cache.h"
#include "graft/runtime/thread_pool.h"

namespace graft::runtime {

struct SequenceInput {
  KVCache* cache;                 // positions continue from cache->size()
  std::span<const int32_t> tokens;
  bool all_logits = false;        // logits for every new token, else only for the last one
};

// Which projection a linear layer is; the unit the adapter runtime will attach terms to.
enum class Projection { Q, K, V, O, Gate, Up, Down, LmHead };

class Transformer {
 public:
  Transformer(const model::ModelConfig& config, const model::ModelWeights& weights);

  // Runs the batch; returns logits rows [rows, vocab] in sequence order (per sequence: one row, or
  // one per token when all_logits). Advances each cache by its token count. Throws before
  // touching any cache if a token id is out of range or a context would overflow.
  std::vector<float> forward(ThreadPool& pool, std::span<const SequenceInput> batch);

  const model::ModelConfig& config() const { return config_; }

 private:
  // Every projection goes through here: y[m, out] = x[m, in] · Wᵀ (+ bias).
  void project(ThreadPool& pool, int64_t layer, Projection p, const float* x, int64_t m, float* y);
  void attention(ThreadPool& pool, int64_t layer, std::span<const SequenceInput> batch, const float* q,
                 float* out);

  const model::ModelConfig& config_;
  const model::ModelWeights& weights_;
  std::vector<float> inv_freq_;
};

}  // namespace graft::runtime
