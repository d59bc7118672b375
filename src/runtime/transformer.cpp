#include "graft/runtime/transformer.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>
#include <array>
#include <cmath>
#include <map>
#include <optional>

#include "graft/core/error.h"
#include "graft/runtime/kernels.h"
#include "graft/compute/ops.h"
#include "runtime/adapted_matmul.h"

namespace graft::runtime {

namespace {

// Rotates pairs (i, i + half) of the first `dims` values of each head by position * inv_freq[i],
// half = dims / 2: the rotate_half layout of Hugging Face checkpoints (GGUF q/k rows are
// un-permuted into it at load); dims < head_dim is partial rotary (Phi-3), the rest passes through.
void apply_rope(float* x, int64_t n_heads, int64_t head_dim, int64_t dims, int64_t pos,
                const std::vector<float>& inv_freq) {
  const int64_t half = dims / 2;
  for (int64_t i = 0; i < half; ++i) {
    // float32 like transformers: angle = float(pos) * inv_freq, then cos/sin of that float.
    const float angle = static_cast<float>(pos) * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const float a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

using model::Role;
constexpr Role kQkv[] = {Role::Q, Role::K, Role::V};
constexpr Role kGateUp[] = {Role::Gate, Role::Up};

// Rows per parallel chunk of a row-wise pass over `width` floats a row: a few microseconds of work
// at least, so a decode step of a few sequences runs these passes on the calling thread instead of
// paying a dispatch and a wait for each (row-wise results do not depend on the cut).
int64_t rows_per_chunk(int64_t width) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(1, width)); }

}  // namespace

Transformer::Transformer(const model::ModelConfig& config, const model::ModelWeights& weights)
    : config_(config),
      weights_(weights),
      inv_freq_(model::rope_inv_freq(config)),
      inv_freq_local_(model::rope_inv_freq(config, /*local=*/true)) {}

Transformer::RowGroups Transformer::group_rows(std::span<const SequenceInput> batch,
                                               const std::vector<int64_t>& seq_of_row) const {
  // Distinct adapters keyed by (order, identity), so the map's order is the order terms apply in.
  std::map<std::pair<int64_t, const LoraAdapter*>, size_t> index;
  for (const auto& s : batch)
    for (const ScaledAdapter& a : s.adapters) {
      if (!std::isfinite(a.scale)) fail("forward: adapter scale ", a.scale, " is not finite");
      if (!a.adapter || a.adapter->model_layers != config_.num_layers)
        fail("forward: an unfused adapter was built for a different model");
      if (a.scale != 0.0f) index.emplace(std::make_pair(a.order, a.adapter.get()), 0);
    }
  RowGroups g;
  for (auto& [key, i] : index) {
    i = g.by_adapter.size();
    g.by_adapter.push_back({key.second, {}, {}});
  }
  for (size_t r = 0; r < seq_of_row.size(); ++r)
    for (const ScaledAdapter& a : batch[static_cast<size_t>(seq_of_row[r])].adapters) {
      if (a.scale == 0.0f) continue;
      AdapterRows& ar = g.by_adapter[index.at({a.order, a.adapter.get()})];
      if (!ar.rows.empty() && ar.rows.back() == static_cast<int64_t>(r))
        fail("forward: a sequence lists the adapter '", a.adapter->path, "' twice");
      ar.rows.push_back(static_cast<int64_t>(r));
      ar.scales.push_back(a.scale);
    }
  return g;
}

// Every projection goes through here: y[m, out] = x[m, in] · Wᵀ (+ bias) + the adapter terms
// s_row · ((x_row · Aᵀ) · Bᵀ) of each adapter on the rows that use it. The thin down-projections
// x·Aᵀ run first, once per adapter over its gathered rows (whatever the number of sequences); the
// up-projections are applied by the worker that computed each block of output columns, right
// after its base product and the bias (PEFT and mlx-lm add the term to the biased output), so
// the adapter adds no pass over y and no extra thread dispatch. Projections of one x (q/k/v,
// gate/up) share the gathered rows, one dispatch for all their down passes and one matmul_many;
// when the adapters' rows are all of x, the down passes are that matmul_many's first targets.
void Transformer::project(ThreadPool& pool, int64_t layer, Role p, const float* x, int64_t m, float* y,
                          const RowGroups& groups) {
  const Role ps[] = {p};
  float* const ys[] = {y};
  project_many(pool, layer, ps, x, m, ys, groups);
}

void Transformer::project_many(ThreadPool& pool, int64_t layer, std::span<const Role> ps, const float* x,
                               int64_t m, std::span<float* const> ys, const RowGroups& groups) {
  std::vector<AdaptedTarget> targets(ps.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    AdaptedTarget& t = targets[i];
    t.y = ys[i];
    t.w = weights_.matrix({ps[i], layer});
    if (layer >= 0) {  // q/k/v biases (attention_bias; empty otherwise)
      const model::LayerWeights& L = weights_.layers[static_cast<size_t>(layer)];
      t.bias = ps[i] == Role::Q ? &L.q_bias : ps[i] == Role::K ? &L.k_bias : ps[i] == Role::V ? &L.v_bias : nullptr;
    }
  }
  const int64_t in = targets[0].w->cols;

  // Down-projections: low[i, :] = x[rows_i] · Aᵀ for each active term.
  struct Active {
    const LoraTerm* term;
    const AdapterRows* rows;
    std::vector<float> low;  // [rows, r]
    const float* xs;         // the adapter's rows of x
    const model::Matrix* w;  // its projection's base weight (DoRA reads it on first use)
  };
  std::vector<Active> active;
  std::vector<size_t> first_of(ps.size() + 1);  // target i's terms: active[first_of[i], first_of[i + 1])
  std::vector<std::vector<float>> gathered(groups.size());
  for (size_t i = 0; i < ps.size(); ++i) {
    first_of[i] = active.size();
    for (size_t a = 0; a < groups.size(); ++a) {
      const AdapterRows& ar = groups[a];
      const std::vector<LoraTerm>* terms = groups.adapter(a).at({ps[i], layer});
      if (!terms || ar.rows.empty()) continue;
      const int64_t n = static_cast<int64_t>(ar.rows.size());
      const float* xs = x;
      if (!(ar.rows.front() == 0 && ar.rows.back() == n - 1)) {  // not all rows, in order: gather (once)
        if (gathered[a].empty()) {
          gathered[a].resize(static_cast<size_t>(n * in));
          for (int64_t r = 0; r < n; ++r) std::copy(x + ar.rows[r] * in, x + (ar.rows[r] + 1) * in, &gathered[a][r * in]);
        }
        xs = gathered[a].data();
      }
      for (const LoraTerm& t : *terms)
        active.push_back({&t, &ar, std::vector<float>(static_cast<size_t>(n * t.low_width())), xs, targets[i].w});
    }
  }
  first_of[ps.size()] = active.size();
  auto down_for = [&](int64_t i) {
    Active& act = active[static_cast<size_t>(i)];
    lora_term_down(pool, *act.term, act.xs, static_cast<int64_t>(act.rows->rows.size()), in, *act.w, act.low.data(),
                   act.rows->scales);
  };
  bool same_rows = true;  // every term on the same rows (one adapter, or all rows): one matmul_many
  for (const Active& act : active) same_rows = same_rows && act.rows == active[0].rows && !act.term->kron;
  // On all rows of x (one sequence, or a batch with one adapter), the down passes run inside the
  // projection's own matmul_many as its first targets: no dispatch of their own, x quantized once.
  std::vector<RowDowns> inline_downs;
  if (same_rows && !active.empty()) {
    std::vector<TermDown> downs;
    for (Active& act : active) downs.push_back({act.term, act.w, act.low.data()});
    const int64_t n = static_cast<int64_t>(active[0].rows->rows.size());
    if (n == m)
      inline_downs.push_back({std::move(downs), &active[0].rows->scales});
    else
      lora_terms_down(pool, downs, active[0].xs, n, active[0].rows->scales);
  } else if (active.size() == 1) {
    down_for(0);  // one LoKr term: its own rows split over the pool
  } else if (!active.empty()) {
    // Several terms (adapters mixed in a server step, or several projections): one dispatch for
    // all their down passes, each run whole by one thread (a nested parallel_for runs inline; the
    // results do not depend on the split). One dispatch per term cost 8 adapters x 7 projections
    // x 30 layers synchronizations a step.
    pool.parallel_for(static_cast<int64_t>(active.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) down_for(i);
    });
  }
  for (size_t i = 0; i < ps.size(); ++i)
    for (size_t a = first_of[i]; a < first_of[i + 1]; ++a) {
      const Active& act = active[a];
      targets[i].ups.push_back({act.term, act.low.data(), static_cast<int64_t>(act.rows->rows.size()),
                                act.rows->scales.data(), act.rows->rows.data()});
    }
  matmul_adapted(pool, x, m, targets, inline_downs);
}

