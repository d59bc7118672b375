// matmul_affine(): the quantized matrix kernel for mlx-lm affine weights (AVX2/FMA, the project's
// baseline ISA). Codes are unpacked into F32 lanes and multiplied with x; each block's lane sums
// are scaled by their group's scale into one running vector per output, and the bias part uses
// per-group sums of x computed once per call.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "graft/core/error.h"
#include "graft/compute/kernels.h"
#include "compute/matmul_internal.h"

namespace graft::compute {

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

// Scales and biases are read in their stored dtype (F32, or BF16 widened by a shift).
inline float param_at(const float* p, int64_t i) { return p[i]; }
inline float param_at(const uint16_t* p, int64_t i) {
  uint16_t h;
  std::memcpy(&h, p + i, 2);
  return bf16_to_f32(h);
}

// Rows [i0, i0 + MR) of x (slot-major) against weight rows [j, j + NR). Per block: the slots'
// products go into two accumulators (even/odd slots), their sum is multiplied by the block's
// per-lane scales (lanes of one block can belong to two groups when a group is 32 4-bit codes)
// and added to the running total; the bias part Σ_g b_g·Σ_{c∈g} x_c is added after the lane sum.
// Every output element goes through the same sequence whatever MR and NR, so a row's result does
// not depend on the rows or columns that share its tile.
template <int Bits, int MR, int NR, class S>
inline void affine_tile(const float* xp, int64_t k, const uint32_t* packed, const S* scales, const S* biases,
                        int64_t groups, int64_t g, const float* xsum, float* y, int64_t n, int64_t i0, int64_t j,
                        bool accumulate) {
  constexpr int P = kPerWord<Bits>, B = kBlockCols<Bits>;
  const int64_t words = k * Bits / 32;
  const __m256i mask = _mm256_set1_epi32((1 << Bits) - 1);
  const bool split_block = g < B;  // 32-code groups of 4-bit weights: lanes 0-3 and 4-7 differ
  const uint32_t* row[NR];
  for (int r = 0; r < NR; ++r) {
    row[r] = packed + (j + r) * words;
    // Decode streams the codes once (far beyond L3): scales/biases 32 rows ahead; codes below.
    _mm_prefetch(reinterpret_cast<const char*>(scales + (j + r + 32) * groups), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(biases + (j + r + 32) * groups), _MM_HINT_T0);
  }
  __m256 total[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < NR; ++r) total[i][r] = _mm256_setzero_ps();
  for (int64_t c0 = 0; c0 < k; c0 += B) {
    __m256i v[NR];
    for (int r = 0; r < NR; ++r) {
      // Rows are contiguous: fetching each line 4 KiB ahead runs into the next rows.
      if ((c0 / P) % 16 == 0) _mm_prefetch(reinterpret_cast<const char*>(row[r] + c0 / P) + 4096, _MM_HINT_T0);
      v[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[r] + c0 / P));
    }
    __m256 acc[MR][NR][2];
    for (int i = 0; i < MR; ++i)
      for (int r = 0; r < NR; ++r) acc[i][r][0] = acc[i][r][1] = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int t = 0; t < P; ++t) {
      __m256 q[NR];
      for (int r = 0; r < NR; ++r) {
        __m256i codes = t == 0 ? v[r] : _mm256_srli_epi32(v[r], t * Bits);
        if (t != P - 1) codes = _mm256_and_si256(codes, mask);
        q[r] = _mm256_cvtepi32_ps(codes);
      }
      for (int i = 0; i < MR; ++i) {
        const __m256 xv = _mm256_loadu_ps(xp + (i0 + i) * k + c0 + t * 8);
        for (int r = 0; r < NR; ++r) acc[i][r][t & 1] = _mm256_fmadd_ps(xv, q[r], acc[i][r][t & 1]);
      }
    }
    const int64_t gi = c0 / g;
    for (int r = 0; r < NR; ++r) {
      const S* sr = scales + (j + r) * groups;
      const __m256 sv = split_block ? _mm256_setr_m128(_mm_set1_ps(param_at(sr, gi)), _mm_set1_ps(param_at(sr, gi + 1)))
                                    : _mm256_set1_ps(param_at(sr, gi));
      for (int i = 0; i < MR; ++i)
        total[i][r] = _mm256_fmadd_ps(sv, _mm256_add_ps(acc[i][r][0], acc[i][r][1]), total[i][r]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    const S* br = biases + (j + r) * groups;
    for (int i = 0; i < MR; ++i) {
      float bias_part = 0.0f;
      const float* xs = xsum + (i0 + i) * groups;
      for (int64_t gi = 0; gi < groups; ++gi) bias_part += param_at(br, gi) * xs[gi];
      const float val = hsum(total[i][r]) + bias_part;
      float& out = y[(i0 + i) * n + j + r];
      out = accumulate ? out + val : val;
    }
  }
}

// Output columns [j0, j1) for all m rows: pairs of x rows (prefill) or pairs of weight rows
// (decode) share each load.
template <int Bits, class S>
void affine_cols(const float* xp, int64_t m, int64_t k, const AffineQuantized& w, const float* xsum, float* y,
                 int64_t j0, int64_t j1, bool accumulate) {
  const int64_t n = w.rows, g = w.group_size, groups = k / g;
  const auto* packed = static_cast<const uint32_t*>(w.packed.data);  // maybe unaligned: vector loads only
  const S* scales = static_cast<const S*>(w.scales.data);
  const S* biases = static_cast<const S*>(w.biases.data);
  int64_t i = 0;
  for (; i + 2 <= m; i += 2)
    for (int64_t j = j0; j < j1; ++j)
      affine_tile<Bits, 2, 1>(xp, k, packed, scales, biases, groups, g, xsum, y, n, i, j, accumulate);
  for (; i < m; ++i) {
    int64_t j = j0;
    for (; j + 2 <= j1; j += 2)
      affine_tile<Bits, 1, 2>(xp, k, packed, scales, biases, groups, g, xsum, y, n, i, j, accumulate);
    for (; j < j1; ++j) affine_tile<Bits, 1, 1>(xp, k, packed, scales, biases, groups, g, xsum, y, n, i, j, accumulate);
  }
}

template <int Bits>
void affine_cols_any(const float* xp, int64_t m, int64_t k, const AffineQuantized& w, const float* xsum, float* y,
                     int64_t j0, int64_t j1, bool accumulate) {
  if (w.scales.dtype == DType::BF16)
    affine_cols<Bits, uint16_t>(xp, m, k, w, xsum, y, j0, j1, accumulate);
  else
    affine_cols<Bits, float>(xp, m, k, w, xsum, y, j0, j1, accumulate);
}

}  // namespace

