// Unfused adapters: each adapter stays a set of terms on the projections it targets, with its scale
// chosen per sequence at every forward pass (live, no reload):
//   * LoRA: y += s·(x·Aᵀ)·Bᵀ; factors keep their file dtype (F32/F16/BF16 widen exactly), or the
//     one --lora-dtype names (LoraDType below).
//   * LoHa: the same form with its exact rank-r1·r2 factors, A'[(k,l)] = w1b[k] ⊙ w2b[l] and
//     B'[o,(k,l)] = w1a[o,k]·w2a[o,l] (F32), since (w1a·w1b) ⊙ (w2a·w2b) = B'·A'.
//   * LoKr: y += s·vec(W1·X·W2ᵀ) with X the input row as [q, n] (the Kronecker identity), each factor
//     kept as stored (full, or its low-rank pair): never kron(W1, W2).
//   * DoRA: y = (m / n(σ)) ⊙ (y + σ·(x·Aᵀ)·Bᵀ) per output row, σ = s·(sequence scale), with
//     n(σ)² = ‖W_r‖² + 2σ⟨W_r, (BA)_r⟩ + σ²‖(BA)_r‖² from three per-row vectors computed once
//     from the weights the runtime uses (dequantized rows of a quantized base), so a scale change
//     costs O(rows). Several adapters on one projection compose in adapter order, as PEFT's forward
//     does: a DoRA term rescales everything before it (base and earlier terms), never the bias.
//
// An embed_tokens pair (ΔE = s·B·A, [vocab, hidden]) adds s·B[id]·A to the looked-up row, and when
// the head is tied it is also a term on the head: logits += s·(h·Aᵀ)·Bᵀ, the same function as
// fusing ΔE into the shared weight (mlx-lm's LoRAEmbedding.as_linear).
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graft/adapter/bind.h"
#include "graft/core/tensor.h"
#include "graft/model/config.h"
#include "graft/model/family.h"
#include "graft/model/model_adapters.h"
#include "graft/model/weights.h"
#include "graft/runtime/kernels.h"
#include "graft/core/thread_pool.h"

namespace graft::runtime {

// DoRA state of one term: the magnitude of its rows and the three per-row vectors of n(σ)², filled
// once (the first time the term runs, or by prepare_lora_adapter) from the projection's weight; and the
// factors f(σ) = m / n(σ) of the scales in use (a few, most recent first), so a scale that repeats
// from token to token costs nothing and a new one O(rows) once.
struct DoraRows {
  std::vector<float> magnitude;    // m, [rows]
  mutable std::once_flag once;
  mutable std::vector<double> w2;  // ‖W_r‖²
  mutable std::vector<double> wp;  // ⟨W_r, (B·A)_r⟩
  mutable std::vector<double> p2;  // ‖(B·A)_r‖²
  mutable std::mutex mu;
  mutable std::vector<std::pair<float, std::shared_ptr<const std::vector<float>>>> factors;
};

// LoKr factors in F32: W1 = w1 [p, q] or w1a [p, r1]·w1b [r1, q]; W2 = w2 [m, n] or w2a·w2b, kept
// transposed (w2t = W2ᵀ [n, m], w2bt = w2bᵀ [n, r2], w2at = w2aᵀ [r2, m]) so every product is a run
// of contiguous axpys; the term covers rows [src_row, src_row + rows) of ΔW = kron(W1, W2).
struct KronFactors {
  int64_t p = 0, q = 0, m = 0, n = 0, r1 = 0, r2 = 0;  // r = 0: that factor is full
  std::vector<float> w1, w1a, w1b, w2t, w2at, w2bt;
  int64_t src_row = 0, rows = 0;
};

// One term on output rows [row0, row0 + rows) of a projection.
struct LoraTerm {
  Tensor a;   // [r, in], as stored or in the LoraDType asked for
  Tensor b;   // [rows, r] (a row slice of the adapter's B when a fused projection was split), as stored
  Tensor bt;  // Bᵀ [r, rows] in B's dtype (F16 widened to F32) or the LoraDType: the up-projection
  int64_t row0 = 0;
  float scale = 1.0f;  // the adapter's own scale (alpha/r, mlx scale); the user's multiplies it
  std::shared_ptr<const DoraRows> dora;     // DoRA: set (a, b, bt as for LoRA)
  std::shared_ptr<const KronFactors> kron;  // LoKr: set instead of a, b, bt
  std::shared_ptr<const compute::UpQ8> up_q8;        // --lora-dtype q8_0: B in 8 bits, used instead of bt (then empty)
  // A as a matmul operand: a Q8_0 A also laid out for the integer kernels (as the model's matrices).
  model::Matrix down;

