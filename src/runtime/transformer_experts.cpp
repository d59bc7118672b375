// The mixture-of-experts MLP of a sparse layer (Transformer::experts_mlp): routing, each chosen
// expert once over the rows that chose it, and the adapter terms on the experts.
#include <algorithm>

#include "graft/compute/ops.h"
#include "graft/runtime/kernels.h"
#include "graft/runtime/transformer.h"

namespace graft::runtime {

// Routing as transformers' Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock: softmax over all
// experts in F32, the top num_experts_per_tok probabilities (ties to the lower index), divided by
// their sum when norm_topk_prob. Each expert used in the pass runs once on the rows that chose it
// (gathered), so a prefill batch reads each expert's weights once and a decode step reads only the
// chosen ones. Adapter terms on the router change the logits before the softmax. y = Σ weight_e · expert_e(x) accumulated from zero in ascending expert order (the
// order of transformers' index_add_ loop).
void Transformer::experts_mlp(ThreadPool& pool, int64_t layer, const float* xn, int64_t m, float* y,
                              const RowGroups& groups) {
  const model::ModelConfig& c = config_;
  const model::LayerWeights& L = weights_.layers[layer];
  const int64_t E = c.num_experts, K = c.num_experts_per_tok, H = c.hidden_size, F = c.moe_intermediate_size;
  // Each adapter's sequence scale by row of xn (0: the row does not use it).
  std::vector<std::vector<float>> scale_of(groups.size());
  for (size_t a = 0; a < groups.size(); ++a) {
    if (groups[a].rows.empty()) continue;
    scale_of[a].assign(static_cast<size_t>(m), 0.0f);
    for (size_t i = 0; i < groups[a].rows.size(); ++i) scale_of[a][static_cast<size_t>(groups[a].rows[i])] = groups[a].scales[i];
  }
  // The terms of every adapter on (expert, part) over the expert's n rows: x [n, in] -> y [n, out]
  // += s·(x·Aᵀ)·Bᵀ on the rows whose sequence uses the adapter (gathered, as project_many does).
  auto add_terms = [&](int64_t e, int part, const std::vector<int64_t>& rows, const float* x, int64_t in,
                       const model::Matrix& w, float* out_rows) {
    const int64_t out = w.rows;
    std::vector<float> sub, low;
    for (size_t a = 0; a < groups.size(); ++a) {
      if (scale_of[a].empty()) continue;
      const std::vector<LoraTerm>* terms = groups.adapter(a).expert_at(layer, e, part);
      if (!terms) continue;
      std::vector<int64_t> at;  // indices into `rows`
      std::vector<float> scales;
      for (size_t i = 0; i < rows.size(); ++i)
        if (const float sc = scale_of[a][static_cast<size_t>(rows[i])]; sc != 0.0f) at.push_back(static_cast<int64_t>(i)), scales.push_back(sc);
      if (at.empty()) continue;
      const int64_t k = static_cast<int64_t>(at.size());
      sub.resize(static_cast<size_t>(k * in));
      for (int64_t i = 0; i < k; ++i) std::copy(x + at[i] * in, x + (at[i] + 1) * in, &sub[i * in]);
      for (const LoraTerm& t : *terms) {
        const int64_t width = t.low_width();
        low.assign(static_cast<size_t>(k * width), 0.0f);
        lora_term_down(pool, t, sub.data(), k, in, w, low.data(), scales);
        for (int64_t i = 0; i < k; ++i) lora_term_up(t, &low[i * width], scales[i], 0, out, out_rows + at[i] * out);
      }
    }
  };
  std::vector<float> probs(static_cast<size_t>(m * E));
  matmul(pool, xn, m, L.router, probs.data());
  std::vector<int64_t> all_rows(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) all_rows[static_cast<size_t>(r)] = r;
  add_terms(-1, 3, all_rows, xn, H, L.router, probs.data());  // adapters on the router (mlx-lm's default keys)
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(E));
  std::vector<std::vector<float>> weight_of(static_cast<size_t>(E));
  std::vector<int64_t> order(static_cast<size_t>(E));
  for (int64_t r = 0; r < m; ++r) {
    float* p = &probs[static_cast<size_t>(r * E)];
    softmax(p, E);
    for (int64_t e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) sum += p[order[static_cast<size_t>(k)]];
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = order[static_cast<size_t>(k)];
      rows_of[static_cast<size_t>(e)].push_back(r);
      weight_of[static_cast<size_t>(e)].push_back(c.norm_topk_prob ? p[e] / sum : p[e]);
    }
  }
  std::fill(y, y + m * H, 0.0f);
  const GluFn glu_fn = glu();
  std::vector<float> xs, gate, up, down;
  for (int64_t e = 0; e < E; ++e) {
    const auto& rows = rows_of[static_cast<size_t>(e)];
    if (rows.empty()) continue;
    const int64_t n = static_cast<int64_t>(rows.size());
    const model::ExpertWeights& X = L.experts[static_cast<size_t>(e)];
    const float* in = xn;
    if (n != m) {  // gather the rows that chose this expert
      xs.resize(static_cast<size_t>(n * H));
      for (int64_t i = 0; i < n; ++i) std::copy(xn + rows[i] * H, xn + (rows[i] + 1) * H, &xs[i * H]);
      in = xs.data();
    }
    gate.resize(static_cast<size_t>(n * F));
    up.resize(static_cast<size_t>(n * F));
    down.resize(static_cast<size_t>(n * H));
    const MatmulTarget gu[] = {{&X.gate, gate.data()}, {&X.up, up.data()}};
    matmul_many(pool, in, n, gu);
    add_terms(e, 0, rows, in, H, X.gate, gate.data());
    add_terms(e, 1, rows, in, H, X.up, up.data());
    for (int64_t i = 0; i < n; ++i) glu_fn(&gate[i * F], &up[i * F], F, &gate[i * F]);
    matmul(pool, gate.data(), n, X.down, down.data());
    add_terms(e, 2, rows, gate.data(), F, X.down, down.data());
    const auto& w = weight_of[static_cast<size_t>(e)];
    for (int64_t i = 0; i < n; ++i) {
      float* out = y + rows[i] * H;
      for (int64_t j = 0; j < H; ++j) out[j] += down[i * H + j] * w[i];
    }
  }
}

}  // namespace graft::runtime