AffinePrepared prepare_affine(const float* x, int64_t m, int64_t k, const AffineQuantized& w) {
  if (w.bits != 4 && w.bits != 8) fail("matmul_affine: ", w.bits, "-bit weights are not supported (4 or 8)");
  if (w.cols != k || k % w.group_size != 0 || w.group_size % 32 != 0)
    fail("matmul_affine: weight [", w.rows, ", ", w.cols, "] (group ", w.group_size, ") does not match k = ", k);
  // k is a multiple of the group size (>= 32), so of 32 8-bit codes; 4-bit blocks hold 64 codes.
  if (w.bits == 4 && k % 64 != 0) fail("matmul_affine: 4-bit rows of ", k, " columns are not whole 64-code blocks");
  AffinePrepared p;
  p.m = m;
  p.k = k;
  p.group_size = w.group_size;
  p.bits = w.bits;
  const int64_t groups = k / w.group_size;
  // Per-row, per-group sums of x (the bias term), in ascending column order.
  p.xsum.resize(static_cast<size_t>(m * groups));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t gi = 0; gi < groups; ++gi) {
      float s = 0.0f;
      for (int64_t c = gi * w.group_size; c < (gi + 1) * w.group_size; ++c) s += x[i * k + c];
      p.xsum[i * groups + gi] = s;
    }
  p.xp.resize(static_cast<size_t>(m * k));
  if (w.bits == 4)
    permute_x<4>(x, m, k, p.xp.data());
  else
    permute_x<8>(x, m, k, p.xp.data());
  return p;
}

void affine_cols(const AffinePrepared& p, const AffineQuantized& w, float* y, bool accumulate, int64_t j0, int64_t j1) {
  if (p.bits != w.bits || p.group_size != w.group_size || p.k != w.cols)
    fail_as(ErrorKind::kInternal, "affine_cols: prepared for another weight layout");
  if (w.bits == 4)
    affine_cols_any<4>(p.xp.data(), p.m, p.k, w, p.xsum.data(), y, j0, j1, accumulate);
  else
    affine_cols_any<8>(p.xp.data(), p.m, p.k, w, p.xsum.data(), y, j0, j1, accumulate);
}

void matmul_affine(ThreadPool& pool, const float* x, int64_t m, int64_t k, const AffineQuantized& w, float* y,
                   bool accumulate, const ColumnEpilogue* epilogue) {
  if (m == 0 || w.rows == 0) {
    prepare_affine(x, 0, k, w);  // the same checks
    return;
  }
  const AffinePrepared p = prepare_affine(x, m, k, w);
  const int64_t grain = std::max<int64_t>(1, (32 * 1024) / std::max<int64_t>(1, m * k));
  pool.parallel_for(
      w.rows,
      [&](int64_t j0, int64_t j1) {
        affine_cols(p, w, y, accumulate, j0, j1);
        if (epilogue) (*epilogue)(j0, j1);
      },
      grain);
}

}  // namespace graft::compute
