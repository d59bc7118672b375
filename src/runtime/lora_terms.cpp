// The per-term arithmetic of unfused adapters (lora.h): the down pass before a projection's matmul
// and the column epilogue after it, for LoRA/LoHa pairs, LoKr factors and DoRA rescaling.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "graft/core/affine_quant.h"
#include "graft/core/error.h"
#include "graft/runtime/kernels.h"
#include "graft/runtime/lora.h"

namespace graft::runtime {

namespace {

// DoRA's per-row vectors for rows [row0, row0 + rows) of `w`: ‖W_r‖², ⟨W_r, (B·A)_r⟩, ‖(B·A)_r‖²,
// each in double from the F32 row of W (dequantized when quantized) and (B·A)_r summed in double,
// from the factors the term applies (a and bt, in the --lora-dtype they run in).
void fill_dora_rows(const LoraTerm& t, const model::Matrix& w, ThreadPool& pool) {
  const DoraRows& d = *t.dora;
  const int64_t rows = t.rows(), r = t.a.shape[0], in = t.a.shape[1];
  d.w2.assign(static_cast<size_t>(rows), 0.0);
  d.wp.assign(static_cast<size_t>(rows), 0.0);
  d.p2.assign(static_cast<size_t>(rows), 0.0);
  std::vector<float> a(static_cast<size_t>(r * in)), bt, b(static_cast<size_t>(rows * r));
  convert_to_f32(t.a.dtype, t.a.data, a.data(), r * in);
  if (t.up_q8) {
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t k = 0; k < r; ++k) b[static_cast<size_t>(o * r + k)] = t.up_q8->at(o, k);
  } else {
    bt.resize(static_cast<size_t>(r * rows));
    convert_to_f32(t.bt.dtype, t.bt.data, bt.data(), r * rows);
    for (int64_t k = 0; k < r; ++k)
      for (int64_t o = 0; o < rows; ++o) b[static_cast<size_t>(o * r + k)] = bt[static_cast<size_t>(k * rows + o)];
  }
  pool.parallel_for(rows, [&](int64_t begin, int64_t end) {
    std::vector<float> wr(static_cast<size_t>(in));
    std::vector<double> pr(static_cast<size_t>(in));
    for (int64_t o = begin; o < end; ++o) {
      const int64_t row = t.row0 + o;
      if (w.quantized())
        dequantize_affine_row(w.quant, row, wr.data());
      else
        convert_to_f32(w.dense.dtype,
                       static_cast<const uint8_t*>(w.dense.data) + dtype_bytes(w.dense.dtype, row * in), wr.data(),
                       in);
      std::fill(pr.begin(), pr.end(), 0.0);
      for (int64_t k = 0; k < r; ++k) {
        const double c = b[static_cast<size_t>(o * r + k)];
        const float* ak = a.data() + k * in;
        for (int64_t i = 0; i < in; ++i) pr[i] += c * ak[i];
      }
      double w2 = 0, wp = 0, p2 = 0;
      for (int64_t i = 0; i < in; ++i) {
        w2 += static_cast<double>(wr[i]) * wr[i];
        wp += wr[i] * pr[i];
        p2 += pr[i] * pr[i];
      }
      d.w2[o] = w2;
      d.wp[o] = wp;
      d.p2[o] = p2;
    }
  });
}

// out = w·x (w [rows, inner], x [inner, cols]), each output row a run of axpys over k: contiguous
// and vectorizable without reassociating any sum.
void mul(const float* w, int64_t rows, int64_t inner, const float* x, int64_t cols, float* __restrict out) {
  std::fill(out, out + rows * cols, 0.0f);
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict oi = out + i * cols;
    for (int64_t k = 0; k < inner; ++k) {
      const float c = w[i * inner + k];
      const float* __restrict xk = x + k * cols;
      for (int64_t j = 0; j < cols; ++j) oi[j] += c * xk[j];
    }
  }
}

// y = vec(W1·X·W2ᵀ) for one input row x ([q·n], read as X [q, n]); y has p·m entries.
void kron_row(const KronFactors& f, const float* x, float* y, std::vector<float>& s1, std::vector<float>& s2) {
  s1.resize(static_cast<size_t>(f.q * f.m));  // Z = X·W2ᵀ [q, m]
  if (f.r2 == 0) {
    mul(x, f.q, f.n, f.w2t.data(), f.m, s1.data());
  } else {
    s2.resize(static_cast<size_t>(f.q * f.r2));
    mul(x, f.q, f.n, f.w2bt.data(), f.r2, s2.data());          // X·w2bᵀ [q, r2]
    mul(s2.data(), f.q, f.r2, f.w2at.data(), f.m, s1.data());  // ·w2aᵀ  [q, m]
  }
  if (f.r1 == 0) {  // Y = W1·Z [p, m]
    mul(f.w1.data(), f.p, f.q, s1.data(), f.m, y);
  } else {
    s2.resize(static_cast<size_t>(f.r1 * f.m));
    mul(f.w1b.data(), f.r1, f.q, s1.data(), f.m, s2.data());  // w1b·Z [r1, m]
    mul(f.w1a.data(), f.p, f.r1, s2.data(), f.m, y);          // w1a·(w1b·Z)
  }
}

// f(σ)[o] = m[o] / n(σ)[o], n(σ)² = ‖W‖² + 2σ⟨W, BA⟩ + σ²‖BA‖² (in double).
float dora_factor(const DoraRows& d, size_t o, double s) {
  const double n2 = d.w2[o] + s * (2.0 * d.wp[o] + s * d.p2[o]);
  return static_cast<float>(d.magnitude[o] / std::sqrt(n2));
}

