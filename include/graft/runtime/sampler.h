// Token sampling. The chain, in order: repetition penalty over the last tokens, top-k, top-p,
// min-p, temperature, then a draw from the seeded generator. temperature <= 0 is greedy (argmax,
// lowest id on ties), and then no other step matters.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace graft::runtime {

struct SamplingParams {
  float temperature = 0.8f;
  int32_t top_k = 40;          // <= 0: off
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off
  float repeat_penalty = 1.0f; // 1: off (llama.cpp rule: divide positive logits, multiply negative)
  int32_t repeat_last_n = 64;
  uint64_t seed = 0xC0FFEE;
};

// Validates ranges; throws naming the parameter.
void validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `history` is every token so far (prompt and generated), for the repetition penalty. With
  // `allowed` (one byte per token, constrained decoding), only ids whose byte is non-zero are
  // candidates; at least one must be. Every logit must still be finite.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history,
                 std::span<const uint8_t> allowed = {});

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace graft::runtime
