#include "graft/model/family.h"

#include "graft/core/error.h"

namespace graft::model {

const std::vector<FamilyTraits>& families() {
  // model_type, attention_bias, qk_norm, default_tie, gguf_permuted_qk, gguf_arch, tied_embedding_adapters
  static const std::vector<FamilyTraits> kFamilies = {
      {"llama", false, false, false, true, "llama", true},
      {"mistral", false, false, false, true, "llama", true},
      {"qwen2", true, false, false, false, "qwen2", true},
      {"qwen3", false, true, true, false, "qwen3", true},
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

const FamilyTraits& family_for_gguf_arch(const std::string& arch) {
  for (const auto& f : families())
    if (arch == f.gguf_arch) return f;
  fail_as(ErrorKind::kUnsupported, "GGUF architecture '", arch, "' is not supported (supported: llama, qwen2, qwen3)");
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

std::string hf_layer_tensor_name(int64_t layer, LayerTensor role) {
  for (const auto& s : layer_tensor_specs())
    if (s.role == role) return "model.layers." + std::to_string(layer) + "." + s.hf_suffix;
  fail("unknown layer tensor role");
}

bool layer_tensor_present(const ModelConfig& c, LayerTensor role) {
  switch (role) {
    case LayerTensor::QBias: case LayerTensor::KBias: case LayerTensor::VBias: return c.attention_bias;
    case LayerTensor::QNorm: case LayerTensor::KNorm: return c.qk_norm;
    default: return true;
  }
}

std::vector<int64_t> layer_tensor_shape(const ModelConfig& c, LayerTensor role) {
  const int64_t h = c.hidden_size, f = c.intermediate_size;
  switch (role) {
    case LayerTensor::AttnNorm: case LayerTensor::MlpNorm: return {h};
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
