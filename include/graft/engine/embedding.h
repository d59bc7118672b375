// Embeddings from a decoder's hidden states: the final norm's output of each prompt token (what
// the head would read; Transformer SequenceInput::hidden), pooled into one vector per input and
// normalized by llama.cpp's embd_normalize rule (llama-server's /embedding and /v1/embeddings).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "graft/model/config.h"

namespace graft::engine {

// llama-server's --pooling values but rank (a reranker head graft does not have).
enum class Pooling { None, Mean, Cls, Last };

const char* pooling_name(Pooling p);
// "none", "mean", "cls", "last"; anything else nullopt.
std::optional<Pooling> parse_pooling(std::string_view name);
// The model's own pooling (GGUF <arch>.pooling_type), else Last: the one a causal decoder's last
// token summarizes everything before it (llama-server would fall back to none, which its OpenAI
// route refuses). Throws kUnsupported for a declared rank pooling (a reranker) or an unknown value.
Pooling default_pooling(const model::ModelConfig& config);

// rows: [n, dim], one per token. Mean: the average over the n rows (summed in order, in double);
// Cls: row 0; Last: row n - 1; None: the rows unchanged (n * dim values).
std::vector<float> pool_rows(std::span<const float> rows, int64_t dim, Pooling pooling);

// llama.cpp's common_embd_normalize: -1 none; 0 scaled so the largest |x| is 32760 (int16 range);
// 1 taxicab (sum |x| = 1); 2 Euclidean (L2 = 1, the default); p > 2 p-norm. A zero vector stays
// zero. Throws kBadRequest for mode < -1.
void normalize_embedding(std::span<float> v, int mode);

}  // namespace graft::engine
