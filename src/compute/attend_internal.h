// Internal to the compute layer (ops.cpp dispatches to it): the AVX-512 loops of attention, the
// same bits as ops.cpp's AVX2 ones (attend_avx512.cpp says how).
#pragma once
#include <xmmintrin.h>

#include <cstdint>

namespace graft::compute::detail {

// Each position's key row (scores) and value row (the first values pass) asks for the row 4 KiB on,
// in the AVX2 and the AVX-512 loops: the hardware prefetchers alone kept the loads waiting on
// memory, at 7.6 GB/s where they stream 12 GB/s with it (BM_AttendDecode3B at depth 4096: 57 -> 36
// ms; 2, 4, 8 and 16 KiB: 37, 36, 35, 36 ms). Prefetches past the cache's end never fault.
inline constexpr int64_t kAttendAheadBytes = 4096;
template <class T>
inline void prefetch_row(const T* row, int64_t hd) {
  const char* p = reinterpret_cast<const char*>(row) + kAttendAheadBytes;
  for (int64_t b = 0; b < hd * static_cast<int64_t>(sizeof(T)); b += 64) _mm_prefetch(p + b, _MM_HINT_T0);
}

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
