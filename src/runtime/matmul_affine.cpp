// matmul_affine(): the quantized matrix kernel for mlx-lm affine weights (AVX2/FMA, the project's
// baseline ISA). Codes are unpacked eight at a time into F32 lanes and multiplied with x; each
// group's lane sums are scaled by the group's scale into one running vector per output, and the
// bias part uses per-group sums of x computed once per call.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "graft/core/error.h"
#include "graft/runtime/kernels.h"

namespace graft::runtime {

namespace {

inline float hsum(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Eight codes starting at code index c (a multiple of 8) of one packed row, as floats.
template <int Bits>
inline __m256 codes8(const uint32_t* row, int64_t c) {
  if constexpr (Bits == 4) {
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(row[c / 8])), shifts);
    return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0xF)));
  } else {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 4));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
  }
}

// Rows [i0, i0 + MR) of x against weight rows [j0, j1).
template <int Bits, int MR>
void affine_block(const float* x, int64_t k, const AffineQuantized& w, const float* xsum, float* y, int64_t n,
                  int64_t i0, int64_t j0, int64_t j1, bool accumulate) {
  const int64_t g = w.group_size, groups = k / g, words = k * Bits / 32;
  const uint32_t* packed = w.packed.as<uint32_t>();
  const float* scales = w.scales.as<float>();
  const float* biases = w.biases.as<float>();
  for (int64_t j = j0; j < j1; ++j) {
    const uint32_t* row = packed + j * words;
    const float* s = scales + j * groups;
    const float* b = biases + j * groups;
    __m256 total[MR];
    for (int i = 0; i < MR; ++i) total[i] = _mm256_setzero_ps();
    for (int64_t gi = 0; gi < groups; ++gi) {
      __m256 acc[MR];
      for (int i = 0; i < MR; ++i) acc[i] = _mm256_setzero_ps();
      for (int64_t c = gi * g; c < (gi + 1) * g; c += 8) {
        const __m256 q = codes8<Bits>(row, c);
        for (int i = 0; i < MR; ++i) acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + (i0 + i) * k + c), q, acc[i]);
      }
      const __m256 sv = _mm256_set1_ps(s[gi]);
      for (int i = 0; i < MR; ++i) total[i] = _mm256_fmadd_ps(sv, acc[i], total[i]);
    }
    for (int i = 0; i < MR; ++i) {
      float bias_part = 0.0f;
      const float* xs = xsum + (i0 + i) * groups;
      for (int64_t gi = 0; gi < groups; ++gi) bias_part += b[gi] * xs[gi];
      const float v = hsum(total[i]) + bias_part;
      float& out = y[(i0 + i) * n + j];
      out = accumulate ? out + v : v;
    }
  }
}

template <int Bits>
void affine_cols(const float* x, int64_t m, int64_t k, const AffineQuantized& w, const float* xsum, float* y,
                 int64_t j0, int64_t j1, bool accumulate) {
  const int64_t n = w.rows;
  int64_t i = 0;
  for (; i + 4 <= m; i += 4) affine_block<Bits, 4>(x, k, w, xsum, y, n, i, j0, j1, accumulate);
  for (; i < m; ++i) affine_block<Bits, 1>(x, k, w, xsum, y, n, i, j0, j1, accumulate);
}

}  // namespace

void matmul_affine(ThreadPool& pool, const float* x, int64_t m, int64_t k, const AffineQuantized& w, float* y,
                   bool accumulate) {
  if (w.bits != 4 && w.bits != 8) fail("matmul_affine: ", w.bits, "-bit weights are not supported (4 or 8)");
  if (w.cols != k || k % w.group_size != 0 || w.group_size % 8 != 0)
    fail("matmul_affine: weight [", w.rows, ", ", w.cols, "] (group ", w.group_size, ") does not match k = ", k);
  if (m == 0 || w.rows == 0) return;
  const int64_t groups = k / w.group_size;
  // Per-row, per-group sums of x (the bias term), in ascending column order.
  std::vector<float> xsum(static_cast<size_t>(m * groups));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t gi = 0; gi < groups; ++gi) {
      float s = 0.0f;
      for (int64_t c = gi * w.group_size; c < (gi + 1) * w.group_size; ++c) s += x[i * k + c];
      xsum[i * groups + gi] = s;
    }
  const int64_t n = w.rows;
  const int64_t grain = std::max<int64_t>(1, (32 * 1024) / std::max<int64_t>(1, m * k));
  pool.parallel_for(
      n,
      [&](int64_t j0, int64_t j1) {
        if (w.bits == 4)
          affine_cols<4>(x, m, k, w, xsum.data(), y, j0, j1, accumulate);
        else
          affine_cols<8>(x, m, k, w, xsum.data(), y, j0, j1, accumulate);
      },
      grain);
}

}  // namespace graft::runtime
