#include "graft/model/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "graft/core/error.h"
#include "graft/io/json_file.h"
#include "graft/model/family.h"

namespace graft::model {

using nlohmann::json;

namespace {

int64_t require_int(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number_integer())
    fail("config '", path, "': missing or non-integer field '", key, "'");
  int64_t v = j[key].get<int64_t>();
  if (v <= 0) fail("config '", path, "': field '", key, "' must be positive, got ", v);
  return v;
}

std::optional<int64_t> optional_int(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number_integer()) fail("config '", path, "': field '", key, "' is not an integer");
  return j[key].get<int64_t>();
}

std::optional<double> optional_number(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_number()) fail("config '", path, "': field '", key, "' is not a number");
  return j[key].get<double>();
}

std::optional<bool> optional_bool(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  if (!j[key].is_boolean()) fail("config '", path, "': field '", key, "' is not a boolean");
  return j[key].get<bool>();
}

std::vector<int32_t> int_or_list(const json& v, const char* key, const std::string& path) {
  std::vector<int32_t> out;
  auto add = [&](const json& x) {
    if (!x.is_number_integer()) return;
    const int64_t id = x.is_number_unsigned() && x.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : x.get<int64_t>();
    if (id < 0 || id > INT32_MAX)
      fail("config '", path, "': field '", key, "' holds ", io::json_excerpt(x), "; expected a token id in [0, 2^31)");
    out.push_back(static_cast<int32_t>(id));
  };
  if (v.is_array())
    for (const auto& x : v) add(x);
  else
    add(v);
  return out;
}

// rope_scaling (transformers <= 4.x) or rope_parameters (5.x) -> RopeScaling, theta. transformers
// 5 keys rope_parameters by layer type where the layer types differ (Gemma 3: "full_attention",
// "sliding_attention"); the sliding layers' entry is the local base, default rope only.
void parse_rope(const json& j, const std::string& path, const FamilyTraits& fam, ModelConfig& c) {
  if (auto t = optional_number(j, "rope_theta", path)) c.rope_theta = *t;
  if (fam.local_rope_base) c.rope_local_theta = optional_number(j, "rope_local_base_freq", path).value_or(10000.0);
  else if (j.contains("rope_local_base_freq"))
    fail_as(ErrorKind::kUnsupported, "config '", path, "': rope_local_base_freq is not supported for ", c.model_type);
  const json* rs = nullptr;
  std::string key = "rope_scaling";
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) rs = &j["rope_scaling"];
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rs = &j["rope_parameters"], key = "rope_parameters";
  if (rs && rs->is_object() && (rs->contains("full_attention") || rs->contains("sliding_attention"))) {
    const json* global = rs->contains("full_attention") ? &(*rs)["full_attention"] : nullptr;
    const json* local = rs->contains("sliding_attention") ? &(*rs)["sliding_attention"] : nullptr;
    if (local && !local->is_object()) fail("config '", path, "': rope_parameters.sliding_attention is not an object");
    if (local && global && *local != *global) {
      if (!fam.local_rope_base)
        fail_as(ErrorKind::kUnsupported, "config '", path, "': rope_parameters differ between full_attention and ",
                "sliding_attention layers, which is not supported for ", c.model_type);
      const std::string lt = local->value("rope_type", std::string("default"));
      if (lt != "default")
        fail_as(ErrorKind::kUnsupported, "config '", path, "': rope_parameters.sliding_attention.rope_type '", lt,
                "' is not supported (supported: default)");
      if (auto t = optional_number(*local, "rope_theta", path)) c.rope_local_theta = *t;
    }
    rs = global ? global : local;
  }
  if (!rs) return;
  if (!rs->is_object()) fail("config '", path, "': rope_scaling is not an object");
  if (auto t = optional_number(*rs, "rope_theta", path)) c.rope_theta = *t;
  std::string type = "default";
  if (rs->contains("rope_type") && (*rs)["rope_type"].is_string()) type = (*rs)["rope_type"];
  else if (rs->contains("type") && (*rs)["type"].is_string()) type = (*rs)["type"];
  key += rs->contains("rope_type") ? ".rope_type" : ".type";
  if (type == "default") return;
  if (type == "longrope" || type == "su" || type == "yarn")  // Phi-3's long-context variants
    fail_as(ErrorKind::kUnsupported, "config '", path, "': ", key, " '", type, "' is not supported for ", c.model_type,
            " (graft runs default, linear and llama3 RoPE; longrope's short/long factor switch and attention",
            " factor are not implemented, and refusing beats approximating them)");
  auto factor = optional_number(*rs, "factor", path);
  if (!factor || *factor <= 0) fail("config '", path, "': rope scaling '", type, "' needs a positive 'factor'");
  c.rope_scaling.factor = *factor;
  if (type == "linear") {
    c.rope_scaling.type = RopeScalingType::Linear;
  } else if (type == "llama3") {
    c.rope_scaling.type = RopeScalingType::Llama3;
    c.rope_scaling.low_freq_factor = optional_number(*rs, "low_freq_factor", path).value_or(1.0);
    c.rope_scaling.high_freq_factor = optional_number(*rs, "high_freq_factor", path).value_or(4.0);
    c.rope_scaling.original_max_position_embeddings =
        optional_int(*rs, "original_max_position_embeddings", path).value_or(8192);
    if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor)
      fail("config '", path, "': llama3 rope scaling needs high_freq_factor > low_freq_factor");
  } else {
    fail_as(ErrorKind::kUnsupported, "config '", path, "': ", key, " '", type, "' is not supported for ",
         c.model_type, " (supported: default, linear, llama3); refusing to approximate it");
  }
}

