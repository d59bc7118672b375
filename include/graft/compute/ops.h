// Small vector ops of the forward pass, all in F32 on the calling thread (AVX2, x86-64-v3
// baseline). Each is deterministic: a fixed summation order for a given n. `out` may alias the
// input it is computed from (in-place use is fine).
#pragma once
#include <cstdint>

namespace graft::compute {

// out = x * rsqrt(mean(x²) + eps) * weight, as transformers' LlamaRMSNorm computes it in F32:
// (x * r) * w with r = 1 / sqrt(mean + eps).
void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out);

// out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// out = gelu_tanh(gate) * up: Gemma's GeGLU, gelu with the tanh approximation (gelu_pytorch_tanh).
void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out);

// In place: x = cap · tanh(x / cap) (Gemma 2's attention-score and final-logit soft-capping).
void soft_cap(float* x, int64_t n, float cap);

// In place: x = exp(x - max) / sum. Entries of -inf become 0; if every entry is -inf the row has
// no valid position and becomes all 0 (rather than NaN).
void softmax(float* x, int64_t n);

// x += y.
void add(float* x, const float* y, int64_t n);
// y += a * x.
void axpy(float a, const float* x, float* y, int64_t n);
// x *= a.
void scale(float* x, float a, int64_t n);
// Σ a[i] * b[i] with F32 accumulation.
float dot(const float* a, const float* b, int64_t n);

// One query row's attention over n positions whose keys and values are `stride` floats apart:
// scores[j] = dot(q, k_j, hd)·scale, softmax, out = Σ_j scores[j]·v_j. The same operations, in the
// same order, as dot, softmax and a zeroed out followed by axpy per position (so the same bits);
// out is kept in registers 64 columns at a time. scores holds n floats. softcap > 0: the scaled
// scores are soft-capped (soft_cap) before the softmax.
// heads > 1: that many query heads sharing these keys and values (grouped-query attention), q and
// out holding them hd apart, scores heads·n floats; each head's result is the one-head call's bit for
// bit, but each key and value is loaded once per pass of up to three (scores) or two (values) heads
// (AVX-512 machines, head sizes a multiple of 32: four, the same bits on wider vectors).
void attend(const float* q, const float* k, const float* v, int64_t stride, int64_t n, int64_t hd, float scale,
            float* scores, float* out, int64_t heads = 1, float softcap = 0);

// attend over keys and values stored as F16 or BF16 bits (`stride` elements apart): each element is
// widened to F32 exactly as it is loaded, then the operations are attend's, in the same order, so
// the result is bit for bit attend's on the widened keys and values (no conversion pass, no copy).
void attend_f16(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n, int64_t hd,
                float scale, float* scores, float* out, int64_t heads = 1, float softcap = 0);
void attend_bf16(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, int64_t n, int64_t hd,
                 float scale, float* scores, float* out, int64_t heads = 1, float softcap = 0);

// e^x for n values, vectorized (relative error within ~2 ulp of expf; overflow to +inf, underflow
// through the subnormals to 0, NaN kept). out may alias x.
void exp_f32(const float* x, float* out, int64_t n);

}  // namespace graft::compute
