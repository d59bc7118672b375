// Model families as data: what each supported architecture has, and the tensor names of a Llama-
// family checkpoint in Hugging Face layout. Inference code reads these tables; it never branches
// on the family name.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "graft/model/config.h"

namespace graft::model {

// A mixture-of-experts family's tensor names and config.json fields (nullptr names: not MoE).
// Hugging Face checkpoints store the router as <block>.gate.weight and each expert's SwiGLU as
// <block>.experts.<e>.<gate|up|down>.weight (Qwen3-MoE: mlp, gate_proj/up_proj/down_proj;
// Mixtral: block_sparse_moe, w1/w3/w2).
struct MoeLayout {
  const char* block = nullptr;        // "mlp" | "block_sparse_moe"
  const char* gate = nullptr;         // the expert's gate projection name
  const char* up = nullptr;
  const char* down = nullptr;
  const char* experts_key = nullptr;  // config.json's expert count: num_experts | num_local_experts
  // The same count under the name transformers 5 writes (Qwen3-MoE: num_local_experts), or nullptr.
  const char* experts_key_v5 = nullptr;
  // config.json's expert width: moe_intermediate_size (Qwen3-MoE; intermediate_size is then the
  // dense layers' width) or intermediate_size itself (Mixtral).
  const char* expert_width_key = nullptr;
  // Router weights renormalized over the chosen experts: read from norm_topk_prob (Qwen3-MoE) or
  // always (Mixtral: softmax, top-k, divide by their sum).
  bool reads_norm_topk_prob = false;
  // decoder_sparse_step / mlp_only_layers choose which layers are sparse (Qwen3-MoE); else every one.
  bool sparse_layer_pattern = false;
  // transformers 5 holds the experts as 3-D parameters under <v5_block>.experts: v5_gate_up
  // [E, 2 * width, hidden] (gate rows, then up) and v5_down [E, hidden, width]. PEFT
  // target_parameters adapters name them; nullptr: no such layout.
  const char* v5_block = nullptr;
  const char* v5_gate_up = nullptr;
  const char* v5_down = nullptr;
  // mlx-lm's SwitchGLU of the block (<switch>.gate_proj/.up_proj/.down_proj, stacked [E, out, in]),
  // which its LoRASwitchLinear adapters name; nullptr: none.
  const char* mlx_switch = nullptr;
  bool present() const { return block != nullptr; }
};

// How a family's decoder layers are laid out and computed. Every field names one operation of the
// forward pass (runtime/transformer.cpp reads the resulting ModelConfig, never the family name).
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
  // The MLP's GLU nonlinearity when config.json names none (GGUF files never name one).
  Activation default_activation = Activation::Silu;
  // Gemma: RMSNorm multiplies by (1 + w) and Hugging Face checkpoints store w (llama.cpp's
  // converter stores 1 + w, so GGUF files need no offset).
  bool norm_plus_one = false;
  bool scale_embeddings = false;  // embedding rows multiplied by sqrt(hidden_size)
  // Norms after attention and after the MLP as well as before them (Gemma 2/3 "sandwich" layout;
  // the MLP's pre-norm is then pre_feedforward_layernorm, not post_attention_layernorm).
  bool sandwich_norms = false;
  // Layers alternate between sliding-window (local) and full (global) attention: every
  // `global_every`-th layer is global when config.json has no layer_types (0: no alternation).
  int global_every = 0;
  bool sliding_all_layers = false;  // sliding_window (when set) applies to every layer (Mistral, Phi-3)
  // config.json fields this family reads (elsewhere they are refused as math it does not have).
  bool softcapping = false;           // attn_logit_softcapping, final_logit_softcapping
  bool query_pre_attn_scalar = false; // attention scale 1/sqrt(query_pre_attn_scalar)
  bool local_rope_base = false;       // rope_local_base_freq for the sliding layers
  // Phi-3: q/k/v stored as one qkv_proj and gate/up as one gate_up_proj (split by rows at load).
  bool fused_projections = false;
  bool partial_rotary = false;        // partial_rotary_factor < 1 is implemented
  // llama.cpp reads GGUF attention.sliding_window for this arch (false for phi3: its loader sets
  // the window to 0 whatever the file says, so a GGUF file runs full attention as llama.cpp does).
  bool gguf_sliding_window = true;
  MoeLayout moe = {};
};

