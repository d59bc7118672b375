// WeightAdapter: the one normalized form every adapter file is imported into (mlx-lm native,
// Hugging Face PEFT, ComfyUI/kohya/A1111, LyCORIS and PEFT LoKr). Importers are the only code that
// knows file conventions; everything downstream sees targets, factors and resolved scales.
//
// Goals: exact semantics of each ecosystem (scale rules resolved at import, orientation
// normalized), refusal of anything graft cannot apply exactly, naming the file, tensor and reason.
// Non-goals: model knowledge (target names stay as the file spells them; bindings map them).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "graft/core/tensor.h"

namespace graft::adapter {

enum class AdapterFormat { MlxLm, Peft, Kohya, Lycoris, Gguf };
const char* format_name(AdapterFormat f);

// ΔW = scale · B·A with A = [r, in], B = [out, r] (PEFT orientation; mlx-lm files are transposed at
// import). Factors keep their file dtype (F32/F16/BF16) and are read in F32 when merging.
struct LowRankUpdate {
  Tensor a;  // [r, in]
  Tensor b;  // [out, r]
  float scale = 1.0f;
};

// ΔW = scale · kron(W1, W2), W1 = [p, q] and W2 = [m, n] giving ΔW = [p·m, q·n]. Each factor is
// either full (w1) or a low-rank product (w1_a [p, r] · w1_b [r, q]); an empty Tensor means absent.
struct KroneckerUpdate {
  Tensor w1, w1_a, w1_b;
  Tensor w2, w2_a, w2_b;
  float scale = 1.0f;
};

// ΔW = scale · diff (a full additive delta: kohya/LyCORIS `diff`, `diff_b`).
struct DiffUpdate {
  Tensor diff;
  float scale = 1.0f;
};

// W = value, unscaled; wins over every additive update of the same tensor (ComfyUI `set_weight`,
// PEFT `modules_to_save`).
struct Replacement {
  Tensor value;
};

// ΔW = scale · (W1a·W1b) ⊙ (W2a·W2b) (LoHa: PEFT LOHA, LyCORIS hada_*), elementwise product of two
// low-rank products: w1a [out, r1], w1b [r1, in], w2a [out, r2], w2b [r2, in]. Its rank is up to
// r1·r2: row o of ΔW is Σ_{k,l} w1a[o,k]·w2a[o,l]·(w1b[k] ⊙ w2b[l]), which the unfused path uses.
struct HadamardUpdate {
  Tensor w1a, w1b, w2a, w2b;
  float scale = 1.0f;
};

// DoRA (PEFT use_dora, mlx-lm fine_tune_type dora): not additive. With V = W + scale·B·A (W the
// unmerged base), the adapted weight is W' = (m / ‖V‖) ⊙ V, the norm taken per output row of
// [out, in] (PEFT DoraLinearLayer and mlx-lm DoRALinear agree; the norm is a constant, not a
// trained quantity, in both). magnitude = m [out] (PEFT lora_magnitude_vector, mlx `.m`). Applied
// after the updates before it in plan order: W' = f ⊙ (W + earlier updates + s·B·A), f from W alone
// (PEFT's merge and its unmerged forward compose several adapters on one weight this way).
struct DoraUpdate {
  LowRankUpdate lora;
  Tensor magnitude;  // [out] (F32/F16/BF16)
};

using Update = std::variant<LowRankUpdate, KroneckerUpdate, DiffUpdate, Replacement, HadamardUpdate, DoraUpdate>;
// "lora" | "lokr" | "diff" | "replace" | "loha" | "dora"
const char* update_kind(const Update& u);

// One adapted parameter. `module` is the module path as the file spells it, with the format's
// own key suffixes removed ("base_model.model.model.layers.0.self_attn.q_proj",
// "lora_unet_model_layers_0_self_attn_q_proj", "model.layers.0.self_attn.q_proj").
struct AdapterTarget {
  std::string module;
  std::string param = "weight";   // "weight" or "bias"
  Update update;
  std::vector<std::string> keys;  // the file's tensor keys this target came from (for messages)
  // Embedding-layout updates: ΔW is [num_embeddings, dim] (mlx-lm LoRAEmbedding, PEFT
  // lora_embedding_A/B); already normalized so that ΔW = scale · B·A holds as for linears.
  bool embedding = false;
  // For embedding pairs whose orientation only the base's vocabulary size can tell (an mlx-lm
  // LoRAEmbedding lora_a [vocab, r] / lora_b [r, hidden] against a Linear-shaped lora_a
  // [hidden, r] / lora_b [r, vocab]): the other reading, as ΔW's factors. Binding uses `update`
  // when its ΔW matches the base weight, else this one when it does.
  std::optional<Update> transposed;
  // Other module names the same update may belong to, where only the base can tell: a PEFT
  // target_parameters level (PEFT nests a module's parameters in the model's parameter order, which
  // the file does not record; at equal ranks either level may be either parameter). Binding takes
  // the one name whose base weight has ΔW's shape and refuses when none or several do.
  std::vector<std::string> alt_modules;
};

// A full copy of a base weight that PEFT saves beside an adapted embedding / lm_head
// (`save_embedding_layers`: `<module>.base_layer.weight`). It is the frozen base value at training
// time (with extra rows when the vocabulary was resized), not an update: graft never applies it.
// The importer checks its shape against the module's ΔW; a binding may compare it with the model.
struct BaseWeightCopy {
  std::string module;  // as for AdapterTarget
  std::string param = "weight";
  Tensor value;
  std::string key;
};

struct WeightAdapter {
  std::string path;  // the directory or file it was read from
  AdapterFormat format = AdapterFormat::Peft;
  std::vector<AdapterTarget> targets;  // sorted by (module, param); at most one per parameter
  std::vector<BaseWeightCopy> base_copies;
  // Informational metadata kept from the config (rank, alpha, target_modules, base model...).
  // GGUF adapters keep every general.* / adapter.* key verbatim, plus "architecture", "alpha" and,
  // when the file sets them, "task_name" and "prompt_prefix" (adapter.lora.task_name /
  // adapter.lora.prompt_prefix, what llama.cpp's server reports per adapter).
  std::map<std::string, std::string> metadata;
};

// Detects the format and imports it:
//  * a directory with adapter_config.json holding `peft_type` → PEFT (LORA, LOKR);
//  * a directory whose adapter_config.json holds `fine_tune_type` or `lora_parameters` → mlx-lm
//    native (adapters.safetensors, else adapter_model.safetensors);
//  * a single .safetensors file → ComfyUI / kohya / A1111 / LyCORIS by its keys. A config file
//    lying beside it is never read;
//  * a .gguf file with general.type "adapter" → llama.cpp LoRA (convert_lora_to_gguf.py). Its
//    modules keep llama.cpp's tensor names; model/ binds them (and un-permutes q/k rows, see
//    model/gguf_adapters.h) since that needs the base's family and head counts.
// Scales are resolved here (metadata scale only; the user's strength is applied at bind time).
// Embedding layout is recognized by module name where the file format does not say it (mlx-lm:
// a module whose last path component is `embed_tokens`), since the importer has no model.
// Throws graft::Error naming the file, tensor key (or config field) and reason for anything that
// cannot be applied exactly. metadata["file"] names the tensor file read (directory formats).
WeightAdapter read_weight_adapter(const std::string& path);

}  // namespace graft::adapter
