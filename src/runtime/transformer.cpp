#include "graft/runtime/transformer.h"

#include <algorithm>
#include <cmath>

#include "graft/core/error.h"
#include "graft/runtime/kernels.h"
#include "graft/runtime/ops.h"

namespace graft::runtime {

namespace {

// Rotates pairs (i, i + half) of each head by position * inv_freq[i]: the rotate_half layout of
// Hugging Face checkpoints (GGUF q/k rows are un-permuted into it at load).
void apply_rope(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const std::vector<float>& inv_freq) {
  const int64_t half = head_dim / 2;
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

void add_bias(float* y, const Tensor& bias, int64_t m, int64_t n) {
  const float* b = bias.as<float>();
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) y[r * n + j] += b[j];
}

struct RowInfo {
  int64_t seq;  // index into the batch
  int64_t pos;  // absolute position in that sequence
};

}  // namespace

Transformer::Transformer(const model::ModelConfig& config, const model::ModelWeights& weights)
    : config_(config), weights_(weights), inv_freq_(model::rope_inv_freq(config)) {}

void Transformer::project(ThreadPool& pool, int64_t layer, Projection p, const float* x, int64_t m, float* y) {
  const model::LayerWeights* L = layer >= 0 ? &weights_.layers[layer] : nullptr;
  const Tensor* w = nullptr;
  const Tensor* bias = nullptr;
  switch (p) {
    case Projection::Q: w = &L->q; bias = &L->q_bias; break;
    case Projection::K: w = &L->k; bias = &L->k_bias; break;
    case Projection::V: w = &L->v; bias = &L->v_bias; break;
    case Projection::O: w = &L->o; break;
    case Projection::Gate: w = &L->gate; break;
    case Projection::Up: w = &L->up; break;
    case Projection::Down: w = &L->down; break;
    case Projection::LmHead: w = &weights_.lm_head; break;
  }
  matmul(pool, x, m, w->shape[1], *w, y);
  if (bias && bias->data) add_bias(y, *bias, m, w->shape[0]);
}

void Transformer::attention(ThreadPool& pool, int64_t layer, std::span<const SequenceInput> batch, const float* q,
                            float* out) {
  const model::ModelConfig& c = config_;
  const int64_t hd = c.head_dim, n_heads = c.num_heads, group = c.num_heads / c.num_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<RowInfo> rows;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t start = batch[s].cache->size();
    for (size_t t = 0; t < batch[s].tokens.size(); ++t) rows.push_back({static_cast<int64_t>(s), start + int64_t(t)});
  }
  const int64_t n_items = static_cast<int64_t>(rows.size()) * n_heads;
  pool.parallel_for(n_items, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t r = item / n_heads, h = item % n_heads, kvh = h / group;
      const RowInfo& ri = rows[r];
      const KVCache& cache = *batch[ri.seq].cache;
      const int64_t first = c.sliding_window ? std::max<int64_t>(0, ri.pos - *c.sliding_window + 1) : 0;
      const int64_t n = ri.pos + 1 - first;
      scores.resize(static_cast<size_t>(n));
      const float* qh = q + r * c.q_dim() + h * hd;
      for (int64_t j = 0; j < n; ++j) {
        const float* kj = cache.key(layer, first + j) + kvh * hd;
        scores[j] = dot(qh, kj, hd) * scale;
      }
      softmax(scores.data(), n);
      float* o = out + r * c.q_dim() + h * hd;
      std::fill(o, o + hd, 0.0f);
      for (int64_t j = 0; j < n; ++j) {
        const float* vj = cache.value(layer, first + j) + kvh * hd;
        axpy(scores[j], vj, o, hd);
      }
    }
  });
}

