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
      {Role::AttnNorm, "input_layernorm.weight", "attn_norm.weight"},
      {Role::Q, "self_attn.q_proj.weight", "attn_q.weight"},
      {Role::K, "self_attn.k_proj.weight", "attn_k.weight"},
      {Role::V, "self_attn.v_proj.weight", "attn_v.weight"},
      {Role::O, "self_attn.o_proj.weight", "attn_output.weight"},
      {Role::QBias, "self_attn.q_proj.bias", "attn_q.bias"},
      {Role::KBias, "self_attn.k_proj.bias", "attn_k.bias"},
      {Role::VBias, "self_attn.v_proj.bias", "attn_v.bias"},
      {Role::QNorm, "self_attn.q_norm.weight", "attn_q_norm.weight"},
      {Role::KNorm, "self_attn.k_norm.weight", "attn_k_norm.weight"},
      {Role::MlpNorm, "post_attention_layernorm.weight", "ffn_norm.weight"},
      {Role::Gate, "mlp.gate_proj.weight", "ffn_gate.weight"},
      {Role::Up, "mlp.up_proj.weight", "ffn_up.weight"},
      {Role::Down, "mlp.down_proj.weight", "ffn_down.weight"},
  };
  return kSpecs;
}

// Gemma's sandwich layout: post_attention_layernorm is the norm *after* attention, and the MLP's
// pre-norm is pre_feedforward_layernorm (llama.cpp: post_attention_norm, ffn_norm, post_ffw_norm).
const std::vector<LayerTensorSpec>& sandwich_layer_tensor_specs() {
  static const std::vector<LayerTensorSpec> kSpecs = [] {
    std::vector<LayerTensorSpec> s;
    for (const auto& spec : layer_tensor_specs())
      if (spec.role != Role::MlpNorm) s.push_back(spec);
    s.push_back({Role::AttnPostNorm, "post_attention_layernorm.weight", "post_attention_norm.weight"});
    s.push_back({Role::MlpNorm, "pre_feedforward_layernorm.weight", "ffn_norm.weight"});
    s.push_back({Role::MlpPostNorm, "post_feedforward_layernorm.weight", "post_ffw_norm.weight"});
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
        for (Role r : f.parts)
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
      {"self_attn.qkv_proj.weight", "attn_qkv.weight", {Role::Q, Role::K, Role::V}},
      {"mlp.gate_up_proj.weight", "ffn_up.weight", {Role::Gate, Role::Up}},
  };
  return kFused;
}

std::string hf_fused_tensor_name(int64_t layer, const FusedProjectionSpec& spec) {
  return "model.layers." + std::to_string(layer) + "." + spec.hf_suffix;
}

namespace {
std::string layer_name(const std::vector<LayerTensorSpec>& specs, int64_t layer, Role role) {
  for (const auto& s : specs)
    if (s.role == role) return "model.layers." + std::to_string(layer) + "." + s.hf_suffix;
  fail("unknown layer tensor role");
}
}  // namespace

std::string hf_layer_tensor_name(int64_t layer, Role role) { return layer_name(layer_tensor_specs(), layer, role); }
std::string hf_layer_tensor_name(const ModelConfig& c, int64_t layer, Role role) {
  return layer_name(layer_tensor_specs(c), layer, role);
}

bool layer_tensor_present(const ModelConfig& c, Role role) {
  switch (role) {
    case Role::QBias: case Role::KBias: case Role::VBias: return c.attention_bias;
    case Role::QNorm: case Role::KNorm: return c.qk_norm;
    case Role::AttnPostNorm: case Role::MlpPostNorm: return c.sandwich_norms;
    default: return true;
  }
}

std::string hf_expert_tensor_name(const ModelConfig& c, int64_t layer, int64_t expert, Role role) {
  const MoeLayout& m = family(c.model_type).moe;
  const char* name = role == Role::Gate ? m.gate : role == Role::Up ? m.up : m.down;
  return "model.layers." + std::to_string(layer) + "." + m.block + ".experts." + std::to_string(expert) + "." + name +
         ".weight";
}