// Input rows: the embedding row of each token (dequantized when the embedding is quantized) plus
// each adapter's embedding term s·B[id]·A.
void Transformer::embed_rows(std::span<const SequenceInput> batch, float* x, const RowGroups& groups) {
  const int64_t H = config_.hidden_size;
  const model::Matrix& e = weights_.embed;
  int64_t r = 0;
  for (const auto& s : batch)
    for (int32_t id : s.tokens) {
      if (e.quantized())
        dequantize_affine_row(e.quant, id, x + r * H);
      else
        convert_to_f32(e.dense.dtype, static_cast<const uint8_t*>(e.dense.data) + dtype_bytes(e.dense.dtype, id * H),
                       x + r * H, H);
      ++r;
    }
  std::vector<int32_t> ids;
  for (const auto& s : batch) ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
  std::vector<float> brow, arow;
  for (size_t a = 0; a < groups.size(); ++a) {
    const std::vector<LoraTerm>* terms = groups.adapter(a).at({Role::Embed});
    if (!terms) continue;
    for (const LoraTerm& t : *terms) {
      const int64_t rank = t.a.shape[0];
      brow.resize(static_cast<size_t>(rank));
      arow.resize(static_cast<size_t>(H));
      std::vector<float> z(static_cast<size_t>(H));
      for (size_t i = 0; i < groups[a].rows.size(); ++i) {
        const int64_t row = groups[a].rows[i];
        const int64_t id = ids[static_cast<size_t>(row)] - t.row0;
        if (id < 0 || id >= t.b.shape[0]) continue;
        convert_to_f32(t.b.dtype, static_cast<const uint8_t*>(t.b.data) + dtype_bytes(t.b.dtype, id * rank), brow.data(),
                       rank);
        // z = B[id]·A (k ascending), then x += s·z: mlx-lm's s·(A[ids]·B) in graft's orientation.
        std::fill(z.begin(), z.end(), 0.0f);
        for (int64_t k = 0; k < rank; ++k) {
          convert_to_f32(t.a.dtype, static_cast<const uint8_t*>(t.a.data) + dtype_bytes(t.a.dtype, k * H), arow.data(), H);
          for (int64_t c = 0; c < H; ++c) z[c] += brow[k] * arow[c];
        }
        const float s = t.scale * groups[a].scales[i];
        for (int64_t c = 0; c < H; ++c) x[row * H + c] += s * z[c];
      }
    }
  }
}

