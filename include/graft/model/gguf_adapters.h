// llama.cpp GGUF LoRA adapters on a Llama-family model. The adapter core imports them with
// llama.cpp's tensor names ("blk.0.attn_q", "token_embd", "output"); binding them needs what only
// the model knows: the family table's GGUF names for its Hugging Face tensors, the GGUF
// architecture a base of this family has, and its head counts, because llama.cpp's converter
// permutes the rows of q/k (and so the rows of an adapter's lora_b for q/k) into its RoPE layout.
#pragma once
#include <optional>
#include <vector>

#include "graft/adapter/bind.h"
#include "graft/adapter/bindings.h"
#include "graft/core/tensor.h"
#include "graft/io/gguf_writer.h"
#include "graft/io/tensor_source.h"
#include "graft/model/config.h"

namespace graft::model {

// llama.cpp stores Hugging Face row (h, s·half + j) of a q/k projection at row (h, 2j + s) (RoPE
// pairs interleaved per head). Returns a new owned tensor, same dtype and shape, in Hugging Face
// row order. Rows are moved as bytes (any dtype, 1-D or 2-D); rows must split into n_heads heads
// of an even size. Used for GGUF base tensors and for GGUF adapters' lora_b alike.
Tensor unpermute_gguf_rope_rows(const Tensor& t, int64_t n_heads);
// The inverse: Hugging Face row order into llama.cpp's (what its converter does to q/k).
Tensor permute_gguf_rope_rows(const Tensor& t, int64_t n_heads);

// Registers llama.cpp's name of every model tensor present in `b` ("blk.{i}.attn_q" for
// "model.layers.{i}.self_attn.q_proj.weight", "token_embd", "output").
void add_gguf_tensor_aliases(adapter::WeightAdapterBindings& b, const ModelConfig& config);

// Every GGUF adapter among `uses` checked and put in this model's row order: general.architecture
// must be the GGUF architecture of config's family (else an error naming the file, with llama.cpp's
// "maybe wrong base model?" hint); on families whose GGUF q/k rows are permuted, the adapter is
// replaced by a copy whose q/k lora_b rows are un-permuted with the base's head counts (exactly as
// the base's own GGUF q/k are). Other adapters pass through unchanged.
std::vector<adapter::AdapterUse> gguf_adapters_for_model(const ModelConfig& config,
                                                         const std::vector<adapter::AdapterUse>& uses);

// One adapter (with its user strength) as a llama.cpp GGUF LoRA file for this model, as
// convert_lora_to_gguf.py would write it: llama.cpp tensor names, lora_a [r, in] / lora_b [out, r]
// (token_embd: lora_a [vocab, r], lora_b [dim, r]), q/k lora_b rows permuted into llama.cpp's order
// on permuted families, fused projections (qkv_proj, gate_up_proj) split by rows. The scale is
// written as adapter.lora.alpha = s·r when every pair has the same s·r (factors unchanged);
// otherwise each s is folded into its lora_b (computed in F32) and alpha is 0 (scale 1).
// Refuses updates without a low-rank form (LoKr, diff, replacements), naming them.
struct GgufLoraFile {
  std::vector<std::pair<std::string, io::GgufWriteValue>> metadata;
  std::vector<io::GgufWriteTensor> tensors;
  bool scales_folded = false;
};
GgufLoraFile gguf_lora_for_model(const ModelConfig& config, const io::TensorSource& source,
                                 const adapter::AdapterUse& use, std::optional<DType> dtype = std::nullopt);

}  // namespace graft::model