QuantSpec parse_quant_spec(const json& q, const std::string& what, const std::string& path) {
  if (!q.is_object()) fail("config '", path, "': ", what, " is not an object");
  if (q.contains("mode") && q["mode"] != "affine")
    fail_as(ErrorKind::kUnsupported, "config '", path, "': ", what, ".mode ", io::json_excerpt(q["mode"]),
         " is not supported (supported: affine; mxfp4/nvfp4/mxfp8 are not)");
  QuantSpec s;
  if (!q.contains("bits") || !q["bits"].is_number_integer() || !q.contains("group_size") ||
      !q["group_size"].is_number_integer())
    fail("config '", path, "': ", what, " needs integer 'bits' and 'group_size'");
  s.bits = q["bits"].get<int>();
  s.group_size = q["group_size"].get<int>();
  if (s.bits != 4 && s.bits != 8)
    fail_as(ErrorKind::kUnsupported, "config '", path, "': ", what, ".bits ", s.bits, " is not supported (supported: 4, 8)");
  if (s.group_size != 32 && s.group_size != 64 && s.group_size != 128)
    fail_as(ErrorKind::kUnsupported, "config '", path, "': ", what, ".group_size ", s.group_size, " is not supported (supported: 32, 64, 128)");
  return s;
}

std::optional<QuantizationConfig> parse_quantization(const json& j, const std::string& path) {
  const char* key = j.contains("quantization") ? "quantization" : nullptr;
  if (!key) {
    // mlx-lm mirrors the block as quantization_config; other tools (GPTQ, AWQ, bitsandbytes) use
    // that name for formats graft does not run.
    if (!j.contains("quantization_config")) return std::nullopt;
    const json& qc = j["quantization_config"];
    if (qc.is_object() && qc.contains("quant_method"))
      fail_as(ErrorKind::kUnsupported, "config '", path, "': quantization_config.quant_method ", io::json_excerpt(qc["quant_method"]),
           " is not supported (graft runs mlx-lm affine quantization only)");
    key = "quantization_config";
  }
  const json& q = j[key];
  QuantizationConfig out;
  json defaults = json::object();
  for (const auto& [k, v] : q.items()) {
    if (k == "bits" || k == "group_size" || k == "mode") {
      defaults[k] = v;
    } else if (v.is_boolean()) {
      if (v.get<bool>())
        fail("config '", path, "': ", key, ".", k, " is true; expected false or a {bits, group_size} object");
      out.overrides[k] = std::nullopt;
    } else if (v.is_object()) {
      out.overrides[k] = parse_quant_spec(v, std::string(key) + "." + k, path);
    } else {
      fail("config '", path, "': ", key, ".", k, " is ", io::json_excerpt(v), "; expected false or a {bits, group_size} object");
    }
  }
  out.default_spec = parse_quant_spec(defaults, key, path);
  return out;
}