void Transformer::attention(ThreadPool& pool, int64_t layer, std::span<const SequenceInput> batch, const float* q,
                            float* out) {
  const model::ModelConfig& c = config_;
  const int64_t hd = c.head_dim, group = c.num_heads / c.num_kv_heads;
  const float scale = c.attention_scale();
  const float softcap = c.attn_logit_softcap ? static_cast<float>(*c.attn_logit_softcap) : 0.0f;
  const std::optional<int64_t> window = c.layer_slides(layer) ? c.sliding_window : std::nullopt;
  // One item per row and key/value head: the `group` query heads that share it run together, so
  // each cached key and value is read once for all of them (the same bits as one head at a time).
  const int64_t n_kv = c.num_kv_heads;
  const int64_t n_items = static_cast<int64_t>(ws_.seq_of_row.size()) * n_kv;
  pool.parallel_for(n_items, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / n_kv, kvh = item % n_kv, h = kvh * group;
      const int64_t pos = ws_.pos_of_row[static_cast<size_t>(r)];
      const KVCache& cache = *batch[static_cast<size_t>(ws_.seq_of_row[static_cast<size_t>(r)])].cache;
      const int64_t first = window ? std::max<int64_t>(0, pos - *window + 1) : 0;
      const int64_t n = pos + 1 - first;
      scores.resize(static_cast<size_t>(n * group));
      attend_cached(cache, layer, first, n, kvh, q + r * c.q_dim() + h * hd, hd, scale, scores.data(),
                    out + r * c.q_dim() + h * hd, group, softcap);
    }
  });
}

