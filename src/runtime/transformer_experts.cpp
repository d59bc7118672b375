// The mixture-of-experts MLP of a sparse layer (Transformer::experts_mlp): routing, each chosen
// expert once over the rows that chose it, the experts in batches of one dispatch each for gate and
// up and one for the downs, with the adapter terms on the experts inside them.
#include <algorithm>
#include <span>

#include "graft/compute/ops.h"
#include "graft/runtime/kernels.h"
#include "graft/runtime/transformer.h"
#include "runtime/adapted_matmul.h"

namespace graft::runtime {

namespace {

// A projection of one expert on the rows of the pass that chose it: x [n, w->cols] (those rows of
// xn, or of the expert's gated activation), y [n, w->rows].
struct ExpertProjection {
  int64_t expert;
  model::Role role;  // Gate, Up or Down
  const model::Matrix* w;
  const float* x;
  int64_t n;
  const std::vector<int64_t>* rows;  // the rows of the pass x stands for
  float* y;
};

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

// The adapters' terms an expert projection runs inside the grouped call (project_experts): an
// adapter's terms on it, their down passes' results, and the scales of the projection's rows.
struct InlineTerms {
  size_t p;  // the projection
  std::vector<float> scales;
  std::vector<const LoraTerm*> terms;
  std::vector<std::vector<float>> lows;  // [n, low_width()] each
};

// Runs `ps` (each on its own input) as one matmul_adapted: the base products, and the adapter terms
// of every projection where each adapter with terms on it is used by all of its rows or by none and
// no term is LoKr, inside the call as project_many does (down passes x·Aᵀ as first targets, the
// up-projections in each projection's column epilogue). Other projections (a batch mixing rows
// with and without an adapter) get their terms after it, gathered by add_terms. Either way the same
// arithmetic as the product and then add_terms, term by term in adapter order, so the same bits.
// (Groups: Transformer's RowGroups, private to it.)
template <class Groups>
void project_experts(ThreadPool& pool, const Groups& groups, const std::vector<std::vector<float>>& scale_of,
                     int64_t layer, std::span<const ExpertProjection> ps) {
  std::vector<InlineTerms> inside;
  std::vector<bool> after(ps.size(), false);  // terms added after the call
  for (size_t i = 0; i < ps.size(); ++i) {
    const size_t first = inside.size();
    for (size_t a = 0; a < groups.size() && !after[i]; ++a) {
      if (scale_of[a].empty()) continue;
      const std::vector<LoraTerm>* terms = groups.adapter(a).at({ps[i].role, layer, ps[i].expert});
      if (!terms) continue;
      InlineTerms on{i, {}, {}, {}};
      for (int64_t r : *ps[i].rows)
        if (const float sc = scale_of[a][static_cast<size_t>(r)]; sc != 0.0f) on.scales.push_back(sc);
      if (on.scales.empty()) continue;
      after[i] = static_cast<int64_t>(on.scales.size()) != ps[i].n;
      for (const LoraTerm& t : *terms) {
        after[i] = after[i] || t.kron;
        on.terms.push_back(&t);
        on.lows.emplace_back(static_cast<size_t>(ps[i].n * t.low_width()), 0.0f);
      }
      inside.push_back(std::move(on));
    }
    if (after[i]) inside.resize(first);
  }
  std::vector<AdaptedTarget> targets;
  for (const ExpertProjection& p : ps) targets.push_back({p.w, p.y, nullptr, {}, p.x, p.n});
  std::vector<RowDowns> downs;  // (inside is complete: the pointers into it stay valid)
  for (InlineTerms& on : inside) {
    const ExpertProjection& p = ps[on.p];
    downs.push_back({{}, &on.scales, p.x, p.n});
    for (size_t k = 0; k < on.terms.size(); ++k) {
      downs.back().terms.push_back({on.terms[k], p.w, on.lows[k].data()});
      targets[on.p].ups.push_back({on.terms[k], on.lows[k].data(), p.n, on.scales.data()});
    }
  }
  matmul_adapted(pool, nullptr, 0, targets, downs);
  for (size_t i = 0; i < ps.size(); ++i)
    if (after[i])
      add_terms(pool, groups, scale_of, {ps[i].role, layer, ps[i].expert}, *ps[i].rows, ps[i].x, ps[i].w->cols,
                *ps[i].w, ps[i].y);
}

// Each row's top K of E experts: softmax over all in F32, the K largest (ties to the lower index),
// divided by their sum when `norm`; by expert, the rows that chose it and their weights.
void route(float* probs, int64_t m, int64_t E, int64_t K, bool norm, std::vector<std::vector<int64_t>>& rows_of,
           std::vector<std::vector<float>>& weight_of) {
  std::vector<int64_t> order(static_cast<size_t>(E));
  for (int64_t r = 0; r < m; ++r) {
    float* p = &probs[r * E];
    compute::softmax(p, E);
    for (int64_t e = 0; e < E; ++e) order[static_cast<size_t>(e)] = e;
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [&](int64_t a, int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int64_t k = 0; k < K; ++k) sum += p[order[static_cast<size_t>(k)]];
    for (int64_t k = 0; k < K; ++k) {
      const int64_t e = order[static_cast<size_t>(k)];
      rows_of[static_cast<size_t>(e)].push_back(r);
      weight_of[static_cast<size_t>(e)].push_back(norm ? p[e] / sum : p[e]);
    }
  }
}

}  // namespace

int64_t Transformer::expert_batch_rows(const model::ModelConfig& c) {
  return std::max<int64_t>(1, kExpertBatchBytes / (4 * (2 * c.hidden_size + 2 * c.moe_intermediate_size)));
}

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
// chosen ones. Adapter terms on the router change the logits before the softmax. y = Σ weight_e ·
// expert_e(x) accumulated from zero in ascending expert order (the order of transformers'
// index_add_ loop).
void Transformer::experts_mlp(ThreadPool& pool, int64_t layer, const float* xn, int64_t m, float* y,
                              const RowGroups& groups, const ExpertRows& sparse_rows) {
  const model::ModelConfig& c = config_;
  const model::LayerWeights& L = weights_.layers[layer];
  const int64_t E = c.num_experts, K = c.num_experts_per_tok, H = c.hidden_size;
  const std::vector<std::vector<float>>& scale_of = sparse_rows.scale_of;
  std::vector<float> probs(static_cast<size_t>(m * E));
  matmul(pool, xn, m, L.router, probs.data());
  add_terms(pool, groups, scale_of, {model::Role::Router, layer}, sparse_rows.all, xn, H, L.router, probs.data());  // adapters on the router (mlx-lm's default keys)
  std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(E));
  std::vector<std::vector<float>> weight_of(static_cast<size_t>(E));
  route(probs.data(), m, E, K, c.norm_topk_prob, rows_of, weight_of);
  std::vector<int64_t> chosen;
  for (int64_t e = 0; e < E; ++e)
    if (!rows_of[static_cast<size_t>(e)].empty()) chosen.push_back(e);
  // Experts in batches whose rows' buffers (gathered x, gate, up, down) stay within about one
  // core's L2: a whole prefill's in one batch streamed them through memory and was 5 % slower at 1
  // thread than expert by expert; batches of about 64 rows (Qwen3-30B-A3B's shape) were as fast at
  // 1 thread and 8 % faster at 2 (half the dispatches and their tails). A decode step's experts
  // are one batch.
  std::fill(y, y + m * H, 0.0f);
  const int64_t budget = expert_batch_rows(c);
  for (size_t c0 = 0, c1; c0 < chosen.size(); c0 = c1) {
    int64_t rows = static_cast<int64_t>(rows_of[static_cast<size_t>(chosen[c0])].size());
    for (c1 = c0 + 1; c1 < chosen.size(); ++c1) {
      const int64_t more = static_cast<int64_t>(rows_of[static_cast<size_t>(chosen[c1])].size());
      if (rows + more > budget) break;
      rows += more;
    }
    experts_grouped(pool, layer, xn, m, y, std::span<const int64_t>(chosen).subspan(c0, c1 - c0), rows_of, weight_of,
                    groups, scale_of);
  }
}

