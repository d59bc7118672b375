// Model families as data: what each supported architecture has, and the tensor names of a Llama-
// family checkpoint in Hugging Face layout. Inference code reads these tables; it never branches
// on the family name.
#pragma once
#include <string>
#include <vector>

#include "graft/model/config.h"

namespace graft::model {

struct FamilyTraits {
  const char* model_type;
  bool attention_bias;       // q/k/v projections carry biases
  bool qk_norm;              // per-head RMSNorm on q and k before RoPE
  bool default_tie;          // tie_word_embeddings when config.json omits it
  bool gguf_permuted_qk;     // llama.cpp's converter permutes q/k rows for this family's GGUF arch
  const char* gguf_arch;     // general.architecture in GGUF files
  // An embed_tokens adapter pair may be applied on a tied checkpoint (to the lookup and, through
  // the shared weight, to the head). True where the head is exactly the embedding read as a
  // linear layer (no embedding scaling or soft-capping that would make the two uses differ).
  bool tied_embedding_adapters;
};

// The table of supported families; lookup throws listing the supported names.
const std::vector<FamilyTraits>& families();
const FamilyTraits& family(const std::string& model_type);
const FamilyTraits& family_for_gguf_arch(const std::string& arch);

// The role of one weight in a decoder layer, with its Hugging Face name suffix.
enum class LayerTensor {
  AttnNorm, Q, K, V, O, QBias, KBias, VBias, QNorm, KNorm, MlpNorm, Gate, Up, Down,
};

struct LayerTensorSpec {
  LayerTensor role;
  const char* hf_suffix;   // after "model.layers.{i}."
  const char* gguf_suffix; // after "blk.{i}."
};

const std::vector<LayerTensorSpec>& layer_tensor_specs();
std::string hf_layer_tensor_name(int64_t layer, LayerTensor role);

// Expected shape of a layer tensor under a config; empty optional if the config has no such tensor.
bool layer_tensor_present(const ModelConfig& c, LayerTensor role);
std::vector<int64_t> layer_tensor_shape(const ModelConfig& c, LayerTensor role);

inline constexpr const char* kEmbedName = "model.embed_tokens.weight";
inline constexpr const char* kFinalNormName = "model.norm.weight";
inline constexpr const char* kLmHeadName = "lm_head.weight";

}  // namespace graft::model
