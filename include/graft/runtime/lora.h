// Unfused adapters: each adapter stays a set of low-rank terms y += s·(x·Aᵀ)·Bᵀ on the projections
// it targets, with its scale chosen per sequence at every forward pass (live, no reload). The
// factors keep their file dtype (F32/F16/BF16 widen exactly, so the term is what the file says).
//
// An embed_tokens pair (ΔE = s·B·A, [vocab, hidden]) adds s·B[id]·A to the looked-up row, and when
// the head is tied it is also a term on the head: logits += s·(h·Aᵀ)·Bᵀ, the same function as
// fusing ΔE into the shared weight (mlx-lm's LoRAEmbedding.as_linear).
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "graft/adapter/bind.h"
#include "graft/core/tensor.h"
#include "graft/model/config.h"

namespace graft::runtime {

// Which projection a linear layer is; the unit adapter terms attach to.
enum class Projection { Q, K, V, O, Gate, Up, Down, LmHead };
inline constexpr int kProjections = 8;

// One low-rank term on output rows [row0, row0 + B.rows) of a projection.
struct LoraTerm {
  Tensor a;   // [r, in]
  Tensor b;   // [rows, r] (a row slice of the adapter's B when a fused projection was split)
  Tensor bt;  // Bᵀ [r, rows] in B's dtype (F16 widened to F32): the up-projection as r axpys
  int64_t row0 = 0;
  float scale = 1.0f;  // the adapter's own scale (alpha/r, mlx scale); the user's multiplies it
};

struct LoraAdapter {
  std::string path;
  // terms[layer][projection]; the head's terms sit at layers.back() + 1 (index num_layers).
  std::vector<std::array<std::vector<LoraTerm>, kProjections>> terms;
  std::vector<LoraTerm> embed;  // on the input lookup ([vocab, hidden] ΔE as B [vocab, r], A [r, hidden])
  int64_t term_count = 0;

  const std::vector<LoraTerm>& at(int64_t layer, Projection p) const {
    return terms[static_cast<size_t>(layer)][static_cast<size_t>(p)];
  }
};

// The adapters a Transformer can apply; a sequence chooses a scale for each (by index).
struct LoraSet {
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  size_t size() const { return adapters.size(); }
};

// Builds the unfused terms of one adapter from its bind plan (bound with strength 1 against the
// model's bindings). Refuses, naming the module, what cannot be a low-rank term: LoKr, diff and
// replacement updates and biases (those fuse with --adapter), and targets outside the projections.
std::shared_ptr<const LoraAdapter> make_lora_adapter(const adapter::WeightAdapterPlan& plan,
                                                     const model::ModelConfig& config, const std::string& path);

// Binds each adapter on its own (strength 1: the user scale is per sequence) against the model's
// bindings under the unfused rules and builds its terms. The AdapterUse strengths are not applied
// here; callers use them as the initial scales.
std::shared_ptr<const LoraSet> make_lora_set(const model::ModelConfig& config, const io::TensorSource& model_source,
                                             const std::vector<adapter::AdapterUse>& adapters);

}  // namespace graft::runtime
