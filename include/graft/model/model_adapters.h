// Binding adapters to a loaded model's tensors, with the model-level rules the adapter core cannot
// know: the tied embedding/head pair and quantized weights.
//
// Tied checkpoints (tie_word_embeddings): an embed_tokens pair applies to the lookup and, through
// the shared weight, to the head; it is allowed where the family says the head is the embedding
// read as a linear layer (FamilyTraits::tied_embedding_adapters). An lm_head pair on a tied
// checkpoint is refused on every path: it would have to change the embedding too. Untied
// checkpoints take both (each on its own tensor).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "graft/adapter/bind.h"
#include "graft/io/tensor_source.h"
#include "graft/model/config.h"
#include "graft/model/family.h"

namespace graft::model {

enum class AdapterPath { Fused, Unfused };

// A model's adapter bindings, made once per model: every name an adapter may give a tensor
// (bindings_for_model) and the role of each tensor the model reads (tensor_roles), so what binds an
// adapter never rebuilds them and what applies it never parses a tensor name back.
struct ModelBindings {
  adapter::WeightAdapterBindings aliases;
  std::map<std::string, TensorRole> roles;
  // The role of a model tensor; null for a name the model does not read.
  const TensorRole* role(const std::string& tensor) const {
    auto it = roles.find(tensor);
    return it == roles.end() ? nullptr : &it->second;
  }
};
std::shared_ptr<const ModelBindings> model_bindings(const ModelConfig& config, const io::TensorSource& source);

// The model's bindings (model_adapter_bindings) plus, on a tied checkpoint without a stored
// lm_head, an `lm_head` binding of the embedding's shape so an lm_head pair resolves and is
// refused by name instead of reading as "no matching weight", plus llama.cpp's GGUF tensor names.
adapter::WeightAdapterBindings bindings_for_model(const ModelConfig& config, const io::TensorSource& source);

// Throws (listing every offending adapter module) if the tied-head rules above are broken.
void check_tied_head_rules(const ModelConfig& config, const FamilyTraits& family,
                           const std::vector<adapter::AdapterUse>& adapters,
                           const adapter::WeightAdapterBindings& bindings, AdapterPath path);

// check_tied_head_rules, then bind_weight_adapter against the model's bindings. Nothing is read
// or changed. GGUF adapters are first checked and put in this model's row order
// (gguf_adapters_for_model); the plan holds those copies, so use plan->adapters, not `adapters`. Fusing into a quantized checkpoint's quantized weight is refused here too (naming
// the tensors), unless allow_requantize.
std::shared_ptr<adapter::WeightAdapterPlan> bind_model_adapters(const ModelConfig& config,
                                                                const io::TensorSource& source,
                                                                const std::vector<adapter::AdapterUse>& adapters,
                                                                AdapterPath path,
                                                                const std::vector<std::string>& quantized_weights = {},
                                                                bool allow_requantize = false);
// The same against bindings already made for this model (model_bindings).
std::shared_ptr<adapter::WeightAdapterPlan> bind_model_adapters(const ModelConfig& config,
                                                                const io::TensorSource& source,
                                                                const ModelBindings& bindings,
                                                                const std::vector<adapter::AdapterUse>& adapters,
                                                                AdapterPath path,
                                                                const std::vector<std::string>& quantized_weights = {},
                                                                bool allow_requantize = false);

}  // namespace graft::model