Transformer::GluFn Transformer::glu() const {
  return config_.activation == model::Activation::GeluTanh ? compute::gelu_tanh_mul : compute::silu_mul;
}

int64_t Transformer::check_batch(std::span<const SequenceInput> batch) const {
  const model::ModelConfig& c = config_;
  int64_t T = 0;
  for (const auto& s : batch) {
    if (!s.cache) fail("forward: a sequence has no KV cache");
    if (s.tokens.empty()) fail("forward: a sequence has no tokens");
    for (int32_t id : s.tokens)
      if (id < 0 || id >= c.vocab_size) fail("token id ", id, " is out of range [0, ", c.vocab_size, ")");
    if (s.cache->size() + static_cast<int64_t>(s.tokens.size()) > s.cache->capacity())
      fail("context full: ", s.cache->size(), " cached + ", s.tokens.size(), " new tokens exceed the context size ",
           s.cache->capacity());
    T += static_cast<int64_t>(s.tokens.size());
  }
  return T;
}

void Transformer::norm_rows(ThreadPool& pool, const float* in, const Tensor& w, float* out, int64_t n) const {
  const int64_t H = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  pool.parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) compute::rms_norm(in + r * H, w.as<float>(), H, eps, out + r * H);
      },
      rows_per_chunk(H));
}

// A sublayer's output joins the residual stream x, through its post-norm under sandwich_norms.
void Transformer::add_residual(ThreadPool& pool, float* out, const Tensor& post_norm, int64_t T) {
  if (config_.sandwich_norms) norm_rows(pool, out, post_norm, out, T);
  compute::add(ws_.x.data(), out, T * config_.hidden_size);
}

// x += o(attention(rope(q), rope(k), v)) of the normed x; each row's k and v stored in its cache.
void Transformer::attention_block(ThreadPool& pool, int64_t l, std::span<const SequenceInput> batch,
                                  const RowGroups& groups) {
  const model::ModelConfig& c = config_;
  const model::LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
  const int64_t T = static_cast<int64_t>(ws_.seq_of_row.size()), QD = c.q_dim(), KVD = c.kv_dim();
  const float eps = static_cast<float>(c.rms_norm_eps);
  Workspace& w = ws_;
  norm_rows(pool, w.x.data(), L.attn_norm, w.xn.data(), T);
  project_many(pool, l, kQkv, w.xn.data(), T, std::array<float*, 3>{w.q.data(), w.k.data(), w.v.data()}, groups);
  pool.parallel_for(T, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      float* qr = &w.q[r * QD];
      float* kr = &w.k[r * KVD];
      if (c.qk_norm) {
        for (int64_t h = 0; h < c.num_heads; ++h)
          compute::rms_norm(qr + h * c.head_dim, L.q_norm.as<float>(), c.head_dim, eps, qr + h * c.head_dim);
        for (int64_t h = 0; h < c.num_kv_heads; ++h)
          compute::rms_norm(kr + h * c.head_dim, L.k_norm.as<float>(), c.head_dim, eps, kr + h * c.head_dim);
      }
      const std::vector<float>& inv_freq = c.layer_slides(l) ? inv_freq_local_ : inv_freq_;
      const int64_t pos = w.pos_of_row[static_cast<size_t>(r)];
      apply_rope(qr, c.num_heads, c.head_dim, c.rope_dims(), pos, inv_freq);
      apply_rope(kr, c.num_kv_heads, c.head_dim, c.rope_dims(), pos, inv_freq);
      KVCache& cache = *batch[static_cast<size_t>(w.seq_of_row[static_cast<size_t>(r)])].cache;
      cache.store(l, pos, kr, &w.v[r * KVD]);  // rounded to the cache's type
    }
  }, rows_per_chunk(QD + 2 * KVD));
  attention(pool, l, batch, w.q.data(), w.att.data());
  project(pool, l, Role::O, w.att.data(), T, w.tmp.data(), groups);
  add_residual(pool, w.tmp.data(), L.attn_post_norm, T);
}

