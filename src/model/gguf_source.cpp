// A GGUF file seen as a Hugging Face checkpoint: names mapped back, llama.cpp's q/k row permutation
// undone. Tensors keep their stored dtype, block-quantized ones included (views of the mapping; the
// permuted q/k rows are reordered into a copy, bytes moved, values untouched).
#include <cstring>
#include <map>
#include <set>

#include "graft/core/error.h"
#include "graft/io/gguf.h"
#include "graft/model/family.h"
#include "graft/model/fused_projections.h"
#include "graft/model/gguf_adapters.h"
#include "graft/model/loader.h"

namespace graft::model {

namespace {

class GgufTensorSource : public io::TensorSource {
 public:
  GgufTensorSource(std::shared_ptr<io::GgufFile> file, const ModelConfig& c, bool permuted_qk)
      : file_(std::move(file)) {
    std::map<std::string, std::string> gguf_to_hf = {
        {"token_embd.weight", kEmbedName}, {"output_norm.weight", kFinalNormName}, {"output.weight", kLmHeadName}};
    for (int64_t i = 0; i < c.num_layers; ++i) {
      for (const auto& s : layer_tensor_specs(c))
        if (*s.gguf_suffix) gguf_to_hf["blk." + std::to_string(i) + "." + s.gguf_suffix] = hf_layer_tensor_name(c, i, s.role);
      if (c.fused_projections)  // split into the parts by model/fused_projections.h
        for (const auto& f : fused_projection_specs())
          gguf_to_hf["blk." + std::to_string(i) + "." + f.gguf_suffix] = hf_fused_tensor_name(i, f);
    }
    // Mixture of experts: the router by name, and each 3-D [n_expert, rows, cols] expert tensor
    // shown as one 2-D matrix per expert (a zero-copy slab of the mapping, blocks as stored).
    for (int64_t i = 0; i < c.num_layers; ++i) {
      if (!c.layer_is_sparse(i)) continue;
      const std::string blk = "blk." + std::to_string(i) + ".";
      gguf_to_hf[blk + "ffn_gate_inp.weight"] = hf_router_tensor_name(c, i);
      const std::pair<const char*, Role> kExps[] = {
          {"ffn_gate_exps.weight", Role::Gate}, {"ffn_up_exps.weight", Role::Up},
          {"ffn_down_exps.weight", Role::Down}};
      for (const auto& [suffix, role] : kExps) {
        const io::GgufTensorInfo* t = file_->find(blk + suffix);
        if (!t) continue;  // weight validation names each missing expert matrix
        if (t->shape.size() != 3 || t->shape[0] != c.num_experts)
          fail("GGUF '", file_->path(), "': tensor '", t->name, "' has shape ", shape_str(t->shape), "; expected [",
               c.num_experts, ", rows, cols] (", c.model_type, ".expert_count experts)");
        for (int64_t e = 0; e < c.num_experts; ++e) experts_[hf_expert_tensor_name(c, i, e, role)] = {t->name, e};
        stacked_.insert(t->name);
      }
    }
    for (const auto& t : file_->tensors()) {
      if (t.name == "rope_freqs.weight") continue;  // consumed into the config
      if (stacked_.count(t.name)) continue;         // read through its per-expert slabs
      auto it = gguf_to_hf.find(t.name);
      // An unknown tensor keeps its GGUF name so that weight validation reports it, never drops it.
      const std::string hf = it == gguf_to_hf.end() ? t.name : it->second;
      hf_to_gguf_[hf] = t.name;
      if (permuted_qk) {
        for (int64_t i = 0; i < c.num_layers; ++i) {
          if (hf == hf_layer_tensor_name(i, Role::Q) || hf == hf_layer_tensor_name(i, Role::QBias))
            heads_[hf] = c.num_heads;
          if (hf == hf_layer_tensor_name(i, Role::K) || hf == hf_layer_tensor_name(i, Role::KBias))
            heads_[hf] = c.num_kv_heads;
        }
      }
    }
  }

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [hf, g] : hf_to_gguf_) out.push_back(hf);
    for (const auto& [hf, x] : experts_) out.push_back(hf);
    return out;
  }
  std::optional<io::TensorInfo> info(const std::string& name) const override {
    if (auto x = experts_.find(name); x != experts_.end()) {
      const io::GgufTensorInfo* t = file_->find(x->second.stacked);
      return io::TensorInfo{t->dtype, {t->shape[1], t->shape[2]}};
    }
    auto it = hf_to_gguf_.find(name);
    if (it == hf_to_gguf_.end()) return std::nullopt;
    const io::GgufTensorInfo* t = file_->find(it->second);
    return io::TensorInfo{t->dtype, t->shape};
  }
  Tensor read(const std::string& name) const override {
    if (auto x = experts_.find(name); x != experts_.end()) {
      Tensor t = file_->tensor(x->second.stacked);
      const int64_t slab = t.nbytes() / t.shape[0];  // whole rows of whole blocks per expert
      t.data = static_cast<const uint8_t*>(t.data) + x->second.expert * slab;
      t.shape = {t.shape[1], t.shape[2]};
      return t;
    }
    auto it = hf_to_gguf_.find(name);
    if (it == hf_to_gguf_.end()) fail("GGUF '", file_->path(), "': no tensor for '", name, "'");
    Tensor t = file_->tensor(it->second);
    auto h = heads_.find(name);
    if (h != heads_.end()) t = unpermute_gguf_rope_rows(t, h->second);  // rows moved as bytes, any dtype
    return t;
  }
  std::string describe() const override { return "GGUF '" + file_->path() + "'"; }