// The operations a family row names, with their config.json fields; a field whose family does not
// run that operation is refused by name (its value would change the math).
void parse_family_operations(const json& j, const std::string& path, const FamilyTraits& fam, ModelConfig& c) {
  // Gemma reads hidden_activation (hidden_act is an older alias some of its configs carry too).
  const char* act_key = j.contains("hidden_activation") && !j["hidden_activation"].is_null() ? "hidden_activation"
                                                                                               : "hidden_act";
  c.activation = fam.default_activation;
  if (j.contains(act_key) && !j[act_key].is_null()) {
    if (j[act_key] == "silu") c.activation = Activation::Silu;
    else if (j[act_key] == "gelu_pytorch_tanh") c.activation = Activation::GeluTanh;
    else
      fail_as(ErrorKind::kUnsupported, "config '", path, "': ", act_key, " '", io::json_excerpt(j[act_key]),
              "' is not supported for ", c.model_type, " (supported: silu, gelu_pytorch_tanh)");
  }
  c.norm_weight_offset = fam.norm_plus_one ? 1.0f : 0.0f;
  c.scale_embeddings = fam.scale_embeddings;
  c.sandwich_norms = fam.sandwich_norms;
  c.fused_projections = fam.fused_projections;
  auto family_number = [&](const char* key, bool supported) -> std::optional<double> {
    auto v = optional_number(j, key, path);
    if (v && !supported)
      fail_as(ErrorKind::kUnsupported, "config '", path, "': ", key, " is not supported for ", c.model_type,
              " (graft runs it for the Gemma families only)");
    if (v && !(std::isfinite(*v) && *v > 0))
      fail("config '", path, "': ", key, " is ", *v, "; expected a finite number > 0");
    return v;
  };
  c.attn_logit_softcap = family_number("attn_logit_softcapping", fam.softcapping);
  c.final_logit_softcap = family_number("final_logit_softcapping", fam.softcapping);
  c.query_pre_attn_scalar = family_number("query_pre_attn_scalar", fam.query_pre_attn_scalar);
  if (optional_bool(j, "use_bidirectional_attention", path).value_or(false))
    fail_as(ErrorKind::kUnsupported, "config '", path, "': use_bidirectional_attention: true is not supported for ",
            c.model_type, " (graft runs causal attention only)");
}

