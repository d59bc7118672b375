#include "graft/model/family.h"

#include "graft/core/error.h"

namespace graft::model {

const std::vector<FamilyTraits>& families() {
  static const std::vector<FamilyTraits> kFamilies = {
      {.model_type = "llama", .attention_bias = false, .qk_norm = false, .default_tie = false,
       .gguf_permuted_qk = true, .gguf_arch = "llama", .tied_embedding_adapters = true},
      {.model_type = "mistral", .attention_bias = false, .qk_norm = false, .default_tie = false,
       .gguf_permuted_qk = true, .gguf_arch = "llama", .tied_embedding_adapters = true,
       .sliding_all_layers = true},
      {.model_type = "qwen2", .attention_bias = true, .qk_norm = false, .default_tie = false,
       .gguf_permuted_qk = false, .gguf_arch = "qwen2", .tied_embedding_adapters = true},
      {.model_type = "qwen3", .attention_bias = false, .qk_norm = true, .default_tie = true,
       .gguf_permuted_qk = false, .gguf_arch = "qwen3", .tied_embedding_adapters = true},
      // Gemma 2: GeGLU, (1 + w) norms around attention and MLP, sqrt(hidden)-scaled embeddings,
      // soft-capped attention scores and logits, sliding-window layers alternating with global ones
      // (layer 0 local). The scaled lookup and capped head differ, so no tied-embedding adapters.
      {.model_type = "gemma2", .attention_bias = false, .qk_norm = false, .default_tie = true,
       .gguf_permuted_qk = false, .gguf_arch = "gemma2", .tied_embedding_adapters = false,
       .default_activation = Activation::GeluTanh, .norm_plus_one = true, .scale_embeddings = true,
       .sandwich_norms = true, .global_every = 2, .softcapping = true, .query_pre_attn_scalar = true},
      // Gemma 3 (text, Gemma3ForCausalLM): Gemma 2's layout plus q/k norms, five local layers per
      // global one, the local layers on their own RoPE base.
      {.model_type = "gemma3_text", .attention_bias = false, .qk_norm = true, .default_tie = true,
       .gguf_permuted_qk = false, .gguf_arch = "gemma3", .tied_embedding_adapters = false,
       .default_activation = Activation::GeluTanh, .norm_plus_one = true, .scale_embeddings = true,
       .sandwich_norms = true, .global_every = 6, .softcapping = true, .query_pre_attn_scalar = true,
       .local_rope_base = true},
      // Phi-3 (Phi3ForCausalLM; Phi-4 too): Llama's math on fused qkv_proj and gate_up_proj
      // (split by rows at load), an optional partial rotary factor, sliding_window on every layer.
      // llama.cpp's phi3 GGUF keeps the fusion (attn_qkv, ffn_up = gate and up) and disables the
      // sliding window (its load_arch_hparams), so a GGUF file is read without one.
      {.model_type = "phi3", .attention_bias = false, .qk_norm = false, .default_tie = false,
       .gguf_permuted_qk = false, .gguf_arch = "phi3", .tied_embedding_adapters = true,
       .sliding_all_layers = true, .fused_projections = true, .partial_rotary = true,
       .gguf_sliding_window = false},
      // Qwen3-MoE (Qwen3MoeForCausalLM, Qwen3-30B-A3B): Qwen3's attention; sparse layers route each
      // token to num_experts_per_tok of num_experts SwiGLU experts (softmax over all, top-k, then
      // renormalized when norm_topk_prob); decoder_sparse_step / mlp_only_layers leave some layers dense.
      {.model_type = "qwen3_moe", .attention_bias = false, .qk_norm = true, .default_tie = false,
       .gguf_permuted_qk = false, .gguf_arch = "qwen3moe", .tied_embedding_adapters = true,
       .moe = {.block = "mlp", .gate = "gate_proj", .up = "up_proj", .down = "down_proj",
               .experts_key = "num_experts", .experts_key_v5 = "num_local_experts", .expert_width_key = "moe_intermediate_size",
               .reads_norm_topk_prob = true, .sparse_layer_pattern = true,
               .v5_block = "mlp", .v5_gate_up = "gate_up_proj", .v5_down = "down_proj", .mlx_switch = "mlp.switch_mlp"}},
      // Mixtral (MixtralForCausalLM): Mistral's attention, every layer sparse (block_sparse_moe,
      // experts w1 = gate, w3 = up, w2 = down), the top-k router weights always renormalized.
      // llama.cpp writes it as GGUF arch `llama` with llama.expert_count.
      {.model_type = "mixtral", .attention_bias = false, .qk_norm = false, .default_tie = false,
       .gguf_permuted_qk = true, .gguf_arch = "llama", .tied_embedding_adapters = true,
       .sliding_all_layers = true,
       .moe = {.block = "block_sparse_moe", .gate = "w1", .up = "w3", .down = "w2",
               .experts_key = "num_local_experts", .expert_width_key = "intermediate_size",
               .v5_block = "mlp", .v5_gate_up = "gate_up_proj", .v5_down = "down_proj",
               .mlx_switch = "block_sparse_moe.switch_mlp"}},
  };
  return kFamilies;
}

namespace {
std::string supported_list() {
  std::string s;
  for (const auto& f : families()) s += std::string(s.empty() ? "" : ", ") + f.model_type;
  return s;
}
}  // namespace

const FamilyTraits& family(const std::string& model_type) {
  for (const auto& f : families())
    if (model_type == f.model_type) return f;
  fail_as(ErrorKind::kUnsupported, "model_type '", model_type, "' is not supported (supported: ", supported_list(), ")");
}

const FamilyTraits& family_for_gguf_arch(const std::string& arch, bool experts) {
  for (const auto& f : families())
    if (arch == f.gguf_arch && f.moe.present() == experts) return f;
  for (const auto& f : families())
    if (arch == f.gguf_arch)
      fail_as(ErrorKind::kUnsupported, "GGUF architecture '", arch, "' ", experts ? "with" : "without", " ", arch,
              ".expert_count is not supported (graft's ", arch, " rows are ", f.moe.present() ? "" : "not ",
              "mixture-of-experts)");
  std::string archs;
  for (const auto& f : families())
    if (archs.find(f.gguf_arch) == std::string::npos) archs += std::string(archs.empty() ? "" : ", ") + f.gguf_arch;
  fail_as(ErrorKind::kUnsupported, "GGUF architecture '", arch, "' is not supported (supported: ", archs, ")");
}

const std::vector<LayerTensorSpec>& layer_tensor_specs() {
  static const std::vector<LayerTensorSpec> kSpecs = {
      {LayerTensor::AttnNorm, "input_layernorm.weight", "attn_norm.weight"},
      {LayerTensor::Q, "self_attn.q_proj.weight", "attn_q.weight"},
      {LayerTensor::K, "self_attn.k_proj.weight", "attn_k.weight"},
      {LayerTensor::V, "self_attn.v_proj.weight", "attn_v.weight"},
      {LayerTensor::O, "self_attn.o_proj.weight", "attn_output.weight"},
      {LayerTensor::QBias, "self_attn.q_proj.bias", "attn_q.bias"},
      {LayerTensor::KBias, "self_attn.k_proj.bias", "attn_k.bias"},
      {LayerTensor::VBias, "self_attn.v_proj.bias", "attn_v.bias"},
      {LayerTensor::QNorm, "self_attn.q_norm.weight", "attn_q_norm.weight"},
      {LayerTensor::KNorm, "self_attn.k_norm.weight", "attn_k_norm.weight"},
      {LayerTensor::MlpNorm, "post_attention_layernorm.weight", "ffn_norm.weight"},
      {LayerTensor::Gate, "mlp.gate_proj.weight", "ffn_gate.weight"},
      {LayerTensor::Up, "mlp.up_proj.weight", "ffn_up.weight"},
      {LayerTensor::Down, "mlp.down_proj.weight", "ffn_down.weight"},
  };
  return kSpecs;
}

// Gemma's sandwich layout: post_attention_layernorm is the norm *after* attention, and the MLP's
// pre-norm is pre_feedforward_layernorm (llama.cpp: post_attention_norm, ffn_norm, post_ffw_norm).
const std::vector<LayerTensorSpec>& sandwich_layer_tensor_specs() {
  static const std::vector<LayerTensorSpec> kSpecs = [] {
    std::vector<LayerTensorSpec> s;
    for (const auto& spec : layer_tensor_specs())
      if (spec.role != LayerTensor::MlpNorm) s.push_back(spec);
    s.push_back({LayerTensor::AttnPostNorm, "post_attention_layernorm.weight", "post_attention_norm.weight"});
    s.push_back({LayerTensor::MlpNorm, "pre_feedforward_layernorm.weight", "ffn_norm.weight"});
    s.push_back({LayerTensor::MlpPostNorm, "post_feedforward_layernorm.weight", "post_ffw_norm.weight"});
    return s;
  }();
  return kSpecs;
}

// Fused layout: the parts keep their Hugging Face names (what the split source exposes) but have no
// GGUF names of their own (llama.cpp's ffn_up is the fused gate_up there, not the up projection).
const std::vector<LayerTensorSpec>& fused_layer_tensor_specs() {
  static const std::vector<LayerTensorSpec> kSpecs = [] {
    std::vector<LayerTensorSpec> s = layer_tensor_specs();
    for (auto& spec : s)
      for (const auto& f : fused_projection_specs())
        for (LayerTensor r : f.parts)
          if (spec.role == r) spec.gguf_suffix = "";
    return s;
  }();
  return kSpecs;
}

const std::vector<LayerTensorSpec>& layer_tensor_specs(const ModelConfig& c) {
  if (c.fused_projections) return fused_layer_tensor_specs();
  return c.sandwich_norms ? sandwich_layer_tensor_specs() : layer_tensor_specs();
}

const std::vector<FusedProjectionSpec>& fused_projection_specs() {
  static const std::vector<FusedProjectionSpec> kFused = {
      {"self_attn.qkv_proj.weight", "attn_qkv.weight", {LayerTensor::Q, LayerTensor::K, LayerTensor::V}},
      {"mlp.gate_up_proj.weight", "ffn_up.weight", {LayerTensor::Gate, LayerTensor::Up}},
  };
  return kFused;
}

std::string hf_fused_tensor_name(int64_t layer, const FusedProjectionSpec& spec) {
  return "model.layers." + std::to_string(layer) + "." + spec.hf_suffix;
}

namespace {
std::string layer_name(const std::vector<LayerTensorSpec>& specs, int64_t layer, LayerTensor role) {
  for (const auto& s : specs)
    if (s.role == role) return "model.layers." + std::to_string(layer) + "." + s.hf_suffix;
  fail("unknown layer tensor role");
}
}  // namespace

std::string hf_layer_tensor_name(int64_t layer, LayerTensor role) { return layer_name(layer_tensor_specs(), layer, role); }
std::string hf_layer_tensor_name(const ModelConfig& c, int64_t layer, LayerTensor role) {
  return layer_name(layer_tensor_specs(c), layer, role);
}

bool layer_tensor_present(const ModelConfig& c, LayerTensor role) {
  switch (role) {
    case LayerTensor::QBias: case LayerTensor::KBias: case LayerTensor::VBias: return c.attention_bias;
    case LayerTensor::QNorm: case LayerTensor::KNorm: return c.qk_norm;
    case LayerTensor::AttnPostNorm: case LayerTensor::MlpPostNorm: return c.sandwich_norms;
    default: return true;
  }
}

std::string hf_expert_tensor_name(const ModelConfig& c, int64_t layer, int64_t expert, ExpertTensor role) {
  const MoeLayout& m = family(c.model_type).moe;
  const char* name = role == ExpertTensor::Gate ? m.gate : role == ExpertTensor::Up ? m.up : m.down;
  return "model.layers." + std::to_string(layer) + "." + m.block + ".experts." + std::to_string(expert) + "." + name +
         ".weight";
}

std::string hf_router_tensor_name(const ModelConfig& c, int64_t layer) {
  return "model.layers." + std::to_string(layer) + "." + family(c.model_type).moe.block + ".gate.weight";
}

std::vector<int64_t> expert_tensor_shape(const ModelConfig& c, ExpertTensor role) {
  const int64_t h = c.hidden_size, f = c.moe_intermediate_size;
  return role == ExpertTensor::Down ? std::vector<int64_t>{h, f} : std::vector<int64_t>{f, h};
}

std::vector<int64_t> layer_tensor_shape(const ModelConfig& c, LayerTensor role) {
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  switch (role) {
    case LayerTensor::AttnNorm: case LayerTensor::MlpNorm: case LayerTensor::AttnPostNorm:
    case LayerTensor::MlpPostNorm: return {h};
    case LayerTensor::Q: return {c.q_dim(), h};
    case LayerTensor::K: case LayerTensor::V: return {c.kv_dim(), h};
    case LayerTensor::O: return {h, c.q_dim()};
    case LayerTensor::QBias: return {c.q_dim()};
    case LayerTensor::KBias: case LayerTensor::VBias: return {c.kv_dim()};
    case LayerTensor::QNorm: case LayerTensor::KNorm: return {c.head_dim};
    case LayerTensor::Gate: case LayerTensor::Up: return {f, h};
    case LayerTensor::Down: return {h, f};
  }
  return {};
}

}  // namespace graft::model
