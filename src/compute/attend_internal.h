// Internal to the compute layer (ops.cpp dispatches to it): the AVX-512 loops of attention, the
// same bits as ops.cpp's AVX2 ones (attend_avx512.cpp says how).
#pragma once
#include <cstdint>

namespace graft::compute::detail {

// How a KV cache stores keys and values.
enum class KvType { F32, F16, BF16 };

// scores[h·n + j] = dot(q_h, k_j)·scale for heads h < heads (q rows hd apart), n keys `stride`
// elements apart; hd a multiple of 32. ops' dot bit for bit.
void attend_scores_avx512(KvType t, const float* q, const void* k, int64_t stride, int64_t n, int64_t hd, float scale,
                          int64_t heads, float* scores);
// out[h·hd + c] = Σ_j scores[h·n + j]·v_j[c], one fma chain per element from 0 over j ascending;
// hd a multiple of 32.
void attend_values_avx512(KvType t, const float* scores, const void* v, int64_t stride, int64_t n, int64_t hd,
                          int64_t heads, float* out);

}  // namespace graft::compute::detail