std::vector<float> Transformer::forward(ThreadPool& pool, std::span<const SequenceInput> batch) {
  const model::ModelConfig& c = config_;
  const int64_t H = c.hidden_size, QD = c.q_dim(), KVD = c.kv_dim(), F = c.intermediate_size;

  // Validate everything before any cache changes.
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
  for (const auto& s : batch) s.cache->reserve_more(static_cast<int64_t>(s.tokens.size()));

  std::vector<float> x(T * H), xn(T * H), q(T * QD), k(T * KVD), v(T * KVD), att(T * QD), tmp(T * H);
  std::vector<float> gate(T * F), up(T * F);
  std::vector<RowInfo> rows;
  rows.reserve(static_cast<size_t>(T));
  {
    int64_t r = 0;
    for (size_t s = 0; s < batch.size(); ++s)
      for (size_t t = 0; t < batch[s].tokens.size(); ++t, ++r) {
        rows.push_back({static_cast<int64_t>(s), batch[s].cache->size() + static_cast<int64_t>(t)});
        const Tensor& e = weights_.embed;
        const int64_t id = batch[s].tokens[t];
        convert_to_f32(e.dtype, static_cast<const uint8_t*>(e.data) + dtype_bytes(e.dtype, id * H), &x[r * H], H);
      }
  }
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto norm_rows = [&](const float* in, const Tensor& w, float* out) {
    pool.parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) rms_norm(in + r * H, w.as<float>(), H, eps, out + r * H);
    });
  };

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const model::LayerWeights& L = weights_.layers[l];
    norm_rows(x.data(), L.attn_norm, xn.data());
    project(pool, l, Projection::Q, xn.data(), T, q.data());
    project(pool, l, Projection::K, xn.data(), T, k.data());
    project(pool, l, Projection::V, xn.data(), T, v.data());
    pool.parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        float* qr = &q[r * QD];
        float* kr = &k[r * KVD];
        if (c.qk_norm) {
          for (int64_t h = 0; h < c.num_heads; ++h)
            rms_norm(qr + h * c.head_dim, L.q_norm.as<float>(), c.head_dim, eps, qr + h * c.head_dim);
          for (int64_t h = 0; h < c.num_kv_heads; ++h)
            rms_norm(kr + h * c.head_dim, L.k_norm.as<float>(), c.head_dim, eps, kr + h * c.head_dim);
        }
        apply_rope(qr, c.num_heads, c.head_dim, rows[r].pos, inv_freq_);
        apply_rope(kr, c.num_kv_heads, c.head_dim, rows[r].pos, inv_freq_);
        KVCache& cache = *batch[rows[r].seq].cache;
        std::copy(kr, kr + KVD, cache.key(l, rows[r].pos));
        std::copy(&v[r * KVD], &v[r * KVD] + KVD, cache.value(l, rows[r].pos));
      }
    });
    attention(pool, l, batch, q.data(), att.data());
    project(pool, l, Projection::O, att.data(), T, tmp.data());
    add(x.data(), tmp.data(), T * H);

    norm_rows(x.data(), L.mlp_norm, xn.data());
    project(pool, l, Projection::Gate, xn.data(), T, gate.data());
    project(pool, l, Projection::Up, xn.data(), T, up.data());
    pool.parallel_for(T, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) silu_mul(&gate[r * F], &up[r * F], F, &gate[r * F]);
    });
    project(pool, l, Projection::Down, gate.data(), T, tmp.data());
    add(x.data(), tmp.data(), T * H);
  }

  // Final norm and head only for the rows whose logits are wanted.
  std::vector<int64_t> out_rows;
  {
    int64_t r = 0;
    for (const auto& s : batch) {
      const int64_t n = static_cast<int64_t>(s.tokens.size());
      if (s.all_logits)
        for (int64_t t = 0; t < n; ++t) out_rows.push_back(r + t);
      else
        out_rows.push_back(r + n - 1);
      r += n;
    }
  }
  const int64_t R = static_cast<int64_t>(out_rows.size());
  std::vector<float> hn(R * H);
  for (int64_t i = 0; i < R; ++i) rms_norm(&x[out_rows[i] * H], weights_.final_norm.as<float>(), H, eps, &hn[i * H]);
  std::vector<float> logits(R * c.vocab_size);
  project(pool, -1, Projection::LmHead, hn.data(), R, logits.data());
  for (const auto& s : batch) s.cache->advance(static_cast<int64_t>(s.tokens.size()));
  return logits;
}

}  // namespace graft::runtime