// x += mlp(norm(x)): the gated MLP, or a sparse layer's experts.
void Transformer::mlp_block(ThreadPool& pool, int64_t l, const RowGroups& groups, const ExpertRows& sparse_rows) {
  const model::LayerWeights& L = weights_.layers[static_cast<size_t>(l)];
  const int64_t T = static_cast<int64_t>(ws_.seq_of_row.size()), F = config_.intermediate_size;
  Workspace& w = ws_;
  norm_rows(pool, w.x.data(), L.mlp_norm, w.xn.data(), T);
  if (config_.layer_is_sparse(l)) {
    experts_mlp(pool, l, w.xn.data(), T, w.tmp.data(), groups, sparse_rows);
  } else {
    project_many(pool, l, kGateUp, w.xn.data(), T, std::array<float*, 2>{w.gate.data(), w.up.data()}, groups);
    const GluFn glu = this->glu();
    pool.parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) glu(&w.gate[r * F], &w.up[r * F], F, &w.gate[r * F]);
    }, rows_per_chunk(F));
    project(pool, l, Role::Down, w.gate.data(), T, w.tmp.data(), groups);
  }
  add_residual(pool, w.tmp.data(), L.mlp_post_norm, T);
}

// The head rounds its input to 8 bits like every quantized matrix (compute/matmul_q8.h), but its
// error lands directly on the logits: a quarter of the model's mean KL divergence against unrounded
// activations on the demo file comes from the head alone, and running the whole head unrounded
// costs 30 % of decode. Only the largest logits carry the probability that KL divergence, top-1
// agreement and sampling see, so those are moved to their unrounded value (compute::refine_rows):
// the kRefineTop largest within kRefineMargin nats of the maximum (a token kRefineMargin below the
// maximum has under e^-12 of its probability). A handful of dot products a row, against the head's
// vocabulary-size matmul.
// GRAFT_HEAD_REFINE=0 turns it off (comparisons).
void Transformer::refine_head(const float* hn, float* logits) const {
  constexpr int64_t kRefineTop = 32;
  constexpr float kRefineMargin = 12.0f;
  static const bool off = [] {
    const char* e = std::getenv("GRAFT_HEAD_REFINE");
    return e && std::string_view(e) == "0";
  }();
  const int64_t V = config_.vocab_size, top = kRefineTop;
  const float margin = kRefineMargin;
  if (off || !compute::rounds_activations(weights_.lm_head.kind())) return;
  float best = logits[0];
  for (int64_t j = 1; j < V; ++j) best = std::max(best, logits[j]);
  thread_local std::vector<int64_t> rows;
  rows.clear();
  for (int64_t j = 0; j < V; ++j)
    if (logits[j] >= best - margin) rows.push_back(j);
  if (static_cast<int64_t>(rows.size()) > top) {
    std::nth_element(rows.begin(), rows.begin() + top, rows.end(),
                     [&](int64_t a, int64_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    rows.resize(static_cast<size_t>(top));
  }
  compute::refine_rows(weights_.lm_head, hn, rows, logits);
}

// The final norm and the head for the rows whose logits are wanted; the final norm of every row of
// the sequences that asked for hidden states instead (embeddings).
std::vector<float> Transformer::head(ThreadPool& pool, std::span<const SequenceInput> batch) {
  const model::ModelConfig& c = config_;
  const int64_t H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float* x = ws_.x.data();
  std::vector<int64_t> out_rows, seq_of_out;
  int64_t r = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const SequenceInput& s = batch[i];
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (s.want_logits && !s.hidden)
      for (int64_t t = s.all_logits ? 0 : n - 1; t < n; ++t) out_rows.push_back(r + t), seq_of_out.push_back(int64_t(i));
    if (s.hidden) {  // rows [n, hidden] appended
      const size_t at = s.hidden->size();
      s.hidden->resize(at + static_cast<size_t>(n * H));
      float* out = s.hidden->data() + at;
      pool.parallel_for(
          n,
          [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; ++t)
              compute::rms_norm(&x[(r + t) * H], weights_.final_norm.as<float>(), H, eps, out + t * H);
          },
          rows_per_chunk(H));
    }
    r += n;
  }
  const int64_t R = static_cast<int64_t>(out_rows.size());
  std::vector<float> hn(static_cast<size_t>(R * H)), logits(static_cast<size_t>(R * c.vocab_size));
  for (int64_t i = 0; i < R; ++i) compute::rms_norm(&x[out_rows[i] * H], weights_.final_norm.as<float>(), H, eps, &hn[i * H]);
  if (R > 0) project(pool, -1, Role::LmHead, hn.data(), R, logits.data(), group_rows(batch, seq_of_out));
  pool.parallel_for(R, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) refine_head(&hn[i * H], &logits[i * c.vocab_size]);
  });
  if (c.final_logit_softcap) compute::soft_cap(logits.data(), R * c.vocab_size, static_cast<float>(*c.final_logit_softcap));
  return logits;
}