// The experts of `chosen` (a batch, ascending): each one's rows gathered (an expert every row chose
// reads xn itself: a decode step's experts all share one activation quantization), all gates and
// ups as one call (each pair on its expert's rows, the adapters' terms on them inside it:
// project_experts), the gated activation over all rows, all downs as a second one, then each
// row's y += weight · down over its experts in ascending expert order. Rows are shared among the
// threads at every step. The same bits as expert by expert: no kernel depends on the column cut or
// on the other rows, and each y element sums in the same order.
void Transformer::experts_grouped(ThreadPool& pool, int64_t layer, const float* xn, int64_t m, float* y,
                                  std::span<const int64_t> chosen, const std::vector<std::vector<int64_t>>& rows_of,
                                  const std::vector<std::vector<float>>& weight_of, const RowGroups& groups,
                                  const std::vector<std::vector<float>>& scale_of) {
  const model::LayerWeights& L = weights_.layers[layer];
  const int64_t H = config_.hidden_size, F = config_.moe_intermediate_size;
  const size_t nc = chosen.size();
  std::vector<int64_t> at(nc + 1, 0), gathered_at(nc + 1, 0);  // each expert's first row, and in expert_x
  for (size_t c = 0; c < nc; ++c) {
    const int64_t n = static_cast<int64_t>(rows_of[static_cast<size_t>(chosen[c])].size());
    at[c + 1] = at[c] + n;
    gathered_at[c + 1] = gathered_at[c] + (n == m ? 0 : n);
  }
  const int64_t n = at.back();
  ws_.expert_x.resize(static_cast<size_t>(gathered_at.back() * H));
  ws_.expert_gate.resize(static_cast<size_t>(n * F));
  ws_.expert_up.resize(static_cast<size_t>(n * F));
  ws_.expert_down.resize(static_cast<size_t>(n * H));
  float *xs = ws_.expert_x.data(), *gate = ws_.expert_gate.data(), *up = ws_.expert_up.data(),
        *down = ws_.expert_down.data();
  if (gathered_at.back() > 0)
    pool.parallel_for(static_cast<int64_t>(nc), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const auto& rows = rows_of[static_cast<size_t>(chosen[static_cast<size_t>(c)])];
        if (static_cast<int64_t>(rows.size()) == m) continue;
        float* out = xs + gathered_at[static_cast<size_t>(c)] * H;
        for (size_t i = 0; i < rows.size(); ++i) std::copy(xn + rows[i] * H, xn + (rows[i] + 1) * H, out + i * H);
      }
    });
  std::vector<ExpertProjection> ps;
  for (size_t c = 0; c < nc; ++c) {
    const int64_t e = chosen[c], rows = at[c + 1] - at[c];
    const model::ExpertWeights& X = L.experts[static_cast<size_t>(e)];
    const float* in = rows == m ? xn : xs + gathered_at[c] * H;
    const std::vector<int64_t>* of = &rows_of[static_cast<size_t>(e)];
    ps.push_back({e, model::Role::Gate, &X.gate, in, rows, of, gate + at[c] * F});
    ps.push_back({e, model::Role::Up, &X.up, in, rows, of, up + at[c] * F});
  }
  project_experts(pool, groups, scale_of, layer, ps);
  const GluFn glu_fn = glu();
  pool.parallel_for(  // (grains: a decode step's few rows run here, without a dispatch)
      n, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) glu_fn(gate + r * F, up + r * F, F, gate + r * F);
      },
      64);
  ps.clear();
  for (size_t c = 0; c < nc; ++c) {
    const int64_t e = chosen[c];
    ps.push_back({e, model::Role::Down, &L.experts[static_cast<size_t>(e)].down, gate + at[c] * F, at[c + 1] - at[c],
                  &rows_of[static_cast<size_t>(e)], down + at[c] * H});
  }
  project_experts(pool, groups, scale_of, layer, ps);
  // The batch's (row, down row, weight), by row and within a row in ascending expert order; each
  // row's run of them added on one thread, in that order.
  struct Term {
    int64_t row;
    const float* d;
    float w;
  };
  std::vector<Term> terms;
  for (size_t c = 0; c < nc; ++c) {
    const auto& rows = rows_of[static_cast<size_t>(chosen[c])];
    const auto& w = weight_of[static_cast<size_t>(chosen[c])];
    for (size_t i = 0; i < rows.size(); ++i) terms.push_back({rows[i], down + (at[c] + static_cast<int64_t>(i)) * H, w[i]});
  }
  std::stable_sort(terms.begin(), terms.end(), [](const Term& a, const Term& b) { return a.row < b.row; });
  std::vector<size_t> run = {0};  // where each row's run starts
  for (size_t i = 1; i <= terms.size(); ++i)
    if (i == terms.size() || terms[i].row != terms[i - 1].row) run.push_back(i);
  pool.parallel_for(
      static_cast<int64_t>(run.size()) - 1,
      [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          for (size_t i = run[static_cast<size_t>(r)]; i < run[static_cast<size_t>(r) + 1]; ++i) {
            float* out = y + terms[i].row * H;
            for (int64_t j = 0; j < H; ++j) out[j] += terms[i].d[j] * terms[i].w;
          }
      },
      16);
}

}  // namespace graft::runtime
