#include "graft/model/gguf_adapters.h"

#include <cstring>
#include <map>

#include "graft/core/error.h"
#include "graft/model/family.h"

namespace graft::model {

Tensor unpermute_gguf_rope_rows(const Tensor& t, int64_t n_heads) {
  const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
  if (t.shape.empty() || t.shape.size() > 2 || n_heads <= 0 || rows % n_heads != 0 || (rows / n_heads) % 2 != 0)
    fail("un-permuting GGUF q/k rows: shape ", shape_str(t.shape), " does not split into ", n_heads,
         " heads of an even size");
  const size_t row_bytes = static_cast<size_t>(t.nbytes() / rows);
  const int64_t head_dim = rows / n_heads, half = head_dim / 2;
  const auto* src = static_cast<const uint8_t*>(t.data);
  std::vector<uint8_t> out(static_cast<size_t>(t.nbytes()));
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t j = 0; j < half; ++j)
        std::memcpy(&out[static_cast<size_t>(h * head_dim + s * half + j) * row_bytes],
                    src + static_cast<size_t>(h * head_dim + j * 2 + s) * row_bytes, row_bytes);
  return Tensor::owned(t.dtype, t.shape, std::move(out));
}

namespace {

// llama.cpp module name ("blk.0.attn_q") -> Hugging Face tensor name, for every layer tensor.
std::map<std::string, std::string> gguf_module_names(const ModelConfig& c) {
  std::map<std::string, std::string> out = {{"token_embd", kEmbedName}, {"output", kLmHeadName}};
  for (int64_t i = 0; i < c.num_layers; ++i)
    for (const auto& s : layer_tensor_specs()) {
      std::string g = s.gguf_suffix;
      const size_t dot = g.rfind('.');
      if (g.compare(dot, std::string::npos, ".weight") != 0) continue;  // biases and norms take no LoRA pair
      out["blk." + std::to_string(i) + "." + g.substr(0, dot)] = hf_layer_tensor_name(i, s.role);
    }
  return out;
}

}  // namespace

void add_gguf_tensor_aliases(adapter::WeightAdapterBindings& b, const ModelConfig& config) {
  for (const auto& [gguf, hf] : gguf_module_names(config))
    if (b.tensor_shape(hf)) b.add_alias(gguf, hf);
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

}  // namespace graft::model