// sliding_window and the layers it applies to: every layer (Mistral, Phi-3), alternating local and
// global layers (Gemma: layer_types, else the family's pattern), or none (Qwen's
// use_sliding_window is refused).
void parse_sliding_window(const json& j, const std::string& path, const FamilyTraits& fam, ModelConfig& c) {
  const bool has_types = j.contains("layer_types") && j["layer_types"].is_array();
  if (fam.global_every > 0) {
    c.sliding_window = optional_int(j, "sliding_window", path);
    int64_t every = fam.global_every;
    if (auto p = optional_int(j, "sliding_window_pattern", path)) every = *p;
    if (every <= 0) fail("config '", path, "': sliding_window_pattern ", every, " must be positive");
    c.sliding_layers.assign(static_cast<size_t>(c.num_layers), false);
    if (has_types) {
      const json& t = j["layer_types"];
      if (static_cast<int64_t>(t.size()) != c.num_layers)
        fail("config '", path, "': layer_types has ", t.size(), " entries; expected num_hidden_layers = ", c.num_layers);
      for (size_t i = 0; i < t.size(); ++i) {
        if (t[i] == "sliding_attention") c.sliding_layers[i] = true;
        else if (t[i] != "full_attention")
          fail_as(ErrorKind::kUnsupported, "config '", path, "': layer type ", io::json_excerpt(t[i]),
                  " is not supported for ", c.model_type, " (supported: sliding_attention, full_attention)");
      }
    } else {
      for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers[static_cast<size_t>(i)] = (i + 1) % every != 0;
    }
    const bool any = std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) != c.sliding_layers.end();
    if (any && !c.sliding_window)
      fail("config '", path, "': sliding_attention layers need a sliding_window, and config.json has none");
    return;
  }
  if (fam.sliding_all_layers) {
    c.sliding_window = optional_int(j, "sliding_window", path);
  } else if (optional_bool(j, "use_sliding_window", path).value_or(false)) {
    fail_as(ErrorKind::kUnsupported, "config '", path, "': use_sliding_window: true is not supported for ", c.model_type);
  }
  if (has_types)
    for (const auto& t : j["layer_types"])
      if (t != "full_attention")
        fail_as(ErrorKind::kUnsupported, "config '", path, "': layer type ", io::json_excerpt(t),
                " is not supported for ", c.model_type, " (supported: full_attention)");
}

// Mixture of experts: the family row's config.json fields (model/family.h's MoeLayout). Fields of
// MoE math a row does not run are refused by name, so a checkpoint never runs as something else.
void parse_experts(const json& j, const std::string& path, const FamilyTraits& fam, ModelConfig& c) {
  const MoeLayout& m = fam.moe;
  if (!m.present()) {
    for (const char* key : {"num_experts", "num_local_experts", "num_experts_per_tok"})
      if (optional_int(j, key, path).value_or(0) > 0)
        fail_as(ErrorKind::kUnsupported, "config '", path, "': ", key, " is set, but ", c.model_type,
                " is not a mixture-of-experts family (graft's are qwen3_moe and mixtral)");
    return;
  }
  const bool v5_key = m.experts_key_v5 && !j.contains(m.experts_key) && j.contains(m.experts_key_v5);
  c.num_experts = require_int(j, v5_key ? m.experts_key_v5 : m.experts_key, path);
  c.num_experts_per_tok = require_int(j, "num_experts_per_tok", path);
  c.moe_intermediate_size = require_int(j, m.expert_width_key, path);
  c.norm_topk_prob = m.reads_norm_topk_prob ? optional_bool(j, "norm_topk_prob", path).value_or(false) : true;
  if (!m.reads_norm_topk_prob && j.contains("norm_topk_prob") && j["norm_topk_prob"] != true)
    fail_as(ErrorKind::kUnsupported, "config '", path, "': norm_topk_prob ", io::json_excerpt(j["norm_topk_prob"]),
            " is not supported for ", c.model_type, " (its router always renormalizes the chosen experts' weights)");
  // Shared experts (Qwen2-MoE, DeepSeek) are math these rows do not have.
  for (const char* key : {"shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts"})
    if (optional_int(j, key, path).value_or(0) > 0)
      fail_as(ErrorKind::kUnsupported, "config '", path, "': ", key, " is not supported for ", c.model_type,
              " (graft's mixture-of-experts rows have no shared experts)");
  int64_t step = 1;
  std::set<int64_t> dense;
  if (auto v = optional_int(j, "decoder_sparse_step", path)) step = *v;
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    if (!j["mlp_only_layers"].is_array()) fail("config '", path, "': mlp_only_layers is not a list");
    for (const auto& v : j["mlp_only_layers"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.num_layers)
        fail("config '", path, "': mlp_only_layers holds ", io::json_excerpt(v), "; expected layer indices in [0, ",
             c.num_layers, ")");
      dense.insert(v.get<int64_t>());
    }
  }
  if (!m.sparse_layer_pattern && (step != 1 || !dense.empty()))
    fail_as(ErrorKind::kUnsupported, "config '", path, "': ", step != 1 ? "decoder_sparse_step" : "mlp_only_layers",
            " is not supported for ", c.model_type, " (every layer of it is sparse)");
  if (step < 1) fail("config '", path, "': decoder_sparse_step is ", step, "; expected >= 1");
  // transformers' Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers, and only every
  // decoder_sparse_step-th layer ((i + 1) % step == 0).
  c.sparse_layers.assign(static_cast<size_t>(c.num_layers), false);
  for (int64_t i = 0; i < c.num_layers; ++i) c.sparse_layers[static_cast<size_t>(i)] = !dense.count(i) && (i + 1) % step == 0;
}

}  // namespace

