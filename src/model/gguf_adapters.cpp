#include "graft/model/gguf_adapters.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "graft/core/convert.h"
#include "graft/core/error.h"
#include "graft/model/family.h"
#include "graft/model/model_adapters.h"

namespace graft::model {

namespace {

// Moves q/k rows between Hugging Face order (h, s·half + j) and llama.cpp's (h, 2j + s), as bytes.
Tensor move_rope_rows(const Tensor& t, int64_t n_heads, bool to_hf) {
  const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
  if (t.shape.empty() || t.shape.size() > 2 || n_heads <= 0 || rows % n_heads != 0 || (rows / n_heads) % 2 != 0)
    fail("moving GGUF q/k rows: shape ", shape_str(t.shape), " does not split into ", n_heads, " heads of an even size");
  const size_t row_bytes = static_cast<size_t>(t.nbytes() / rows);
  const int64_t head_dim = rows / n_heads, half = head_dim / 2;
  const auto* src = static_cast<const uint8_t*>(t.data);
  std::vector<uint8_t> out(static_cast<size_t>(t.nbytes()));
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t j = 0; j < half; ++j) {
        const int64_t hf = h * head_dim + s * half + j, gguf = h * head_dim + j * 2 + s;
        std::memcpy(&out[static_cast<size_t>(to_hf ? hf : gguf) * row_bytes],
                    src + static_cast<size_t>(to_hf ? gguf : hf) * row_bytes, row_bytes);
      }
  return Tensor::owned(t.dtype, t.shape, std::move(out));
}

}  // namespace

Tensor unpermute_gguf_rope_rows(const Tensor& t, int64_t n_heads) { return move_rope_rows(t, n_heads, true); }
Tensor permute_gguf_rope_rows(const Tensor& t, int64_t n_heads) { return move_rope_rows(t, n_heads, false); }

namespace {

// llama.cpp module name ("blk.0.attn_q") -> Hugging Face tensor name, for every layer tensor.
std::map<std::string, std::string> gguf_module_names(const ModelConfig& c) {
  std::map<std::string, std::string> out = {{"token_embd", kEmbedName}, {"output", kLmHeadName}};
  for (int64_t i = 0; i < c.num_layers; ++i)
    for (const auto& s : layer_tensor_specs(c)) {
      std::string g = s.gguf_suffix;
      if (g.empty()) continue;  // a part of a fused tensor (its aliases: add_gguf_tensor_aliases)
      const size_t dot = g.rfind('.');
      if (g.compare(dot, std::string::npos, ".weight") != 0) continue;  // biases and norms take no LoRA pair
      out["blk." + std::to_string(i) + "." + g.substr(0, dot)] = hf_layer_tensor_name(c, i, s.role);
    }
  return out;
}

}  // namespace

void add_gguf_tensor_aliases(adapter::WeightAdapterBindings& b, const ModelConfig& config) {
  for (const auto& [gguf, hf] : gguf_module_names(config))
    if (b.tensor_shape(hf)) b.add_alias(gguf, hf);
  // llama.cpp's LoRA on a fused tensor (phi3's blk.N.attn_qkv, blk.N.ffn_up) splits by rows, as
  // the Hugging Face qkv_proj does.
  if (config.fused_projections)
    for (int64_t i = 0; i < config.num_layers; ++i)
      for (const auto& f : fused_projection_specs()) {
        std::vector<std::string> parts;
        for (Role r : f.parts) parts.push_back(hf_layer_tensor_name(i, r));
        const std::string g = f.gguf_suffix;
        b.add_fused_split("blk." + std::to_string(i) + "." + g.substr(0, g.rfind('.')), parts);
      }
}

std::vector<adapter::AdapterUse> gguf_adapters_for_model(const ModelConfig& config,
                                                         const std::vector<adapter::AdapterUse>& uses) {
  const FamilyTraits& fam = family(config.model_type);
  std::map<std::string, int64_t> heads;  // permuted modules -> number of heads
  if (fam.gguf_permuted_qk)
    for (int64_t i = 0; i < config.num_layers; ++i) {
      heads["blk." + std::to_string(i) + ".attn_q"] = config.num_heads;
      heads["blk." + std::to_string(i) + ".attn_k"] = config.num_kv_heads;
    }
  std::vector<adapter::AdapterUse> out;
  for (const auto& use : uses) {
    if (!use.adapter || use.adapter->format != adapter::AdapterFormat::Gguf) {
      out.push_back(use);
      continue;
    }
    const adapter::WeightAdapter& a = *use.adapter;
    auto arch = a.metadata.find("architecture");
    const std::string adapter_arch = arch == a.metadata.end() ? "" : arch->second;
    if (adapter_arch != fam.gguf_arch)
      fail("GGUF adapter '", a.path, "': general.architecture is '", adapter_arch, "' but the base model is ",
           config.model_type, " (GGUF architecture '", fam.gguf_arch,
           "'): model arch and LoRA arch mismatch (hint: maybe wrong base model?)");
    if (heads.empty()) {
      out.push_back(use);
      continue;
    }
    auto copy = std::make_shared<adapter::WeightAdapter>(a);
    for (auto& t : copy->targets) {
      auto h = heads.find(t.module);
      auto* lr = std::get_if<adapter::LowRankUpdate>(&t.update);
      if (h == heads.end() || !lr) continue;
      // A lora_b whose rows are not this model's q/k rows is left as it is: binding then refuses
      // its shape, naming the tensor.
      if (lr->b.shape.size() != 2 || lr->b.shape[0] != h->second * config.head_dim) continue;
      lr->b = unpermute_gguf_rope_rows(lr->b, h->second);
    }
    out.push_back({std::move(copy), use.strength});
  }
  return out;
}

