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
#include "graft/runtime/lora.h"
#include "graft/core/thread_pool.h"

namespace graft::runtime {

struct SequenceInput {
  KVCache* cache;                 // positions continue from cache->size()
  std::span<const int32_t> tokens;
  bool all_logits = false;        // logits for every new token, else only for the last one
  // The unfused adapters this sequence runs with, each at its scale. Read at every forward pass, so a
  // scale changed between tokens applies to the next one. Scale 0 does no work for that adapter: the
  // output is bit-identical to the base model's.
  std::span<const ScaledAdapter> adapters;
  // False: no logits row at all (a prefill chunk that does not end the prompt skips the head).
  bool want_logits = true;
  // Set: hidden states instead of logits (embeddings). The final norm's output for every new token
  // (what the head would read), rows [tokens, hidden_size] appended to *hidden; this sequence gets
  // no logits row whatever want_logits/all_logits say, and the head does no work for it.
  std::vector<float>* hidden = nullptr;
};

class Transformer {
 public:
  Transformer(const model::ModelConfig& config, const model::ModelWeights& weights);

  // Runs the batch; returns logits rows [rows, vocab] in sequence order (per sequence: one row, or
  // one per token when all_logits, none when !want_logits or hidden). Advances each cache by its token
  // count. Throws before touching any cache if a token id is out of range, a context would overflow,
  // an adapter scale is not finite or an adapter was built for another model. Rows are grouped by
  // adapter: each adapter's terms run once over the rows of every sequence that uses it. One caller
  // at a time (the pass's buffers are the Transformer's, reused from pass to pass).
  std::vector<float> forward(ThreadPool& pool, std::span<const SequenceInput> batch);

  const model::ModelConfig& config() const { return config_; }

  // A sparse layer's experts run in batches whose rows' buffers (gathered x, gate, up, down: 4 ·
  // (2·hidden + 2·moe_intermediate) bytes a row) hold about this much, one core's L2
  // (runtime/transformer_experts.cpp says why).
  static constexpr int64_t kExpertBatchBytes = int64_t{3} << 19;  // 1.5 MiB
  static int64_t expert_batch_rows(const model::ModelConfig& c);

 private:
  // Per forward pass: for each adapter in use, the rows (of the token matrix, or of the head's rows)
  // that use it and their scales, so terms gather rows by adapter.
  struct AdapterRows {
    const LoraAdapter* adapter = nullptr;
    std::vector<int64_t> rows;
    std::vector<float> scales;
  };
  // The pass's adapters in (order, identity) order; an adapter none of the rows uses has no rows.
  struct RowGroups {
    std::vector<AdapterRows> by_adapter;
    size_t size() const { return by_adapter.size(); }
    const AdapterRows& operator[](size_t a) const { return by_adapter[a]; }
    const LoraAdapter& adapter(size_t a) const { return *by_adapter[a].adapter; }
  };
  // Groups the rows (row r belongs to sequence seq_of_row[r]) by the adapters their sequences use at
  // a non-zero scale; checks every scale and adapter first.
  RowGroups group_rows(std::span<const SequenceInput> batch, const std::vector<int64_t>& seq_of_row) const;
  // Every projection goes through here: y[m, out] = x[m, in] · Wᵀ (+ bias) + the adapter terms.
  // Projections of the same x (q/k/v, gate/up) go together: one dispatch for all of them.
  // `layer` -1 with Role::LmHead: the head.
  void project(ThreadPool& pool, int64_t layer, model::Role p, const float* x, int64_t m, float* y,
               const RowGroups& groups);
  void project_many(ThreadPool& pool, int64_t layer, std::span<const model::Role> ps, const float* x, int64_t m,
                    std::span<float* const> ys, const RowGroups& groups);
  // What every sparse layer of a pass reads of the rows, built once per pass: each adapter's
  // sequence scale by row of the token matrix (0: the row does not use it; empty: no row does),
  // and the list of all rows (the router's adapter terms run on every row).
  struct ExpertRows {
    std::vector<std::vector<float>> scale_of;
    std::vector<int64_t> all;
  };
  static ExpertRows expert_rows(const RowGroups& groups, int64_t m);
  // A sparse layer's MLP on the normed rows xn [m, hidden] into y [m, hidden]: the router's
  // softmax and top-k per row, then each chosen expert once over the rows that chose it, with the
  // adapter terms on that expert for those of its rows whose sequence uses the adapter.
  void experts_mlp(ThreadPool& pool, int64_t layer, const float* xn, int64_t m, float* y, const RowGroups& groups,
                   const ExpertRows& sparse_rows);
  // A batch of experts_mlp's chosen experts (ascending) in two dispatches, with the adapter terms on
  // them, added into y: rows_of / weight_of by expert (the rows that chose it and their routing
  // weights), scale_of as ExpertRows'.
  void experts_grouped(ThreadPool& pool, int64_t layer, const float* xn, int64_t m, float* y,
                       std::span<const int64_t> chosen, const std::vector<std::vector<int64_t>>& rows_of,
                       const std::vector<std::vector<float>>& weight_of, const RowGroups& groups,
                       const std::vector<std::vector<float>>& scale_of);
  // The gated activation of the MLPs, dense and expert: out = act(gate) ⊙ up (the config's hidden_act).
  using GluFn = void (*)(const float* gate, const float* up, int64_t n, float* out);
  GluFn glu() const;
  void embed_rows(std::span<const SequenceInput> batch, float* x, const RowGroups& groups);
  void attention(ThreadPool& pool, int64_t layer, std::span<const SequenceInput> batch, const float* q,
                 float* out);

  // The per-pass buffers, kept so a decode step allocates no activations: rows [T, width] of the
  // residual stream x, its normed copy, q/k/v, the attention output, a sublayer's output and the
  // MLP's gate/up; the sparse layers' rows by chosen expert [Σ rows that chose each, width]: the
  // gathered inputs, gate/up and down; each row's sequence and position.
  struct Workspace {
    std::vector<float> x, xn, q, k, v, att, tmp, gate, up;
    std::vector<float> expert_x, expert_gate, expert_up, expert_down;
    std::vector<int64_t> seq_of_row, pos_of_row;
  };
  // The rows of the pass (their number); throws what forward refuses, before anything changes.
  int64_t check_batch(std::span<const SequenceInput> batch) const;
  void norm_rows(ThreadPool& pool, const float* in, const Tensor& w, float* out, int64_t n) const;
  void add_residual(ThreadPool& pool, float* out, const Tensor& post_norm, int64_t T);
  void attention_block(ThreadPool& pool, int64_t l, std::span<const SequenceInput> batch, const RowGroups& groups);
  void mlp_block(ThreadPool& pool, int64_t l, const RowGroups& groups, const ExpertRows& sparse_rows);
  std::vector<float> head(ThreadPool& pool, std::span<const SequenceInput> batch);
  void refine_head(const float* hn, float* logits) const;

  const model::ModelConfig& config_;
  const model::ModelWeights& weights_;
  Workspace ws_;
  std::vector<float> inv_freq_;
  std::vector<float> inv_freq_local_;  // sliding layers' table (the same as inv_freq_ unless Gemma 3)
};

}  // namespace graft::runtime
