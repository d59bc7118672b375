// A model's weights on the kernels: preparing every matrix, and one line for `graft generate` (and
// /props) saying which weight formats the model holds and which kernels run them.
#include <atomic>
#include <map>
#include <string>
#include <vector>

#include "graft/model/weights.h"
#include "graft/runtime/kernels.h"

namespace graft::runtime {

// Large matrices one at a time, each split over the pool; small ones (a MoE file's thousands of
// experts) whole, many at once: one parallel_for per expert spent more on waking the threads than
// on the copy.
int64_t prepare_weights(model::ModelWeights& w, ThreadPool& pool, compute::Activations a) {
  constexpr int64_t kSmall = int64_t{4} << 20;  // bytes
  std::vector<model::Matrix*> small;
  int64_t bytes = 0;
  auto prepare = [&](model::Matrix& m) {
    if (m.nbytes() < kSmall)
      small.push_back(&m);
    else
      bytes += compute::prepare_weight(m, &pool, a);
  };
  prepare(w.lm_head);  // (not the embedding: read by rows, as stored)
  for (auto& L : w.layers)
    for (model::Matrix* m : L.matrices()) prepare(*m);
  std::atomic<int64_t> small_bytes{0};
  pool.parallel_for(static_cast<int64_t>(small.size()), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) small_bytes += compute::prepare_weight(*small[i], nullptr, a);
  }, 1, 4);
  return bytes + small_bytes;
}

std::string describe_kernels(const model::ModelWeights& w) {
  std::map<std::string, int> formats;
  std::vector<compute::WeightKind> kinds;
  auto add = [&](const model::Matrix& m) {
    kinds.push_back(m.kind());
    ++formats[m.quantized() ? "mlx affine " + std::to_string(m.quant.bits) + "-bit" : std::string(dtype_name(m.dense.dtype))];
  };
  add(w.lm_head);
  for (const auto& L : w.layers)
    for (const model::Matrix* m : L.matrices()) add(*m);
  std::string s = "weights:";
  for (const auto& [name, count] : formats) s += " " + name + " x" + std::to_string(count);
  return s + " | kernels:" + compute::describe_kernels(kinds);
}

const char* activations_in_force(const model::ModelWeights& w, compute::Activations requested) {
  if (requested == compute::Activations::F32) return "f32";
  // Q8 rounds the activations only of matrices whose kernel takes rounded rows: GGUF blocks and
  // interleaved mlx affine rows (8-bit), dense BF16 on vdpbf16ps (BF16). A model with none of them
  // (F32 or F16 weights, BF16 without AVX512-BF16) runs unrounded activations whatever the option.
  if (compute::rounds_activations(w.lm_head.kind())) return "q8";
  for (const auto& L : w.layers)
    for (const model::Matrix* m : L.matrices())
      if (compute::rounds_activations(m->kind())) return "q8";
  return "f32";
}

}  // namespace graft::runtime