namespace {

Tensor row_slice(const Tensor& t, int64_t begin, int64_t rows) {
  if (begin == 0 && rows == t.shape[0]) return t;
  const size_t row_bytes = static_cast<size_t>(t.nbytes() / t.shape[0]);
  const auto* p = static_cast<const uint8_t*>(t.data) + static_cast<size_t>(begin) * row_bytes;
  return Tensor::owned(t.dtype, {rows, t.shape[1]}, std::vector<uint8_t>(p, p + static_cast<size_t>(rows) * row_bytes));
}

Tensor scaled_f32(const Tensor& t, float s) {
  Tensor f = to_f32(t);
  float* v = f.mutable_as<float>();
  for (int64_t i = 0; i < f.numel(); ++i) v[i] *= s;
  return f;
}

}  // namespace

GgufLoraFile gguf_lora_for_model(const ModelConfig& config, const io::TensorSource& source,
                                 const adapter::AdapterUse& use, std::optional<DType> dtype) {
  const FamilyTraits& fam = family(config.model_type);
  if (fam.fused_projections)
    fail_as(ErrorKind::kUnsupported, "writing a GGUF LoRA file is not supported for ", config.model_type,
            " (llama.cpp's ", fam.gguf_arch, " fuses q/k/v into attn_qkv and gate/up into ffn_up; a pair on one ",
            "part has no llama.cpp name): use the adapter as it is");
  // Unfused binding: nothing is read from the base, and quantized bases are fine.
  auto plan = bind_model_adapters(config, source, {use}, AdapterPath::Unfused);
  std::map<std::string, std::string> hf_to_gguf;
  for (const auto& [g, hf] : gguf_module_names(config)) hf_to_gguf[hf] = g;
  struct Pair {
    std::string name;
    Tensor a, b;
    float scale;
  };
  std::vector<Pair> pairs;
  std::set<float> scale_times_rank;
  const adapter::WeightAdapter& src = *plan->adapters.at(0).adapter;
  for (const auto& b : plan->bound) {
    const adapter::AdapterTarget& t = src.targets[b.target_index];
    const auto* lr = std::get_if<adapter::LowRankUpdate>(&t.update);
    auto g = hf_to_gguf.find(b.slice.tensor);
    const auto& updates = plan->updates.at(b.slice.tensor);
    if (!lr)
      fail_as(ErrorKind::kUnsupported, "'", src.path, "' module '", t.module, "' is a ", adapter::update_kind(t.update),
              " update; a GGUF LoRA file holds low-rank pairs only");
    if (g == hf_to_gguf.end() || updates.size() != 1 || b.slice.dst_row != 0)
      fail_as(ErrorKind::kUnsupported, "'", src.path, "' module '", t.module, "' adapts '", b.slice.tensor,
              "' in a way a GGUF LoRA pair cannot express (no llama.cpp tensor name, or part of a fused tensor)");
    const adapter::LowRankUpdate& u = std::get<adapter::LowRankUpdate>(*updates[0].update);  // the chosen reading
    Pair p;
    p.name = g->second + ".weight";
    p.scale = u.scale * updates[0].strength;
    Tensor bb = row_slice(u.b, b.slice.src_row, b.slice.rows);
    if (b.slice.tensor == kEmbedName) {  // llama.cpp's get_rows layout
      p.a = bb;
      p.b = transpose_2d(u.a);
    } else {
      if (fam.gguf_permuted_qk && g->second.size() > 7 && g->second.compare(g->second.size() - 7, 7, ".attn_q") == 0)
        bb = permute_gguf_rope_rows(bb, config.num_heads);
      if (fam.gguf_permuted_qk && g->second.size() > 7 && g->second.compare(g->second.size() - 7, 7, ".attn_k") == 0)
        bb = permute_gguf_rope_rows(bb, config.num_kv_heads);
      p.a = u.a;
      p.b = bb;
    }
    scale_times_rank.insert(p.scale * static_cast<float>(u.a.shape[0]));
    pairs.push_back(std::move(p));
  }
  GgufLoraFile out;
  float alpha = 0.0f;
  if (scale_times_rank.size() == 1 && *scale_times_rank.begin() != 0.0f) {
    alpha = *scale_times_rank.begin();
  } else {
    out.scales_folded = true;
    for (auto& p : pairs) p.b = scaled_f32(p.b, p.scale);
  }
  std::sort(pairs.begin(), pairs.end(), [](const Pair& x, const Pair& y) { return x.name < y.name; });
  for (auto& p : pairs) {
    out.tensors.push_back({p.name + ".lora_a", dtype ? convert_tensor(p.a, *dtype) : p.a});
    out.tensors.push_back({p.name + ".lora_b", dtype ? convert_tensor(p.b, *dtype) : p.b});
  }
  out.metadata = {{"general.architecture", std::string(fam.gguf_arch)},
                  {"general.type", std::string("adapter")},
                  {"general.name", std::filesystem::path(src.path).filename().string()},
                  {"adapter.type", std::string("lora")},
                  {"adapter.lora.alpha", alpha}};
  for (const char* k : {"task_name", "prompt_prefix"})
    if (auto it = src.metadata.find(k); it != src.metadata.end())
      out.metadata.push_back({std::string("adapter.lora.") + k, it->second});
  return out;
}

}  // namespace graft::model