  int64_t rows() const { return kron ? kron->rows : up_q8 ? up_q8->rows : bt.shape[1]; }
  // Floats of the per-row intermediate kept between the down pass and the column epilogue: x·Aᵀ
  // [r] (F32), or with up_q8 that row rounded to 8 bits: its scale, its int32 offset, then r4 codes
  // packed into the floats that follow (quantize_low_q8).
  int64_t low_width() const { return kron ? kron->p * kron->m : up_q8 ? 2 + up_q8->r4 / 4 : a.shape[0]; }
  // The bytes of its factors the forward pass reads.
  int64_t factor_bytes() const;
};

struct LoraAdapter {
  std::string path;
  int64_t model_layers = 0;  // num_layers of the model it was built for
  // Terms by the tensor they sit on (model/family.h's roles): a layer's projections, the head
  // ({LmHead}), a sparse layer's router ({Router, layer}) and its experts' projections ({Gate, layer,
  // expert}, ...), and the embedding lookup ({Embed}: ΔE as B [vocab, r], A [r, hidden]; on a tied
  // checkpoint the same terms also sit on {LmHead}).
  std::map<model::TensorRole, std::vector<LoraTerm>> terms;
  int64_t term_count = 0;

  // The terms on a tensor; null where there are none.
  const std::vector<LoraTerm>* at(const model::TensorRole& r) const {
    auto it = terms.find(r);
    return it == terms.end() ? nullptr : &it->second;
  }
  // The bytes of all its factors (projections, embedding, experts).
  int64_t factor_bytes() const;
  // The bytes of factors one decode token reads: every projection's and router's terms, and of a
  // sparse layer's expert terms the share of `active` of `experts` (the chosen experts' terms; the
  // embedding's terms read one row of B, not counted).
  int64_t bytes_per_token(int64_t active, int64_t experts) const;
};

// One adapter a sequence runs with, at its scale (the user's; it multiplies each term's own). When
// sequences with different adapters share a pass, each row applies its adapters in `order` (the
// registry's id), so a row's arithmetic never depends on what else is in the batch.
struct ScaledAdapter {
  std::shared_ptr<const LoraAdapter> adapter;
  float scale = 0.0f;
  int64_t order = 0;
};

// How the factors of LoRA, DoRA and LoHa terms are stored and computed at run time (--lora-dtype;
// vLLM's option of that name). nullopt ("auto") keeps each factor as the file stores it (F32, F16 and
// BF16 widen exactly; a GGUF's block-quantized factors were dequantized to F32 when read), so the
// terms compute what PEFT, mlx-lm and LyCORIS compute. F32 widens every factor. BF16 rounds each
// factor to BF16 (half an F32 adapter's bytes; relative error 2⁻⁹ per factor element). Q8_0 (about a
// quarter of the F32 bytes) stores A [r, in] in GGUF Q8_0 blocks of 32 along its rows (ggml's
// quantizer: a `--outtype q8_0` file's own bytes) and runs x·Aᵀ on the integer kernels with x
// rounded to 8 bits per block of 32, as llama.cpp runs a q8_0 LoRA; B goes to 8 bits per output row
// (UpQ8) and each row of x·Aᵀ to 8 bits, for an exact int32 up-projection. `in` must then be a
// multiple of 32. LoKr factors and embedding terms always stay as stored.
using LoraDType = std::optional<DType>;
// "auto" | "f32" | "bf16" | "q8_0" (any case); anything else is a kBadRequest error naming `option`.
LoraDType parse_lora_dtype(std::string_view name, std::string_view option = "--lora-dtype");
std::string lora_dtype_name(LoraDType t);

// Binds `adapter` on its own (strength 1: the user scale is per sequence) against the model's
// bindings under the unfused rules. Nothing is built.
std::shared_ptr<adapter::WeightAdapterPlan> bind_lora_adapter(const model::ModelConfig& config,
                                                              const io::TensorSource& model_source,
                                                              const model::ModelBindings& bindings,
                                                              std::shared_ptr<const adapter::WeightAdapter> adapter);
// Refuses (kBadRequest or a plain Error naming every module) what the plan cannot run unfused:
// diff and replacement updates and biases (those fuse with --adapter), LoKr, LoHa and DoRA on the
// embedding, targets outside the projections, router and experts; with factor_dtype Q8_0, an A
// whose input width is not a multiple of 32. Reads no factor: what `Engine::check` runs.
void check_lora_plan(const adapter::WeightAdapterPlan& plan, const model::ModelBindings& bindings,
                     const std::string& path, LoraDType factor_dtype = std::nullopt);
// check_lora_plan, then builds the terms of one adapter from its plan.
std::shared_ptr<const LoraAdapter> make_lora_adapter(const adapter::WeightAdapterPlan& plan,
                                                     const model::ModelBindings& bindings,
                                                     const model::ModelConfig& config, const std::string& path,
                                                     LoraDType factor_dtype = std::nullopt);
// bind_lora_adapter, then make_lora_adapter.
std::shared_ptr<const LoraAdapter> build_lora_adapter(const model::ModelConfig& config,
                                                      const io::TensorSource& model_source,
                                                      const model::ModelBindings& bindings,
                                                      std::shared_ptr<const adapter::WeightAdapter> adapter,
                                                      LoraDType factor_dtype = std::nullopt);

// Fills every DoRA term's per-row vectors now (else the first forward pass that uses it does),
// from `weights` (the weights the Transformer runs: dequantized rows of quantized matrices).
void prepare_lora_adapter(const LoraAdapter& adapter, const model::ModelWeights& weights, ThreadPool& pool);

// ---- used by Transformer::project (one call per term, per forward pass) ----------------------------

// The per-row intermediate of `t` for n gathered input rows xs [n, in] into low [n, low_width()]:
// x·Aᵀ (LoRA, LoHa, DoRA) or vec(W1·X·W2ᵀ) over all of ΔW's rows (LoKr). For DoRA it first makes
// sure the per-row vectors exist (from `w`, the projection's weight).
// seq_scales: the sequence scale of each of the n rows (DoRA forms its factor for each distinct one).
void lora_term_down(ThreadPool& pool, const LoraTerm& t, const float* xs, int64_t n, int64_t in,
                    const model::Matrix& w, float* low, const std::vector<float>& seq_scales);
// The same for several LoRA/LoHa/DoRA terms (no LoKr) on the same rows xs [n, in]: their A factors
// run as one matmul_many (one activation quantization, one parallel pass over all their rows).
// Each result equals lora_term_down's for that term alone.
struct TermDown {
  const LoraTerm* term;
  const model::Matrix* w;  // its projection's weight (DoRA)
  float* low;              // [n, low_width()]
};
void lora_terms_down(ThreadPool& pool, std::span<const TermDown> terms, const float* xs, int64_t n,
                     const std::vector<float>& seq_scales);
// lora_terms_down in parts, so the projection's own matmul_many can run the down passes as its
// `first` targets (same x, same dispatch): the constructor does the per-call preparation (DoRA
// state, buffers), targets() are the A products, finish() what must follow them (8-bit rounding).
// With `xs`, the targets carry it as their own input (MatmulTarget::x, n rows); else they read the
// matmul_many's x.
class TermsDown {
 public:
  TermsDown(ThreadPool& pool, std::span<const TermDown> terms, int64_t n, const std::vector<float>& seq_scales,
            const float* xs = nullptr);
  std::span<const compute::MatmulTarget> targets() const { return targets_; }
  void finish() const;

 private:
  std::vector<TermDown> terms_;
  int64_t n_;
  std::vector<std::vector<float>> f32_;  // x·Aᵀ of the 8-bit terms, before rounding
  std::vector<model::Matrix> plain_;     // A of a term built without `down`
  std::vector<compute::MatmulTarget> targets_;
};
// Applies the term to output columns [j0, j1) of one row y (the whole row, `out` wide): LoRA/LoHa
// y += σ·(low·Bᵀ), LoKr y += σ·low[src rows], DoRA y = f(σ) ⊙ (y + σ·(low·Bᵀ)); σ = t.scale·seq_scale.
void lora_term_up(const LoraTerm& t, const float* low, float seq_scale, int64_t j0, int64_t j1, float* y);

}  // namespace graft::runtime