float ModelConfig::attention_scale() const {
  // transformers: scaling = query_pre_attn_scalar ** -0.5 (a Python float, applied in F32).
  if (query_pre_attn_scalar) return static_cast<float>(std::pow(*query_pre_attn_scalar, -0.5));
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

std::optional<QuantSpec> QuantizationConfig::spec_for(const std::string& module) const {
  auto it = overrides.find(module);
  if (it != overrides.end()) return it->second;
  return default_spec;
}

ModelConfig parse_hf_config(const json& j, const std::string& path) {
  if (!j.is_object()) fail("config '", path, "' is not a JSON object");
  ModelConfig c;
  if (!j.contains("model_type") || !j["model_type"].is_string())
    fail("config '", path, "': missing string field 'model_type'");
  c.model_type = j["model_type"].get<std::string>();
  const FamilyTraits& fam = family(c.model_type);  // throws listing supported families

  c.hidden_size = require_int(j, "hidden_size", path);
  c.intermediate_size = require_int(j, "intermediate_size", path);
  c.num_layers = require_int(j, "num_hidden_layers", path);
  c.num_heads = require_int(j, "num_attention_heads", path);
  c.num_kv_heads = optional_int(j, "num_key_value_heads", path).value_or(c.num_heads);
  c.head_dim = optional_int(j, "head_dim", path).value_or(c.hidden_size / c.num_heads);  // num_heads > 0
  c.vocab_size = require_int(j, "vocab_size", path);
  c.max_position_embeddings = optional_int(j, "max_position_embeddings", path).value_or(2048);
  c.rms_norm_eps = optional_number(j, "rms_norm_eps", path).value_or(1e-6);
  c.tie_word_embeddings = optional_bool(j, "tie_word_embeddings", path).value_or(fam.default_tie);
  c.attention_bias = optional_bool(j, "attention_bias", path).value_or(false) || fam.attention_bias;
  c.qk_norm = fam.qk_norm;
  parse_rope(j, path, fam, c);

  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
    fail("config '", path, "': num_attention_heads ", c.num_heads, " is not a multiple of num_key_value_heads ",
         c.num_kv_heads);
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) fail("config '", path, "': head_dim ", c.head_dim, " must be even");

  // Fields that change the math: accept only the values graft implements.
  parse_family_operations(j, path, fam, c);
  if (optional_bool(j, "mlp_bias", path).value_or(false))
    fail_as(ErrorKind::kUnsupported, "config '", path, "': mlp_bias: true is not supported");
  // transformers 4 writes partial_rotary_factor at the top level, 5 inside rope_parameters.
  std::optional<double> partial = optional_number(j, "partial_rotary_factor", path);
  if (!partial && j.contains("rope_parameters") && j["rope_parameters"].is_object())
    partial = optional_number(j["rope_parameters"], "partial_rotary_factor", path);
  if (auto p = partial; p && *p != 1.0) {
    if (!fam.partial_rotary)
      fail_as(ErrorKind::kUnsupported, "config '", path, "': partial_rotary_factor ", *p, " is not supported for ",
              c.model_type, " (only 1.0)");
    const double dims = static_cast<double>(c.head_dim) * *p;
    c.rotary_dim = static_cast<int64_t>(dims);
    if (!(*p > 0 && *p < 1) || c.rotary_dim <= 0 || c.rotary_dim % 2 != 0 || static_cast<double>(c.rotary_dim) != dims)
      fail("config '", path, "': partial_rotary_factor ", *p, " times head_dim ", c.head_dim,
           " must give a positive even number of rotary dimensions below head_dim");
  }
  parse_sliding_window(j, path, fam, c);
  parse_experts(j, path, fam, c);

  if (j.contains("eos_token_id")) c.eos_token_ids = int_or_list(j["eos_token_id"], "eos_token_id", path);
  if (j.contains("bos_token_id")) {
    auto b = int_or_list(j["bos_token_id"], "bos_token_id", path);
    if (!b.empty()) c.bos_token_id = b[0];
  }
  c.quantization = parse_quantization(j, path);
  validate_config(c, "config '" + path + "'");
  return c;
}

