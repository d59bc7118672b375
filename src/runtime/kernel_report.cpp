// A model's weights on the kernels: preparing every matrix, and one line for `graft generate` (and
// /props) saying which weight formats the model holds and which kernels run them.
#include <map>
#include <string>

#include "graft/model/weights.h"
#include "graft/runtime/kernels.h"

namespace graft::runtime {

int64_t prepare_weights(model::ModelWeights& w, ThreadPool& pool, compute::Activations a) {
  int64_t bytes = compute::prepare_weight(w.lm_head, &pool, a);  // (not the embedding: read by rows, as stored)
  for (auto& L : w.layers)
    for (model::Matrix* m : L.matrices()) bytes += compute::prepare_weight(*m, &pool, a);
  return bytes;
}

std::string describe_kernels(const model::ModelWeights& w) {
  std::map<std::string, int> formats;
  bool blocks = false, dense = false, affine = false, interleaved = false, affine_interleaved = false,
       f32_blocks = false, bf16_dot = false;
  auto add = [&](const model::Matrix& m) {
    if (m.quantized()) {
      (m.interleaved ? affine_interleaved : affine) = true;
      ++formats["mlx affine " + std::to_string(m.quant.bits) + "-bit"];
    } else {
      (m.bf16_activations ? bf16_dot
       : m.f32_activations ? f32_blocks
       : dtype_is_quantized(m.dense.dtype) ? blocks
                                           : dense) = true;
      interleaved = interleaved || m.interleaved != nullptr;
      ++formats[std::string(dtype_name(m.dense.dtype))];
    }
  };
  add(w.lm_head);
  for (const auto& L : w.layers)
    for (const model::Matrix* m : L.matrices()) add(*m);
  std::string s = "weights:";
  for (const auto& [name, count] : formats) s += " " + name + " x" + std::to_string(count);
  s += " | kernels:";
  if (dense) s += std::string(" dense ") + compute::matmul_isa();
  if (bf16_dot) s += " bf16-dot bf16-activations avx512bf16 (vdpbf16ps)";
  if (blocks) s += std::string(" gguf-blocks q8-activations ") + compute::matmul_q8_kernel();
  if (f32_blocks) s += std::string(" gguf-blocks f32-activations (dequantized per tile) ") + compute::matmul_isa();
  if (interleaved) s += " (Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K rows interleaved x16)";
  if (affine_interleaved)
    s += std::string(" mlx-affine q8-activations ") + compute::matmul_q8_kernel() + " (affine 4/8-bit rows interleaved x16)";
  if (affine) s += " mlx-affine f32-activations avx2";
  return s;
}

const char* activations_in_force(const model::ModelWeights& w, compute::Activations requested) {
  if (requested == compute::Activations::F32) return "f32";
  // Q8 rounds the activations only of matrices whose kernel takes rounded rows: GGUF blocks and
  // interleaved mlx affine rows (8-bit), dense BF16 on vdpbf16ps (BF16). A model with none of them
  // (F32 or F16 weights, BF16 without AVX512-BF16) runs unrounded activations whatever the option.
  auto rounds = [](const model::Matrix& m) {
    if (m.quantized()) return m.interleaved != nullptr;
    return m.bf16_activations || (dtype_is_quantized(m.dense.dtype) && !m.f32_activations);
  };
  if (rounds(w.lm_head)) return "q8";
  for (const auto& L : w.layers)
    for (const model::Matrix* m : L.matrices())
      if (rounds(*m)) return "q8";
  return "f32";
}

}  // namespace graft::runtime
