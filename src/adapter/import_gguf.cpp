// llama.cpp GGUF LoRA adapters (convert_lora_to_gguf.py output): read with graft's GGUF reader
// (io/gguf.h), checked as llama.cpp's loader checks them (src/llama-adapter.cpp), normalized to
// ΔW = s·B·A. Module names stay as the file spells them ("blk.0.attn_q", "token_embd", "output");
// model/ binds them through the family table's GGUF names and undoes the converter's q/k row
// permutation (it needs the base's head counts, which the adapter file does not carry).
//
// File conventions (llama.cpp, reading of the code):
//   * general.type = "adapter", adapter.type = "lora", general.architecture = the base's GGUF arch;
//   * adapter.lora.alpha (float32): s = alpha / rank with rank = columns of lora_b, and s = 1 when
//     alpha is 0 or missing (llama_adapter_lora_weight::get_scale);
//   * "<tensor>.lora_a" with shape [r, in] and "<tensor>.lora_b" with shape [out, r] (GGUF ne
//     reversed), i.e. PEFT's orientation; "token_embd.weight" pairs are flipped for get_rows:
//     lora_a [vocab, r], lora_b [dim, r], ΔE = s·lora_a·lora_bᵀ;
//   * mergekit's "*_norm.weight" full tensors are skipped by llama.cpp; graft refuses them instead
//     of ignoring part of a file.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "graft/core/convert.h"
#include "graft/io/gguf.h"
#include "import_common.h"