namespace {

void check_range(const std::string& where, const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) fail(where, ": ", field, " is ", v, "; expected ", lo, "..", hi);
}

void check_positive_finite(const std::string& where, const char* field, double v) {
  if (!(std::isfinite(v) && v > 0)) fail(where, ": ", field, " is ", v, "; expected a finite number > 0");
}

}  // namespace

void validate_config(const ModelConfig& c, const std::string& where) {
  // Bounds far above any real model (Llama-3.1-405B: 126 layers, hidden 16384, 128 heads,
  // vocab 128256) and low enough that products of two stay far from overflow.
  constexpr int64_t kMaxDim = int64_t{1} << 20, kMaxHeads = 1 << 14, kMaxLayers = 1 << 14;
  check_range(where, "hidden_size (GGUF embedding_length)", c.hidden_size, 1, kMaxDim);
  check_range(where, "intermediate_size (GGUF feed_forward_length)", c.intermediate_size, 1, kMaxDim);
  check_range(where, "num_hidden_layers (GGUF block_count)", c.num_layers, 1, kMaxLayers);
  check_range(where, "num_attention_heads (GGUF attention.head_count)", c.num_heads, 1, kMaxHeads);
  check_range(where, "num_key_value_heads (GGUF attention.head_count_kv)", c.num_kv_heads, 1, c.num_heads);
  if (c.num_heads % c.num_kv_heads != 0)
    fail(where, ": num_attention_heads ", c.num_heads, " is not a multiple of num_key_value_heads ",
         c.num_kv_heads);
  check_range(where, "head_dim (GGUF attention.key_length)", c.head_dim, 2, 1 << 16);
  if (c.head_dim % 2 != 0) fail(where, ": head_dim (GGUF attention.key_length) ", c.head_dim, " must be even (RoPE rotates pairs)");
  check_range(where, "vocab_size (GGUF token_embd.weight rows)", c.vocab_size, 1, INT32_MAX);
  check_range(where, "max_position_embeddings (GGUF context_length)", c.max_position_embeddings, 1, int64_t{1} << 30);
  check_positive_finite(where, "rope_theta (GGUF rope.freq_base)", c.rope_theta);
  check_positive_finite(where, "rms_norm_eps (GGUF attention.layer_norm_rms_epsilon)", c.rms_norm_eps);
  if (c.rms_norm_eps >= 1) fail(where, ": rms_norm_eps is ", c.rms_norm_eps, "; expected a small positive number (< 1)");
  if (c.rope_scaling.type != RopeScalingType::None) {
    check_positive_finite(where, "rope scaling factor", c.rope_scaling.factor);
    check_positive_finite(where, "rope scaling low_freq_factor", c.rope_scaling.low_freq_factor);
    check_positive_finite(where, "rope scaling high_freq_factor", c.rope_scaling.high_freq_factor);
    check_range(where, "rope scaling original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings,
                1, int64_t{1} << 30);
  }
  for (float d : c.rope_freq_divisors)
    check_positive_finite(where, "a rope frequency factor (rope_freqs.weight)", d);
  if (c.sliding_window) check_range(where, "sliding_window", *c.sliding_window, 1, int64_t{1} << 30);
  if (!c.sliding_layers.empty() && static_cast<int64_t>(c.sliding_layers.size()) != c.num_layers)
    fail(where, ": ", c.sliding_layers.size(), " layer types for ", c.num_layers, " layers");
  if (c.rope_local_theta) check_positive_finite(where, "rope_local_base_freq (GGUF rope.freq_base_swa)", *c.rope_local_theta);
  if (c.rotary_dim != 0) check_range(where, "rotary dimensions (partial_rotary_factor x head_dim)", c.rotary_dim, 2, c.head_dim);
  for (auto v : {c.attn_logit_softcap, c.final_logit_softcap, c.query_pre_attn_scalar})
    if (v) check_positive_finite(where, "a soft-capping value or query_pre_attn_scalar", *v);
  if (c.num_experts > 0) {
    check_range(where, "num_experts (GGUF expert_count)", c.num_experts, 1, 1 << 14);
    check_range(where, "num_experts_per_tok (GGUF expert_used_count)", c.num_experts_per_tok, 1, c.num_experts);
    check_range(where, "moe_intermediate_size (GGUF expert_feed_forward_length)", c.moe_intermediate_size, 1, kMaxDim);
    if (static_cast<int64_t>(c.sparse_layers.size()) != c.num_layers)
      fail(where, ": ", c.sparse_layers.size(), " sparse-layer flags for ", c.num_layers, " layers");
  }
  for (int32_t id : c.eos_token_ids) check_range(where, "eos_token_id", id, 0, c.vocab_size - 1);
  if (c.bos_token_id) check_range(where, "bos_token_id", *c.bos_token_id, 0, c.vocab_size - 1);
}