constexpr size_t kFactorCache = 8;

// The cached factors of σ, or null.
std::shared_ptr<const std::vector<float>> cached_factors(const DoraRows& d, float s) {
  std::lock_guard<std::mutex> lk(d.mu);
  for (const auto& [sigma, f] : d.factors)
    if (sigma == s) return f;
  return nullptr;
}

void cache_factors(const DoraRows& d, float s) {
  if (cached_factors(d, s)) return;
  auto f = std::make_shared<std::vector<float>>(d.magnitude.size());
  for (size_t o = 0; o < f->size(); ++o) (*f)[o] = dora_factor(d, o, s);
  std::lock_guard<std::mutex> lk(d.mu);
  d.factors.insert(d.factors.begin(), {s, std::move(f)});
  if (d.factors.size() > kFactorCache) d.factors.pop_back();
}

}  // namespace

void lora_term_down(ThreadPool& pool, const LoraTerm& t, const float* xs, int64_t n, int64_t in,
                    const model::Matrix& w, float* low, const std::vector<float>& seq_scales) {
  if (t.kron) {
    const KronFactors& f = *t.kron;
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      std::vector<float> s1, s2;
      for (int64_t i = b; i < e; ++i) kron_row(f, xs + i * in, low + i * f.p * f.m, s1, s2);
    });
    return;
  }
  const TermDown one[] = {{&t, &w, low}};
  lora_terms_down(pool, one, xs, n, seq_scales);
}

TermsDown::TermsDown(ThreadPool& pool, std::span<const TermDown> terms, int64_t n, const std::vector<float>& seq_scales,
                     const float* xs)
    : terms_(terms.begin(), terms.end()), n_(n), f32_(terms.size()), plain_(terms.size()) {
  for (size_t i = 0; i < terms_.size(); ++i) {
    const LoraTerm& t = *terms_[i].term;
    if (t.dora) {
      std::call_once(t.dora->once, [&] { fill_dora_rows(t, *terms_[i].w, pool); });
      for (float s : seq_scales) cache_factors(*t.dora, t.scale * s);
    }
    float* y = terms_[i].low;
    if (t.up_q8) {
      f32_[i].resize(static_cast<size_t>(n * t.a.shape[0]));
      y = f32_[i].data();
    }
    if (!t.down.dense.data) plain_[i] = model::Matrix::of(t.a);
    targets_.push_back({t.down.dense.data ? &t.down : &plain_[i], y, nullptr, xs, xs ? n : -1});
  }
}

void TermsDown::finish() const {
  // The 8-bit up-projection's operand: each row of x·Aᵀ rounded to 8 bits once, here, rather than
  // in every column block of the epilogue.
  for (size_t i = 0; i < terms_.size(); ++i) {
    const LoraTerm& t = *terms_[i].term;
    if (!t.up_q8) continue;
    const int64_t r = t.a.shape[0], width = t.low_width();
    for (int64_t j = 0; j < n_; ++j) {
      float* row = terms_[i].low + j * width;
      int32_t offset = 0;
      row[0] = compute::quantize_low_q8(f32_[i].data() + j * r, r, t.up_q8->r4, reinterpret_cast<int8_t*>(row + 2), &offset);
      std::memcpy(row + 1, &offset, 4);
    }
  }
}

void lora_terms_down(ThreadPool& pool, std::span<const TermDown> terms, const float* xs, int64_t n,
                     const std::vector<float>& seq_scales) {
  const TermsDown d(pool, terms, n, seq_scales);
  compute::matmul_many(pool, xs, n, d.targets());
  d.finish();
}

void lora_term_up(const LoraTerm& t, const float* low, float seq_scale, int64_t j0, int64_t j1, float* y) {
  const int64_t c0 = std::max(j0, t.row0), c1 = std::min(j1, t.row0 + t.rows());
  if (c0 >= c1) return;
  const float s = t.scale * seq_scale;
  if (t.kron) {
    const float* d = low + t.kron->src_row - t.row0;
    for (int64_t c = c0; c < c1; ++c) y[c] += s * d[c];
    return;
  }
  if (t.up_q8) {
    int32_t offset;
    std::memcpy(&offset, low + 1, 4);
    compute::lora_up_add_q8(*t.up_q8, reinterpret_cast<const int8_t*>(low + 2), offset, low[0], s, c0 - t.row0, c1 - t.row0,
                   y + c0);
  } else {
    compute::lora_up_add(t.bt, low, s, c0 - t.row0, c1 - t.row0, y + c0);
  }
  if (!t.dora) return;
  // y = f(σ) ⊙ (y + σ·u): the factors formed in the down pass (or here, if more scales than the
  // cache holds are in use at once).
  const DoraRows& d = *t.dora;
  if (auto f = cached_factors(d, s)) {
    const float* fr = f->data() - t.row0;
    for (int64_t c = c0; c < c1; ++c) y[c] *= fr[c];
  } else {
    for (int64_t c = c0; c < c1; ++c) y[c] *= dora_factor(d, static_cast<size_t>(c - t.row0), s);
  }
}

void prepare_lora_adapter(const LoraAdapter& a, const model::ModelWeights& weights, ThreadPool& pool) {
  for (const auto& [role, terms] : a.terms)
    for (const LoraTerm& t : terms) {
      if (!t.dora) continue;
      const model::Matrix* w = weights.matrix(role);
      if (!w) fail("DoRA term on ", model::describe(role), ", which this model has no matrix for");
      std::call_once(t.dora->once, [&] { fill_dora_rows(t, *w, pool); });
    }
}

}  // namespace graft::runtime