// The table of supported families; lookup throws listing the supported names.
const std::vector<FamilyTraits>& families();
const FamilyTraits& family(const std::string& model_type);
// The row of a GGUF architecture; several rows share an arch where only expert_count tells them
// apart (llama.cpp writes Mixtral as `llama` with llama.expert_count): `experts` picks the MoE row.
const FamilyTraits& family_for_gguf_arch(const std::string& arch, bool experts = false);

// What a weight is to the forward pass: one name for every tensor a decoder reads, from the file's
// tensor table to the runtime's adapter terms. A layer's tensors; a sparse layer's router and its
// experts' Gate/Up/Down; the model-level embedding, final norm and head.
enum class Role {
  AttnNorm, Q, K, V, O, QBias, KBias, VBias, QNorm, KNorm, MlpNorm, Gate, Up, Down,
  AttnPostNorm, MlpPostNorm,  // sandwich_norms only
  Router,                     // a sparse layer's expert router
  Embed, FinalNorm, LmHead,   // model-level (layer -1)
};
const char* role_name(Role r);

// One tensor's place in the model: its role, its layer (-1 for the model-level ones) and, for an
// expert's Gate/Up/Down, the expert (else -1).
struct TensorRole {
  Role role = Role::Embed;
  int64_t layer = -1;
  int64_t expert = -1;
  auto operator<=>(const TensorRole&) const = default;
};
// "layer 3 q", "lm_head", "layer 1 expert 5 gate", for messages.
std::string describe(const TensorRole& r);

// Every tensor the config calls for, by its Hugging Face name (the names adapters bind to), in
// load order: embedding, final norm, head (untied checkpoints only: a tied head is the embedding's
// tensor), then each layer's. The one table the loader checks a checkpoint against and adapter
// bindings take their roles from.
std::vector<std::pair<std::string, TensorRole>> tensor_roles(const ModelConfig& c);
// The shape the config gives a tensor of this role.
std::vector<int64_t> tensor_shape(const ModelConfig& c, const TensorRole& r);

struct LayerTensorSpec {
  Role role;
  const char* hf_suffix;   // after "model.layers.{i}."
  const char* gguf_suffix; // after "blk.{i}."
};

// A projection some families store fused: the rows of the parts, concatenated in this order
// (Phi-3: qkv_proj = q, k, v; gate_up_proj = gate, up). Loading splits it by rows into the Llama
// names, writing (`graft fuse`) joins the parts again.
struct FusedProjectionSpec {
  const char* hf_suffix;    // after "model.layers.{i}."
  const char* gguf_suffix;  // after "blk.{i}." (llama.cpp's phi3: attn_qkv, ffn_up holding gate and up)
  std::vector<Role> parts;
};
const std::vector<FusedProjectionSpec>& fused_projection_specs();
std::string hf_fused_tensor_name(int64_t layer, const FusedProjectionSpec& spec);

// The Llama layout (every family's projections have these names); the config's own layout (norm
// names differ under sandwich_norms; a fused_projections config has no GGUF names of its own for
// the parts, gguf_suffix "") through the overloads taking a config.
const std::vector<LayerTensorSpec>& layer_tensor_specs();
const std::vector<LayerTensorSpec>& layer_tensor_specs(const ModelConfig& c);
std::string hf_layer_tensor_name(int64_t layer, Role role);
std::string hf_layer_tensor_name(const ModelConfig& c, int64_t layer, Role role);

// Expected shape of a layer tensor under a config; empty optional if the config has no such tensor.
bool layer_tensor_present(const ModelConfig& c, Role role);
std::vector<int64_t> layer_tensor_shape(const ModelConfig& c, Role role);

// The three matrices of one expert's SwiGLU (role Gate, Up or Down), and the router.
// "model.layers.{layer}.<block>.experts.{expert}.<name>.weight" / "model.layers.{layer}.<block>.gate.weight".
std::string hf_expert_tensor_name(const ModelConfig& c, int64_t layer, int64_t expert, Role role);
std::string hf_router_tensor_name(const ModelConfig& c, int64_t layer);
std::vector<int64_t> expert_tensor_shape(const ModelConfig& c, Role role);

inline constexpr const char* kEmbedName = "model.embed_tokens.weight";
inline constexpr const char* kFinalNormName = "model.norm.weight";
inline constexpr const char* kLmHeadName = "lm_head.weight";

}  // namespace graft::model
