// ModelConfig: the hyperparameters of a Llama-family decoder, normalized from config.json or GGUF
// metadata. Any field that would change the math and that graft does not implement is refused at
// parse time, naming it and listing what is supported.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace graft::model {

enum class RopeScalingType { None, Linear, Llama3 };

// The MLP's GLU nonlinearity: silu (Llama) or gelu with the tanh approximation (Gemma's
// gelu_pytorch_tanh).
enum class Activation { Silu, GeluTanh };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::None;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 8192;  // llama3
};

// mlx-lm affine quantization of a module: bits 4 | 8, group size 32 | 64 | 128.
struct QuantSpec {
  int bits = 0;
  int group_size = 0;
  bool operator==(const QuantSpec&) const = default;
};

// config.json's "quantization" block (mirrored as "quantization_config" by mlx-lm): a default and
// per-module overrides keyed by module path ("model.layers.0.mlp.down_proj"), where nullopt
// means "left unquantized" (false in the file). Whether a module *is* quantized is decided by its
// `.scales` tensor existing, as mlx-lm does; the spec says how.
struct QuantizationConfig {
  QuantSpec default_spec;
  std::map<std::string, std::optional<QuantSpec>> overrides;
  // The spec for a module path (the override if any, else the default); nullopt if overridden off.
  std::optional<QuantSpec> spec_for(const std::string& module) const;
};

struct ModelConfig {
  std::string model_type;  // a row of model/family.h's table
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  std::vector<float> rope_freq_divisors;  // GGUF rope_freqs: per-frequency divisors, else empty
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (qwen2 always; llama when attention_bias: true)
  bool qk_norm = false;         // per-head RMSNorm on q and k (qwen3)
  std::optional<int64_t> sliding_window;  // mistral: attend to at most this many past positions
  std::vector<int32_t> eos_token_ids;      // from config/generation_config (may be several)
  std::optional<int32_t> bos_token_id;
  // GGUF <arch>.pooling_type when the file declares one (llama.cpp's numbering: 0 none, 1 mean,
  // 2 cls, 3 last, 4 rank): the default pooling of graft serve --embeddings.
  std::optional<int64_t> pooling_type;
  std::optional<QuantizationConfig> quantization;  // mlx-lm quantized checkpoint

  // Operations beyond Llama's, set from the family row and config.json (or GGUF metadata).
  Activation activation = Activation::Silu;
  float norm_weight_offset = 0.0f;  // added to every RMSNorm weight at load (1 for Gemma's HF (1 + w))
  bool scale_embeddings = false;    // embedding rows times sqrt(hidden_size) (Gemma)
  bool sandwich_norms = false;      // norms after attention and MLP too (Gemma 2/3)
  std::optional<double> attn_logit_softcap;   // scores = cap * tanh(scores / cap) before the softmax
  std::optional<double> final_logit_softcap;  // logits = cap * tanh(logits / cap)
  std::optional<double> query_pre_attn_scalar;  // attention scale 1/sqrt(this) instead of 1/sqrt(head_dim)
  // Per layer: true where the layer attends through sliding_window. Empty: every layer does when
  // sliding_window is set (Mistral, Phi-3).
  std::vector<bool> sliding_layers;
  std::optional<double> rope_local_theta;  // Gemma 3: the sliding layers' RoPE base (no scaling)
  int64_t rotary_dim = 0;                  // dims of each head RoPE rotates (0: all; Phi-3 partial)
  // Phi-3: the checkpoint stores qkv_proj and gate_up_proj; the weights are read split by rows
  // (model/fused_projections.h), so the forward pass sees Llama's q, k, v, gate, up.
  bool fused_projections = false;
  // Mixture of experts (Qwen3-MoE, Mixtral): num_experts > 0. A sparse layer's MLP is a router
  // (gate [num_experts, hidden]) choosing num_experts_per_tok experts per token, each a SwiGLU MLP
  // of width moe_intermediate_size; the token's output is their sum weighted by the router's
  // softmax over all experts taken at the chosen ones, renormalized over them when norm_topk_prob.
  // Dense layers (Qwen3-MoE's mlp_only_layers) keep the intermediate_size MLP.
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  std::vector<bool> sparse_layers;  // per layer, when num_experts > 0: true where the MLP is the experts

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
  int64_t rope_dims() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  bool layer_slides(int64_t layer) const {
    if (!sliding_window) return false;
    return sliding_layers.empty() || sliding_layers[static_cast<size_t>(layer)];
  }
  bool layer_is_sparse(int64_t layer) const {
    return num_experts > 0 && sparse_layers[static_cast<size_t>(layer)];
  }
  float attention_scale() const;
};

// Parses a Hugging Face config.json object; `path` names the file in errors.
ModelConfig parse_hf_config(const nlohmann::json& j, const std::string& path);

// Range checks every field once, where a config is read (config.json or GGUF metadata), before
// anything is computed or allocated from it: positive dims and head counts that divide as the
// architecture requires, finite positive rope_theta / rms_norm_eps / scaling factors, a positive
// sliding window, token ids inside the vocabulary. `where` names the file in errors.
void validate_config(const ModelConfig& c, const std::string& where);

// RoPE inverse frequencies (rope_dims / 2 of them) after scaling, as transformers computes them.
// local: the sliding layers' table where rope_local_theta is set (unscaled, that base).
std::vector<float> rope_inv_freq(const ModelConfig& c, bool local = false);

}  // namespace graft::model
