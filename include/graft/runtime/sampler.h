// Token sampling. The chain, in order (llama.cpp's): logit bias, repetition penalty over the last
// tokens, presence/frequency penalties over the generated tokens, top-k, top-p, min-p,
// temperature, then a draw from the seeded generator. temperature 0 is greedy (argmax of the
// biased and penalized logits, lowest id on ties), and then top-k/p, min-p do not matter; validate
// refuses a negative one.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

namespace graft::runtime {

struct SamplingParams {
  float temperature = 0.8f;
  int32_t top_k = 40;          // <= 0: off
  float top_p = 0.95f;         // >= 1: off
  float min_p = 0.05f;         // <= 0: off
  float repeat_penalty = 1.0f; // 1: off (llama.cpp rule: divide positive logits, multiply negative)
  int32_t repeat_last_n = 64;
  // OpenAI's penalties, over the generated tokens only (not the prompt, as OpenAI and vLLM):
  // logit[t] -= frequency_penalty * count(t) + presence_penalty * (count(t) > 0). 0: off.
  float presence_penalty = 0.0f;   // [-2, 2]
  float frequency_penalty = 0.0f;  // [-2, 2]
  // Added to a token's logit before anything else; -inf bans the token (llama-server's `false`).
  std::vector<std::pair<int32_t, float>> logit_bias;
  uint64_t seed = 0xC0FFEE;
};

// Validates ranges; throws naming the parameter.
void validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  // `history` is every token so far (prompt and generated), for the repetition penalty;
  // `generated` the generated ones (a suffix of it), for the presence/frequency penalties. With
  // `allowed` (one byte per token, constrained decoding), only ids whose byte is non-zero are
  // candidates; at least one must be, and not banned by the logit bias. Every logit must be finite.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history,
                 std::span<const uint8_t> allowed = {}, std::span<const int32_t> generated = {});

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

int32_t argmax(std::span<const float> logits);

}  // namespace graft::runtime