std::vector<float> Transformer::forward(ThreadPool& pool, std::span<const SequenceInput> batch) {
  const model::ModelConfig& c = config_;
  const int64_t T = check_batch(batch);  // everything checked before any cache changes
  Workspace& w = ws_;
  w.seq_of_row.clear();
  w.pos_of_row.clear();
  for (size_t s = 0; s < batch.size(); ++s)
    for (size_t t = 0; t < batch[s].tokens.size(); ++t) {
      w.seq_of_row.push_back(static_cast<int64_t>(s));
      w.pos_of_row.push_back(batch[s].cache->size() + static_cast<int64_t>(t));
    }
  const RowGroups groups = group_rows(batch, w.seq_of_row);
  for (const auto& s : batch) s.cache->reserve_more(static_cast<int64_t>(s.tokens.size()));
  const int64_t H = c.hidden_size, QD = c.q_dim(), KVD = c.kv_dim(), F = c.intermediate_size;
  for (auto [buf, width] : {std::pair{&w.x, H}, {&w.xn, H}, {&w.q, QD}, {&w.k, KVD}, {&w.v, KVD}, {&w.att, QD},
                            {&w.tmp, H}, {&w.gate, F}, {&w.up, F}})
    buf->resize(static_cast<size_t>(T * width));  // every pass writes each before reading it

  embed_rows(batch, w.x.data(), groups);
  // Gemma: hidden = embedding * sqrt(hidden_size), the normalizer rounded to F32 as transformers does.
  if (c.scale_embeddings) compute::scale(w.x.data(), static_cast<float>(std::sqrt(static_cast<double>(H))), T * H);
  const ExpertRows sparse_rows = c.num_experts > 0 ? expert_rows(groups, T) : ExpertRows{};  // for every sparse layer
  for (int64_t l = 0; l < c.num_layers; ++l) {
    attention_block(pool, l, batch, groups);
    mlp_block(pool, l, groups, sparse_rows);
  }
  std::vector<float> logits = head(pool, batch);
  for (const auto& s : batch) s.cache->advance(static_cast<int64_t>(s.tokens.size()));
  return logits;
}

}  // namespace graft::runtime