 private:
  std::shared_ptr<io::GgufFile> file_;
  std::map<std::string, std::string> hf_to_gguf_;
  std::map<std::string, int64_t> heads_;  // permuted tensors -> number of heads
  struct ExpertSlab {
    std::string stacked;  // the 3-D GGUF tensor
    int64_t expert = 0;
  };
  std::map<std::string, ExpertSlab> experts_;  // HF per-expert names -> their slab
  std::set<std::string> stacked_;
};

// llama.cpp's MoE hyperparameters (llama-model.cpp): expert_count, expert_used_count, the experts'
// width (expert_feed_forward_length; for `llama` (Mixtral) feed_forward_length is that width), and
// a layer is sparse where the file holds its router (ffn_gate_inp). llama.cpp's qwen3moe and
// llama graphs renormalize the chosen experts' weights (build_moe_ffn with norm_w = true), so a
// GGUF file runs with norm_topk_prob whatever the original config said.
void apply_experts(const io::GgufFile& g, const std::string& a, ModelConfig& c) {
  c.num_experts = g.require_int(a + ".expert_count");
  c.num_experts_per_tok = g.require_int(a + ".expert_used_count");
  c.moe_intermediate_size = g.optional_int(a + ".expert_feed_forward_length").value_or(c.intermediate_size);
  c.norm_topk_prob = true;
  if (auto shared = g.optional_int(a + ".expert_shared_count"); shared && *shared > 0)
    fail_as(ErrorKind::kUnsupported, "GGUF '", g.path(), "': ", a, ".expert_shared_count ", *shared,
            " is not supported for ", c.model_type, " (graft's mixture-of-experts rows have no shared experts)");
  c.sparse_layers.assign(static_cast<size_t>(c.num_layers), false);
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.sparse_layers[static_cast<size_t>(i)] = g.find("blk." + std::to_string(i) + ".ffn_gate_inp.weight") != nullptr;
}

// The family row's operations with llama.cpp's GGUF keys and its fixed rules for what the file
// does not say (llama-model.cpp's hparams for gemma2/gemma3).
void apply_family_operations(const io::GgufFile& g, const std::string& a, const FamilyTraits& fam, ModelConfig& c) {
  c.activation = fam.default_activation;
  c.norm_weight_offset = 0.0f;  // llama.cpp's converter already stored Gemma's norms as 1 + w
  c.scale_embeddings = fam.scale_embeddings;
  c.sandwich_norms = fam.sandwich_norms;
  c.fused_projections = fam.fused_projections;
  if (fam.softcapping) {
    if (auto v = g.optional_float(a + ".attn_logit_softcapping")) c.attn_logit_softcap = *v;
    if (auto v = g.optional_float(a + ".final_logit_softcapping")) c.final_logit_softcap = *v;
  }
  if (fam.global_every > 0) {
    if (!c.sliding_window)
      fail("GGUF '", g.path(), "': ", a, ".attention.sliding_window is missing; ", c.model_type,
           " alternates sliding-window and global layers");
    // llama.cpp's set_swa_pattern(n): layer il is local where il % n < n - 1.
    c.sliding_layers.assign(static_cast<size_t>(c.num_layers), false);
    for (int64_t i = 0; i < c.num_layers; ++i) c.sliding_layers[static_cast<size_t>(i)] = (i + 1) % fam.global_every != 0;
  }
  if (fam.local_rope_base) c.rope_local_theta = g.optional_float(a + ".rope.freq_base_swa").value_or(10000.0);
  if (fam.query_pre_attn_scalar) {
    // The file has no query_pre_attn_scalar; llama.cpp scales by 1/sqrt(head_dim), except for the
    // 27B models (46 layers for Gemma 2, 62 for Gemma 3), whose scalar is hidden / heads.
    const bool is_27b = (fam.global_every == 2 && c.num_layers == 46) || (fam.global_every == 6 && c.num_layers == 62);
    c.query_pre_attn_scalar = static_cast<double>(is_27b ? c.hidden_size / c.num_heads : c.head_dim);
  }
}