namespace graft::adapter::detail {

namespace {

constexpr const char* kHint = " (hint: maybe wrong base model?)";

// A factor as graft keeps it: F32/F16/BF16 views stay as stored, block-quantized factors (Q8_0 from
// --outtype q8_0, or Q4_0/Q4_1) are dequantized to F32 once; every value must be finite.
Tensor read_factor(const io::GgufFile& g, const io::GgufTensorInfo& info) {
  Tensor t = g.tensor(info.name);
  const bool dense = t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16;
  if (!dense && !dtype_is_quantized(t.dtype))
    fail("GGUF adapter '", g.path(), "': tensor '", info.name, "' has type ", io::ggml_type_name(info.ggml_type),
         "; expected F32, F16, BF16 or a block type graft dequantizes (Q8_0, Q4_0, Q4_1)");
  Tensor f = to_f32(t);
  const float* v = f.as<float>();
  for (int64_t i = 0; i < f.numel(); ++i)
    if (!std::isfinite(v[i]))
      fail("GGUF adapter '", g.path(), "': tensor '", info.name, "' holds a non-finite value (", v[i],
           " at element ", i, "); expected finite values");
  if (info.shape.size() != 2)
    fail("GGUF adapter '", g.path(), "': tensor '", info.name, "' has shape ", shape_str(info.shape),
         "; expected a 2-D LoRA factor");
  return dense ? t : f;
}

std::string scalar_string(const io::GgufValue& v) {
  struct V {
    std::string operator()(int64_t x) const { return std::to_string(x); }
    std::string operator()(uint64_t x) const { return std::to_string(x); }
    std::string operator()(double x) const { return num_str(x); }
    std::string operator()(bool x) const { return x ? "true" : "false"; }
    std::string operator()(const std::string& x) const { return x; }
    std::string operator()(const io::GgufValue::Array& a) const { return "[array of " + std::to_string(a.size()) + "]"; }
  };
  return std::visit(V{}, v.value);
}

struct Pair {
  const io::GgufTensorInfo* a = nullptr;
  const io::GgufTensorInfo* b = nullptr;
};

}  // namespace

WeightAdapter import_gguf(const std::string& path) {
  auto g = io::GgufFile::open(path);
  const std::string type = g->optional_string("general.type").value_or("");
  if (type != "adapter")
    fail("GGUF '", path, "': general.type is ", type.empty() ? "missing" : "'" + type + "'",
         "; expected 'adapter' (a llama.cpp LoRA adapter from convert_lora_to_gguf.py)",
         type == "model" || type.empty() ? "; a GGUF model is passed with --model, not as an adapter" : "");
  const std::string adapter_type = g->optional_string("adapter.type").value_or("");
  if (adapter_type != "lora")
    fail("GGUF adapter '", path, "': adapter.type is ", adapter_type.empty() ? "missing" : "'" + adapter_type + "'",
         "; expected 'lora' (control vectors and other adapter types are not read)");
  if (g->has("adapter.alora.invocation_tokens"))
    fail_as(ErrorKind::kUnsupported, "GGUF adapter '", path,
            "': adapter.alora.invocation_tokens is set: an activated LoRA (aLoRA) applies only after its invocation "
            "tokens, which graft does not implement; refusing rather than applying it to every token");
  const std::string arch = g->require_string("general.architecture");
  const double alpha = g->optional_float("adapter.lora.alpha").value_or(0.0);
  if (!std::isfinite(alpha)) fail("GGUF adapter '", path, "': adapter.lora.alpha is not finite");

  WeightAdapter out;
  out.path = path;
  out.format = AdapterFormat::Gguf;
  for (const auto& [key, value] : g->metadata())
    if (key.rfind("general.", 0) == 0 || key.rfind("adapter.", 0) == 0) out.metadata[key] = scalar_string(value);
  out.metadata["architecture"] = arch;
  out.metadata["alpha"] = num_str(alpha);
  if (auto s = g->optional_string("adapter.lora.task_name")) out.metadata["task_name"] = *s;
  if (auto s = g->optional_string("adapter.lora.prompt_prefix")) out.metadata["prompt_prefix"] = *s;

  std::map<std::string, Pair> pairs;  // model tensor name ("blk.0.attn_q.weight") -> its factors
  std::map<std::string, int> stored_types;  // GGML type -> tensors (shown by inspect; Q8_0 is read as F32)
  for (const auto& t : g->tensors()) {
    ++stored_types[io::ggml_type_name(t.ggml_type)];
    if (ends_with(t.name, ".lora_a")) {
      pairs[t.name.substr(0, t.name.size() - 7)].a = &t;
    } else if (ends_with(t.name, ".lora_b")) {
      pairs[t.name.substr(0, t.name.size() - 7)].b = &t;
    } else if (ends_with(t.name, "_norm.weight")) {
      fail_as(ErrorKind::kUnsupported, "GGUF adapter '", path, "': tensor '", t.name,
              "' is a full norm weight (mergekit-extract-lora); llama.cpp skips these, graft refuses rather than "
              "apply part of the file");
    } else {
      fail("GGUF adapter '", path, "': tensor '", t.name, "' has unexpected suffix; expected '<tensor>.lora_a' or "
           "'<tensor>.lora_b'");
    }
  }
  for (const auto& [name, p] : pairs) {
    if (!p.a || !p.b)
      fail("GGUF adapter '", path, "': LoRA tensor pair for '", name, "' is missing one component ('", name,
           p.a ? ".lora_b" : ".lora_a", "')");
    if (!ends_with(name, ".weight"))
      fail("GGUF adapter '", path, "': tensor '", (p.a->name), "' does not adapt a '.weight' tensor; expected "
           "'<tensor>.weight.lora_a'");
    AdapterTarget target;
    target.module = name.substr(0, name.size() - 7);
    target.keys = {p.a->name, p.b->name};
    LowRankUpdate u;
    const Tensor a = read_factor(*g, *p.a), b = read_factor(*g, *p.b);
    const int64_t rank = b.shape[1];  // llama.cpp: rank = lora_b->ne[0]
    if (target.module == "token_embd") {
      // Flipped for get_rows: ΔE[vocab, dim] = s·lora_a[vocab, r]·lora_b[dim, r]ᵀ.
      if (a.shape[1] != rank)
        fail("GGUF adapter '", path, "': tensor '", p.a->name, "' has shape ", shape_str(a.shape), " and '",
             p.b->name, "' ", shape_str(b.shape), "; expected lora_a [vocab, r] and lora_b [dim, r] for token_embd",
             kHint);
      u.b = a;
      u.a = transpose_2d(b);
      target.embedding = true;
    } else {
      if (a.shape[0] != rank)
        fail("GGUF adapter '", path, "': lora_a tensor '", p.a->name, "' is not transposed: shape ",
             shape_str(a.shape), " with lora_b ", shape_str(b.shape), "; expected lora_a [r, in] and lora_b [out, r] "
             "(hint: adapter from the old \"finetune\" example is no longer supported)");
      u.a = a;
      u.b = b;
    }
    u.scale = alpha != 0 ? static_cast<float>(alpha / static_cast<double>(rank)) : 1.0f;
    target.update = std::move(u);
    out.targets.push_back(std::move(target));
  }
  std::string types;
  for (const auto& [name, n] : stored_types) types += (types.empty() ? "" : ", ") + name + " x" + std::to_string(n);
  out.metadata["tensor_types"] = types;
  if (out.targets.empty()) fail("GGUF adapter '", path, "': no LoRA tensors (expected '<tensor>.lora_a/.lora_b')");
  finalize_targets(out, path);
  return out;
}

}  // namespace graft::adapter::detail
