// matmul_affine(): the quantized matrix kernel for mlx-lm affine weights (AVX2/FMA, the project's
// baseline ISA). Codes are unpacked into F32 lanes and multiplied with x; each block's lane sums
// are scaled by their group's scale into one running vector per output, and the bias part uses
// per-group sums of x computed once per call.
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

// Codes are read a block of eight uint32 words at a time (64 4-bit or 32 8-bit codes). Shifting
// all eight words by the same amount gives one code per word: word l, slot j holds column
// l·P + j (P = codes per word). x is rearranged once per call into the same slot-major order
// (xp[block][j][l] = x[block·8P + l·P + j]), so each shift meets a contiguous vector of x and no
// per-word broadcast or variable shift is needed.
template <int Bits>
constexpr int kPerWord = 32 / Bits;
template <int Bits>
constexpr int kBlockCols = 8 * kPerWord<Bits>;

template <int Bits>
void permute_x(const float* x, int64_t m, int64_t k, float* xp) {
  constexpr int P = kPerWord<Bits>, B = kBlockCols<Bits>;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t b0 = 0; b0 < k; b0 += B)
      for (int j = 0; j < P; ++j)
        for (int l = 0; l < 8; ++l) xp[i * k + b0 + j * 8 + l] = x[i * k + b0 + l * P + j];
}

// Rows [i0, i0 + MR) of x (slot-major) against weight rows [j0, j1). Per block: the slots' products
// go into two accumulators (even/odd slots), their sum is multiplied by the block's per-lane scales
// (lanes of one block can belong to two groups when a group is 32 4-bit codes) and added to the
// running total; the bias part Σ_g b_g·Σ_{c∈g} x_c is added after the lane sum. The order is the
// same for every MR, so a row's result does not depend on the rows that share its tile.
template <int Bits, int MR>
void affine_block(const float* xp, int64_t k, const AffineQuantized& w, const float* xsum, float* y, int64_t n,
                  int64_t i0, int64_t j0, int64_t j1, bool accumulate) {
  constexpr int P = kPerWord<Bits>, B = kBlockCols<Bits>;
  const int64_t g = w.group_size, groups = k / g, words = k * Bits / 32;
  // Not necessarily 4-byte aligned (safetensors offsets); only read through unaligned vector loads.
  const uint32_t* packed = static_cast<const uint32_t*>(w.packed.data);
  std::vector<float> sbuf(static_cast<size_t>(groups)), bbuf(static_cast<size_t>(groups));
  const float* s = sbuf.data();
  const float* b = bbuf.data();
  const uint8_t* scale_bytes = static_cast<const uint8_t*>(w.scales.data);
  const uint8_t* bias_bytes = static_cast<const uint8_t*>(w.biases.data);
  const int64_t param_row_bytes = dtype_bytes(w.scales.dtype, groups);
  const __m256i mask = _mm256_set1_epi32((1 << Bits) - 1);
  const bool split_block = g < B;  // 32-code groups of 4-bit weights: lanes 0-3 and 4-7 differ
  for (int64_t j = j0; j < j1; ++j) {
    const uint32_t* row = packed + j * words;
    affine_row_params(w, j, sbuf.data(), bbuf.data());
    __m256 total[MR];
    for (int i = 0; i < MR; ++i) total[i] = _mm256_setzero_ps();
    // Decode streams the codes once (84 MB per token on SmolLM2 at 4 bits, far beyond L3): fetch
    // each line 4 KiB ahead (rows are contiguous), and the scales/biases of a row 32 rows ahead.
    _mm_prefetch(reinterpret_cast<const char*>(scale_bytes + (j + 32) * param_row_bytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(bias_bytes + (j + 32) * param_row_bytes), _MM_HINT_T0);
    for (int64_t c0 = 0; c0 < k; c0 += B) {
      if ((c0 / P) % 16 == 0) _mm_prefetch(reinterpret_cast<const char*>(row + c0 / P) + 4096, _MM_HINT_T0);
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c0 / P));
      __m256 acc[MR][2];
      for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
#pragma GCC unroll 8
      for (int t = 0; t < P; ++t) {
        __m256i codes = t == 0 ? v : _mm256_srli_epi32(v, t * Bits);
        if (t != P - 1) codes = _mm256_and_si256(codes, mask);
        const __m256 q = _mm256_cvtepi32_ps(codes);
        for (int i = 0; i < MR; ++i)
          acc[i][t & 1] = _mm256_fmadd_ps(_mm256_loadu_ps(xp + (i0 + i) * k + c0 + t * 8), q, acc[i][t & 1]);
      }
      const int64_t gi = c0 / g;
      const __m256 sv = split_block ? _mm256_setr_m128(_mm_set1_ps(s[gi]), _mm_set1_ps(s[gi + 1]))
                                    : _mm256_set1_ps(s[gi]);
      for (int i = 0; i < MR; ++i) total[i] = _mm256_fmadd_ps(sv, _mm256_add_ps(acc[i][0], acc[i][1]), total[i]);
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
void affine_cols(const float* xp, int64_t m, int64_t k, const AffineQuantized& w, const float* xsum, float* y,
                 int64_t j0, int64_t j1, bool accumulate) {
  const int64_t n = w.rows;
  int64_t i = 0;
  for (; i + 2 <= m; i += 2) affine_block<Bits, 2>(xp, k, w, xsum, y, n, i, j0, j1, accumulate);
  for (; i < m; ++i) affine_block<Bits, 1>(xp, k, w, xsum, y, n, i, j0, j1, accumulate);
}

}  // namespace

void matmul_affine(ThreadPool& pool, const float* x, int64_t m, int64_t k, const AffineQuantized& w, float* y,
                   bool accumulate) {
  if (w.bits != 4 && w.bits != 8) fail("matmul_affine: ", w.bits, "-bit weights are not supported (4 or 8)");
  if (w.cols != k || k % w.group_size != 0 || w.group_size % 32 != 0)
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
  // k is a multiple of the group size (>= 32), so of 32 8-bit codes; 4-bit blocks hold 64 codes.
  if (w.bits == 4 && k % 64 != 0) fail("matmul_affine: 4-bit rows of ", k, " columns are not whole 64-code blocks");
  std::vector<float> xp(static_cast<size_t>(m * k));
  if (w.bits == 4)
    permute_x<4>(x, m, k, xp.data());
  else
    permute_x<8>(x, m, k, xp.data());
  const int64_t n = w.rows;
  const int64_t grain = std::max<int64_t>(1, (32 * 1024) / std::max<int64_t>(1, m * k));
  pool.parallel_for(
      n,
      [&](int64_t j0, int64_t j1) {
        if (w.bits == 4)
          affine_cols<4>(xp.data(), m, k, w, xsum.data(), y, j0, j1, accumulate);
        else
          affine_cols<8>(xp.data(), m, k, w, xsum.data(), y, j0, j1, accumulate);
      },
      grain);
}

}  // namespace graft::runtime