ModelConfig config_from_gguf(const io::GgufFile& g, const FamilyTraits& fam) {
  const std::string a = g.require_string("general.architecture");
  ModelConfig c;
  c.model_type = fam.model_type;
  c.hidden_size = g.require_int(a + ".embedding_length");
  c.intermediate_size = g.require_int(a + ".feed_forward_length");
  c.num_layers = g.require_int(a + ".block_count");
  c.num_heads = g.require_int(a + ".attention.head_count");
  if (c.num_heads <= 0) fail("GGUF '", g.path(), "': ", a, ".attention.head_count is ", c.num_heads, "; expected > 0");
  // Each layer holds several tensors: a count beyond the file's tensors is a lie, refused before
  // anything loops over it.
  if (c.num_layers < 1 || static_cast<uint64_t>(c.num_layers) > g.tensors().size())
    fail("GGUF '", g.path(), "': ", a, ".block_count is ", c.num_layers, "; expected 1..", g.tensors().size(),
         " (the file holds ", g.tensors().size(), " tensors)");
  c.num_kv_heads = g.optional_int(a + ".attention.head_count_kv").value_or(c.num_heads);
  c.head_dim = g.optional_int(a + ".attention.key_length").value_or(c.hidden_size / c.num_heads);
  c.max_position_embeddings = g.optional_int(a + ".context_length").value_or(2048);
  c.rms_norm_eps = g.optional_float(a + ".attention.layer_norm_rms_epsilon").value_or(1e-6);
  c.rope_theta = g.optional_float(a + ".rope.freq_base").value_or(10000.0);
  c.qk_norm = fam.qk_norm;
  c.attention_bias = fam.attention_bias || g.find("blk.0.attn_q.bias") != nullptr;
  if (auto v = g.optional_int(a + ".attention.sliding_window"); v && fam.gguf_sliding_window) c.sliding_window = *v;
  if (fam.partial_rotary)
    if (auto n = g.optional_int(a + ".rope.dimension_count"); n && *n != c.head_dim) c.rotary_dim = *n;
  for (const char* t : {"rope_factors_long.weight", "rope_factors_short.weight"})
    if (g.find(t))
      fail_as(ErrorKind::kUnsupported, "GGUF '", g.path(), "': tensor '", t, "' (longrope scaling) is not supported for ",
              c.model_type, " (graft does not implement longrope's short/long factors)");
  c.pooling_type = g.optional_int(a + ".pooling_type");
  apply_family_operations(g, a, fam, c);
  if (fam.moe.present()) apply_experts(g, a, c);
  const std::string scaling = g.optional_string(a + ".rope.scaling.type").value_or("none");
  if (scaling == "linear") {
    c.rope_scaling.type = RopeScalingType::Linear;
    c.rope_scaling.factor = g.optional_float(a + ".rope.scaling.factor").value_or(1.0);
  } else if (scaling != "none") {
    fail_as(ErrorKind::kUnsupported, "GGUF '", g.path(), "': ", a, ".rope.scaling.type '", scaling,
         "' is not supported (supported: none, linear; llama3 scaling comes as rope_freqs.weight)");
  }
  if (const auto* rf = g.find("rope_freqs.weight")) {
    Tensor f = to_f32(g.tensor(rf->name));
    c.rope_freq_divisors.assign(f.as<float>(), f.as<float>() + f.numel());
  }
  const io::GgufTensorInfo* embed = g.find("token_embd.weight");
  if (!embed) fail("GGUF '", g.path(), "': missing tensor 'token_embd.weight'");
  if (embed->shape.size() != 2)
    fail("GGUF '", g.path(), "': tensor 'token_embd.weight' has shape ", shape_str(embed->shape),
         "; expected 2 dimensions [vocab, hidden]");
  c.vocab_size = embed->shape[0];
  c.tie_word_embeddings = g.find("output.weight") == nullptr;
  auto token_id = [&](const char* key) -> std::optional<int32_t> {
    auto v = g.optional_int(key);
    if (v && (*v < 0 || *v >= c.vocab_size))
      fail("GGUF '", g.path(), "': ", key, " is ", *v, "; expected a token id in [0, ", c.vocab_size, ")");
    if (v) return static_cast<int32_t>(*v);
    return std::nullopt;
  };
  if (auto e = token_id("tokenizer.ggml.eos_token_id")) c.eos_token_ids.push_back(*e);
  if (auto e = token_id("tokenizer.ggml.eot_token_id"))
    if (c.eos_token_ids.empty() || c.eos_token_ids[0] != *e) c.eos_token_ids.push_back(*e);
  c.bos_token_id = token_id("tokenizer.ggml.bos_token_id");
  if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads != 0)
    fail("GGUF '", g.path(), "': head_count ", c.num_heads, " is not a multiple of head_count_kv ", c.num_kv_heads);
  validate_config(c, "GGUF '" + g.path() + "'");
  return c;
}

}  // namespace

ModelSource open_gguf_model_source(const std::string& path) {
  auto g = io::GgufFile::open(path);
  const std::string arch = g->require_string("general.architecture");
  const FamilyTraits& fam = family_for_gguf_arch(arch, g->optional_int(arch + ".expert_count").value_or(0) > 0);
  ModelConfig c = config_from_gguf(*g, fam);
  std::shared_ptr<io::TensorSource> source = std::make_shared<GgufTensorSource>(g, c, fam.gguf_permuted_qk);
  return ModelSource{"gguf", c, split_fused_projections(source, c), g};
}

}  // namespace graft::model
