// The mixture-of-experts MLP of a sparse layer (Transformer::experts_mlp): routing, each chosen
// expert once over the rows that chose it, and the adapter terms on the experts.
#include <algorithm>
#include <span>

#include "graft/compute/ops.h"
#include "graft/runtime/kernels.h"
#include "graft/runtime/transformer.h"
#include "runtime/adapted_matmul.h"

namespace graft::runtime {

namespace {

// Projections of experts that share one input x [n, in] (the rows of xn they stand for).
struct ExpertProjection {
  int64_t expert;
  model::Role role;  // Gate, Up or Down
  const model::Matrix* w;
  float* y;  // [n, w->rows]
};

// Runs `ps` on x as one matmul_adapted with the adapters' terms inside it, as project_many does:
// the down passes x·Aᵀ as its first targets, the up-projections in each projection's column
// epilogue. The same arithmetic as matmul_many and then add_terms, term by term in the same order,
// so the same bits. Only when every adapter with terms on `ps` is used by all n rows or by none,
// and no term is LoKr; otherwise returns false before anything has run. (Groups: Transformer's
// RowGroups, private to it.)
template <class Groups>
bool run_inline(ThreadPool& pool, const Groups& groups, const std::vector<std::vector<float>>& scale_of,
                int64_t layer, const float* x, int64_t n, const std::vector<int64_t>& rows,
                std::span<const ExpertProjection> ps) {
  struct On {
    const LoraTerm* term;
    size_t adapter;
    std::vector<float> low;  // [n, low_width()]
  };
  std::vector<std::vector<On>> on(ps.size());
  std::vector<std::vector<float>> scales(groups.size());  // each used adapter's scale by row
  for (size_t a = 0; a < groups.size(); ++a) {
    if (scale_of[a].empty()) continue;
    int64_t used = 0;
    for (int64_t r : rows) used += scale_of[a][static_cast<size_t>(r)] != 0.0f;
    if (used == 0) continue;
    for (size_t i = 0; i < ps.size(); ++i)
      if (const std::vector<LoraTerm>* terms = groups.adapter(a).at({ps[i].role, layer, ps[i].expert}))
        for (const LoraTerm& t : *terms) {
          if (t.kron || used != n) return false;
          on[i].push_back({&t, a, std::vector<float>(static_cast<size_t>(n * t.low_width()), 0.0f)});
        }
    for (int64_t r : rows) scales[a].push_back(scale_of[a][static_cast<size_t>(r)]);
  }
  std::vector<RowDowns> by_adapter(groups.size());
  for (size_t a = 0; a < groups.size(); ++a) by_adapter[a].scales = &scales[a];
  std::vector<AdaptedTarget> targets;
  for (size_t i = 0; i < ps.size(); ++i) {
    targets.push_back({ps[i].w, ps[i].y, nullptr, {}});
    for (On& o : on[i]) {
      by_adapter[o.adapter].terms.push_back({o.term, ps[i].w, o.low.data()});
      targets.back().ups.push_back({o.term, o.low.data(), n, scales[o.adapter].data()});
    }
  }
  std::vector<RowDowns> downs;  // one per adapter with terms here, in adapter order
  for (RowDowns& d : by_adapter)
    if (!d.terms.empty()) downs.push_back(std::move(d));
  matmul_adapted(pool, x, n, targets, downs);
  return true;
}

// The terms of every adapter on a tensor of a sparse layer (an expert's projection, the router)
// over its n rows: x [n, in] -> y [n, out] += s·(x·Aᵀ)·Bᵀ on the rows whose sequence uses the
// adapter (gathered, as project_many does).
template <class Groups>
void add_terms(ThreadPool& pool, const Groups& groups, const std::vector<std::vector<float>>& scale_of,
               const model::TensorRole& role, const std::vector<int64_t>& rows, const float* x, int64_t in,
               const model::Matrix& w, float* out_rows) {
  const int64_t out = w.rows;
  std::vector<float> sub, low;
  for (size_t a = 0; a < groups.size(); ++a) {
    if (scale_of[a].empty()) continue;
    const std::vector<LoraTerm>* terms = groups.adapter(a).at(role);
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
}

// A decode row's chosen experts after their gates and ups: each one's activation, then all their
// downs in one matmul_many, each on its own expert's activation (one dispatch and a thread split
// over 8 · hidden columns, not 8 dispatches of hidden each), then y = Σ weight_e · down_e in
// ascending expert order. The same bits as expert by expert (no kernel depends on the column cut);
// for a row whose adapters have no terms on these downs.
template <class Glu>
void decode_downs(ThreadPool& pool, const model::LayerWeights& L, std::span<const int64_t> chosen,
                  std::span<const float> weights, float* gate, const float* up, int64_t F, int64_t H, Glu glu_fn,
                  float* y) {
  std::vector<float> down(chosen.size() * static_cast<size_t>(H));
  std::vector<compute::MatmulTarget> mm;
  for (size_t c = 0; c < chosen.size(); ++c) {
    float* g = gate + c * F;
    glu_fn(g, up + c * F, F, g);
    mm.push_back({&L.experts[static_cast<size_t>(chosen[c])].down, &down[c * H], nullptr, g});
  }
  compute::matmul_many(pool, nullptr, 1, mm);
  for (size_t c = 0; c < chosen.size(); ++c)
    for (int64_t j = 0; j < H; ++j) y[j] += down[c * H + j] * weights[c];
}

}  // namespace

// Each adapter's sequence scale by row of the pass (0: the row does not use it) and the all-rows
// index, built once per forward pass for every sparse layer.
Transformer::ExpertRows Transformer::expert_rows(const RowGroups& groups, int64_t m) {
  ExpertRows out;
  out.scale_of.resize(groups.size());
  for (size_t a = 0; a < groups.size(); ++a) {
    if (groups[a].rows.empty()) continue;
    out.scale_of[a].assign(static_cast<size_t>(m), 0.0f);
    for (size_t i = 0; i < groups[a].rows.size(); ++i)
      out.scale_of[a][static_cast<size_t>(groups[a].rows[i])] = groups[a].scales[i];
  }
  out.all.resize(static_cast<size_t>(m));
  for (int64_t r = 0; r < m; ++r) out.all[static_cast<size_t>(r)] = r;
  return out;
}

// Routing as transformers' Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock: softmax over all
// experts in F32, the top num_experts_per_tok probabilities (ties to the lower index), divided by
// their sum when norm_topk_prob. Each expert used in the pass runs once on the rows that chose it
// (gathered), so a prefill batch reads each expert's weights once and a decode step reads only the
// chosen ones. Adapter terms on the router change the logits before the softmax. y = Σ weight_e · expert_e(x) accumulated from zero in ascending expert order (the
// order of transformers' index_add_ loop).
void Transformer::experts_mlp(ThreadPool& pool, int64_t layer, const float* xn, int64_t m, float* y,
                              const RowGroups& groups, const ExpertRows& sparse_rows) {
  const model::ModelConfig& c = config_;
  const model::LayerWeights& L = weights_.layers[layer];
  const int64_t E = c.num_experts, K = c.num_experts_per_tok, H = c.hidden_size, F = c.moe_intermediate_size;
  const std::vector<std::vector<float>>& scale_of = sparse_rows.scale_of;
  std::vector<float> probs(static_cast<size_t>(m * E));
  matmul(pool, xn, m, L.router, probs.data());
  add_terms(pool, groups, scale_of, {model::Role::Router, layer}, sparse_rows.all, xn, H, L.router, probs.data());  // adapters on the router (mlx-lm's default keys)
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(E));
  std::vector<std::vector<float>> weight_of(static_cast<size_t>(E));
  std::vector<int64_t> order(static_cast<size_t>(E));
  for (int64_t r = 0; r < m; ++r) {
    float* p = &probs[static_cast<size_t>(r * E)];
    compute::softmax(p, E);
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
  // One decode row: every chosen expert's gate and up read the same x, so they run in one
  // dispatch (one activation quantization), 2·K projections at once, and then their K downs in
  // another (decode_downs) unless an adapter has terms on one of them (those keep run_inline's
  // one dispatch per expert, terms inside); more rows: expert by expert on the rows that chose it.
  std::vector<int64_t> chosen;
  for (int64_t e = 0; e < E; ++e)
    if (!rows_of[static_cast<size_t>(e)].empty()) chosen.push_back(e);
  const bool together = m == 1;
  std::vector<float> xs, gate, up, down;
  auto gate_up = [&](std::span<const int64_t> experts, const float* in, int64_t n, const std::vector<int64_t>& rows) {
    std::vector<ExpertProjection> ps;
    for (size_t i = 0; i < experts.size(); ++i) {
      const model::ExpertWeights& X = L.experts[static_cast<size_t>(experts[i])];
      ps.push_back({experts[i], model::Role::Gate, &X.gate, gate.data() + i * n * F});
      ps.push_back({experts[i], model::Role::Up, &X.up, up.data() + i * n * F});
    }
    if (run_inline(pool, groups, scale_of, layer, in, n, rows, ps)) return;
    std::vector<compute::MatmulTarget> mm;
    for (const ExpertProjection& p : ps) mm.push_back({p.w, p.y});
    compute::matmul_many(pool, in, n, mm);
    for (const ExpertProjection& p : ps)
      add_terms(pool, groups, scale_of, {p.role, layer, p.expert}, rows, in, H, *p.w, p.y);
  };
  if (together) {
    gate.resize(static_cast<size_t>(chosen.size() * F));
    up.resize(static_cast<size_t>(chosen.size() * F));
    gate_up(chosen, xn, 1, rows_of[static_cast<size_t>(chosen[0])]);
    const auto down_terms = [&](int64_t e) {
      for (size_t a = 0; a < groups.size(); ++a)
        if (!scale_of[a].empty() && groups.adapter(a).at({model::Role::Down, layer, e})) return true;
      return false;
    };
    if (std::none_of(chosen.begin(), chosen.end(), down_terms)) {
      std::vector<float> w;
      for (int64_t e : chosen) w.push_back(weight_of[static_cast<size_t>(e)][0]);
      return decode_downs(pool, L, chosen, w, gate.data(), up.data(), F, H, glu_fn, y);
    }
  }
  for (size_t c = 0; c < chosen.size(); ++c) {
    const int64_t e = chosen[c];
    const auto& rows = rows_of[static_cast<size_t>(e)];
    const int64_t n = static_cast<int64_t>(rows.size());
    const model::ExpertWeights& X = L.experts[static_cast<size_t>(e)];
    float* g = gate.data();
    if (together) {
      g += c * F;
      glu_fn(g, up.data() + c * F, F, g);
    } else {
      const float* in = xn;
      if (n != m) {  // gather the rows that chose this expert
        xs.resize(static_cast<size_t>(n * H));
        for (int64_t i = 0; i < n; ++i) std::copy(xn + rows[i] * H, xn + (rows[i] + 1) * H, &xs[i * H]);
        in = xs.data();
      }
      gate.resize(static_cast<size_t>(n * F));
      up.resize(static_cast<size_t>(n * F));
      gate_up(std::span<const int64_t>(&e, 1), in, n, rows);
      g = gate.data();
      for (int64_t i = 0; i < n; ++i) glu_fn(&g[i * F], &up[i * F], F, &g[i * F]);
    }
    down.resize(static_cast<size_t>(n * H));
    const ExpertProjection d[] = {{e, model::Role::Down, &X.down, down.data()}};
    if (!run_inline(pool, groups, scale_of, layer, g, n, rows, d)) {
      matmul(pool, g, n, X.down, down.data());
      add_terms(pool, groups, scale_of, {model::Role::Down, layer, e}, rows, g, F, X.down, down.data());
    }
    const auto& w = weight_of[static_cast<size_t>(e)];
    for (int64_t i = 0; i < n; ++i) {
      float* out = y + rows[i] * H;
      for (int64_t j = 0; j < H; ++j) out[j] += down[i * H + j] * w[i];
    }
  }
}

}  // namespace graft::runtime