std::vector<float> rope_inv_freq(const ModelConfig& c, bool local) {
  const int64_t dims = c.rope_dims(), half = dims / 2;
  local = local && c.rope_local_theta;
  const double theta = local ? *c.rope_local_theta : c.rope_theta;
  std::vector<float> inv(static_cast<size_t>(half));
  // transformers computes these in float32: base ** (float32(2i) / dim).
  for (int64_t i = 0; i < half; ++i) {
    float expo = static_cast<float>(2 * i) / static_cast<float>(dims);
    inv[i] = 1.0f / std::pow(static_cast<float>(theta), expo);
  }
  if (local) return inv;  // Gemma 3's local layers: default rope, no scaling
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScalingType::Linear) {
    for (auto& f : inv) f = static_cast<float>(f / s.factor);
  } else if (s.type == RopeScalingType::Llama3) {
    const double old_ctx = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_ctx / s.low_freq_factor;
    const double high_wavelen = old_ctx / s.high_freq_factor;
    for (auto& f : inv) {
      const float wavelen = 2.0f * static_cast<float>(M_PI) / f;
      float scaled = wavelen > low_wavelen ? static_cast<float>(f / s.factor) : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = static_cast<float>((old_ctx / wavelen - s.low_freq_factor) /
                                                (s.high_freq_factor - s.low_freq_factor));
        scaled = (1.0f - smooth) * scaled / static_cast<float>(s.factor) + smooth * scaled;
      }
      f = scaled;
    }
  }
  if (!c.rope_freq_divisors.empty()) {
    if (static_cast<int64_t>(c.rope_freq_divisors.size()) != half)
      fail("rope frequency factors: ", c.rope_freq_divisors.size(), " values, expected head_dim/2 = ", half);
    for (int64_t i = 0; i < half; ++i) inv[i] /= c.rope_freq_divisors[i];
  }
  return inv;
}

}  // namespace graft::model