std::string hf_router_tensor_name(const ModelConfig& c, int64_t layer) {
  return "model.layers." + std::to_string(layer) + "." + family(c.model_type).moe.block + ".gate.weight";
}

std::vector<int64_t> expert_tensor_shape(const ModelConfig& c, Role role) {
  const int64_t h = c.hidden_size, f = c.moe_intermediate_size;
  return role == Role::Down ? std::vector<int64_t>{h, f} : std::vector<int64_t>{f, h};
}

const char* role_name(Role r) {
  switch (r) {
    case Role::AttnNorm: return "attn_norm";
    case Role::Q: return "q";
    case Role::K: return "k";
    case Role::V: return "v";
    case Role::O: return "o";
    case Role::QBias: return "q_bias";
    case Role::KBias: return "k_bias";
    case Role::VBias: return "v_bias";
    case Role::QNorm: return "q_norm";
    case Role::KNorm: return "k_norm";
    case Role::MlpNorm: return "mlp_norm";
    case Role::Gate: return "gate";
    case Role::Up: return "up";
    case Role::Down: return "down";
    case Role::AttnPostNorm: return "attn_post_norm";
    case Role::MlpPostNorm: return "mlp_post_norm";
    case Role::Router: return "router";
    case Role::Embed: return "embed_tokens";
    case Role::FinalNorm: return "final_norm";
    case Role::LmHead: return "lm_head";
  }
  return "?";
}

std::string describe(const TensorRole& r) {
  std::string s = r.layer >= 0 ? "layer " + std::to_string(r.layer) + " " : "";
  if (r.expert >= 0) s += "expert " + std::to_string(r.expert) + " ";
  return s + role_name(r.role);
}

std::vector<std::pair<std::string, TensorRole>> tensor_roles(const ModelConfig& c) {
  std::vector<std::pair<std::string, TensorRole>> roles = {{kEmbedName, {Role::Embed}}, {kFinalNormName, {Role::FinalNorm}}};
  if (!c.tie_word_embeddings) roles.push_back({kLmHeadName, {Role::LmHead}});
  auto is_mlp = [](Role r) { return r == Role::Gate || r == Role::Up || r == Role::Down; };
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const bool sparse = c.layer_is_sparse(l);
    for (const auto& spec : layer_tensor_specs(c))
      if (layer_tensor_present(c, spec.role) && !(sparse && is_mlp(spec.role)))
        roles.push_back({hf_layer_tensor_name(c, l, spec.role), {spec.role, l}});
    if (!sparse) continue;
    roles.push_back({hf_router_tensor_name(c, l), {Role::Router, l}});
    for (int64_t e = 0; e < c.num_experts; ++e)
      for (Role r : {Role::Gate, Role::Up, Role::Down}) roles.push_back({hf_expert_tensor_name(c, l, e, r), {r, l, e}});
  }
  return roles;
}

std::vector<int64_t> tensor_shape(const ModelConfig& c, const TensorRole& r) {
  switch (r.role) {
    case Role::Embed: case Role::LmHead: return {c.vocab_size, c.hidden_size};
    case Role::FinalNorm: return {c.hidden_size};
    case Role::Router: return {c.num_experts, c.hidden_size};
    default: return r.expert >= 0 ? expert_tensor_shape(c, r.role) : layer_tensor_shape(c, r.role);
  }
}

std::vector<int64_t> layer_tensor_shape(const ModelConfig& c, Role role) {
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  switch (role) {
    case Role::AttnNorm: case Role::MlpNorm: case Role::AttnPostNorm:
    case Role::MlpPostNorm: return {h};
    case Role::Q: return {c.q_dim(), h};
    case Role::K: case Role::V: return {c.kv_dim(), h};
    case Role::O: return {h, c.q_dim()};
    case Role::QBias: return {c.q_dim()};
    case Role::KBias: case Role::VBias: return {c.kv_dim()};
    case Role::QNorm: case Role::KNorm: return {c.head_dim};
    case Role::Gate: case Role::Up: return {f, h};
    case Role::Down: return {h, f};
    default: return {};  // not a layer's own tensor
  }
}

}  // namespace graft::model
