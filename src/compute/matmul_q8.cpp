// GGUF block weights × 8-bit activations: activation quantization, the scalar models of the
// integer kernels, kernel choice, and the driver (unpack each weight row once per call, then dot it
// with every activation row: decode streams the rows once, prefill reuses each unpacked row across
// all prompt rows).
#include "compute/matmul_q8.h"
#include "compute/q8_simd.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "graft/core/error.h"

namespace graft::compute::detail {

namespace {

bool cpuid_bit(unsigned leaf, unsigned sub, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (!__get_cpuid_count(leaf, sub, &r[0], &r[1], &r[2], &r[3])) return false;
  return (r[reg] >> bit) & 1u;
}
constexpr int kEax = 0, kEcx = 2;

// Fixed horizontal trees (the same as the SIMD kernels' hsum).
float hsum8(const float* l) {
  return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}
float hsum16(const float* l) {
  float h[8];
  for (int i = 0; i < 8; ++i) h[i] = l[i] + l[i + 8];
  return hsum8(h);
}

template <int W>
float q8_dot_scalar(const int8_t* wq, const float* wa4, const int8_t* xq, const float* xd4, int64_t k) {
  float acc[W] = {};
  const int64_t lanes = k / 4;
  for (int64_t l0 = 0; l0 < lanes; l0 += W)
    for (int l = 0; l < W && l0 + l < lanes; ++l) {
      const int64_t c = (l0 + l) * 4;
      int32_t s = 0;
      for (int t = 0; t < 4; ++t) s += static_cast<int32_t>(wq[c + t]) * static_cast<int32_t>(xq[c + t]);
      acc[l] = std::fma(static_cast<float>(s), wa4[l0 + l] * xd4[l0 + l], acc[l]);
    }
  return W == 8 ? hsum8(acc) : hsum16(acc);
}

}  // namespace

float q8_dot_scalar8(const int8_t* wq, const float* wa4, const int8_t* xq, const float* xd4, int64_t k, bool) {
  return q8_dot_scalar<8>(wq, wa4, xq, xd4, k);
}
float q8_dot_scalar16(const int8_t* wq, const float* wa4, const int8_t* xq, const float* xd4, int64_t k, bool) {
  return q8_dot_scalar<16>(wq, wa4, xq, xd4, k);
}

// Eight lanes, lane l summing groups l, l + 8, ... with single-rounding fma, then hsum8 (AVX2/FMA,
// the build's baseline; a masked final step).
float q8_min_term(const float* b16, const float* s16, int64_t groups) {
  __m256 acc = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(b16 + g), _mm256_loadu_ps(s16 + g), acc);
  if (g < groups) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(groups - g)), lane);
    acc = _mm256_fmadd_ps(_mm256_maskload_ps(b16 + g, mask), _mm256_maskload_ps(s16 + g, mask), acc);
  }
  return hsum8(acc);  // q8_simd.h: the same tree as the scalar hsum8
}

const char* q8_kernel_name(Q8Kernel k) {
  switch (k) {
    case Q8Kernel::Scalar: return "scalar";
    case Q8Kernel::Scalar16: return "scalar16";
    case Q8Kernel::Avx2: return "avx2";
    case Q8Kernel::AvxVnni: return "avxvnni";
    case Q8Kernel::Avx512Vnni: return "avx512vnni";
  }
  return "?";
}

bool q8_kernel_supported(Q8Kernel k) {
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  switch (k) {
    case Q8Kernel::Scalar: case Q8Kernel::Scalar16: return true;
    case Q8Kernel::Avx2: return avx2;
    // CPUID.(7,1):EAX[4] AVX-VNNI; CPUID.(7,0):ECX[11] AVX512_VNNI. The OS-state checks come with
    // __builtin_cpu_supports("avx2"/"avx512f").
    case Q8Kernel::AvxVnni: return avx2 && cpuid_bit(7, 1, kEax, 4);
    case Q8Kernel::Avx512Vnni:
      return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && cpuid_bit(7, 0, kEcx, 11);
  }
  return false;
}

namespace {
Q8Kernel detect_q8_kernel() {
  if (const char* env = std::getenv("GRAFT_Q8_KERNEL")) {
    for (Q8Kernel k : {Q8Kernel::Scalar, Q8Kernel::Scalar16, Q8Kernel::Avx2, Q8Kernel::AvxVnni, Q8Kernel::Avx512Vnni})
      if (std::strcmp(env, q8_kernel_name(k)) == 0 && q8_kernel_supported(k)) return k;
  }
  for (Q8Kernel k : {Q8Kernel::Avx512Vnni, Q8Kernel::AvxVnni, Q8Kernel::Avx2})
    if (q8_kernel_supported(k)) return k;
  return Q8Kernel::Scalar;
}
}  // namespace

Q8Kernel best_q8_kernel() {
  static const Q8Kernel k = detect_q8_kernel();
  return k;
}

Q8Dot q8_dot(Q8Kernel k) {
  switch (k) {
    case Q8Kernel::Scalar: return q8_dot_scalar8;
    case Q8Kernel::Scalar16: return q8_dot_scalar16;
    case Q8Kernel::Avx2: return q8_dot_avx2;
    case Q8Kernel::AvxVnni: return q8_dot_avxvnni;
    case Q8Kernel::Avx512Vnni: return q8_dot_avx512vnni;
  }
  return q8_dot_scalar8;
}

namespace {
// Below this many activations, quantizing or packing on the calling thread is cheaper than a
// dispatch (a server step of eight rows would pay two more synchronizations per matmul).
constexpr int64_t kSplitWork = 32 * 1024;

}  // namespace

namespace {
// The scales of a block of 32 from the max|x| of its two halves: the larger half's d = amax / 127,
// the other's that divided by 2^shift (one of the shifts is 0), and the factor id each half's
// codes are rounded with, q = round(x·id): 127 / amax, and for the other half 127 / (amax / 2^shift).
inline constexpr int kMaxScaleShift = 11;  // 2^11 · 16·127·255 < 2^31: the shifted block sums fit int32
struct ActivationScales {
  float d[2] = {0.0f, 0.0f}, id[2] = {0.0f, 0.0f};
  int shift[2] = {0, 0};
};

// (inlined into quantize_block: it runs once per block of every activation row)
inline __attribute__((always_inline)) ActivationScales scales_of(float amax0, float amax1) {
  const bool first = amax0 >= amax1;
  const float big = first ? amax0 : amax1, small = first ? amax1 : amax0;
  const float d_big = big / 127.0f;
  // e: the largest e <= kMaxScaleShift with small·2^e <= big and d_big / 2^e a normal float. For
  // normal floats from their bits (exponents apart, one less when small's significand is larger;
  // quantize_activations calls this per block): the same e as the general rule below.
  int e = 0;
  uint32_t bb, bs, bd;
  std::memcpy(&bb, &big, 4);
  std::memcpy(&bs, &small, 4);
  std::memcpy(&bd, &d_big, 4);
  const int eb = static_cast<int>(bb >> 23), es = static_cast<int>(bs >> 23), ed = static_cast<int>(bd >> 23);
  if (small > 0.0f && es > 0 && eb < 255 && ed > 0) {
    e = eb - es - ((bs & 0x7fffff) > (bb & 0x7fffff) ? 1 : 0);
    e = std::clamp(std::min(e, ed - 1), 0, kMaxScaleShift);
  } else if (small > 0.0f) {  // subnormal or infinite values: the rule as written
    e = std::ilogb(big) - std::ilogb(small);
    if (std::ldexp(small, e) > big) --e;
    e = std::clamp(e, 0, kMaxScaleShift);
    while (e > 0 && std::ldexp(d_big, -e) < std::numeric_limits<float>::min()) --e;
  }
  // 2^-e and 2^e: the products below are exact (no overflow or subnormal: e's limits), so the
  // smaller half's 127 / (big·2^-e) is (127 / big)·2^e, one division fewer.
  const uint32_t down_bits = static_cast<uint32_t>(127 - e) << 23, up_bits = static_cast<uint32_t>(127 + e) << 23;
  float down, up;
  std::memcpy(&down, &down_bits, 4);
  std::memcpy(&up, &up_bits, 4);
  ActivationScales s;
  const int b = first ? 0 : 1;
  s.shift[b] = e;
  s.d[b] = d_big;
  s.d[1 - b] = d_big * down;
  s.id[b] = big > 0.0f ? 127.0f / big : 0.0f;
  s.id[1 - b] = s.id[b] * up;
  return s;
}
}  // namespace

namespace {

// One block of 32 as two groups of 16 with the scales of scales_of: per group q =
// clamp(round(x·id), ±127) with id = 127 / the max|x| its scale stands for (the scalar rule, in AVX2: the product and the
// rounding are the same IEEE operations), d4 its scale four times, s16 = d·Σ q, sum16 = Σ q (exact
// integer sums) and e16 its shift.
void quantize_block(const float* xb, int8_t* q, float* d4, float* s16, int32_t* sum16, int32_t* e16) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  for (int t = 0; t < 4; ++t) v[t] = _mm256_loadu_ps(xb + 8 * t);
  // Both halves' max|x| in one reduction: lanes 0..3 reduce half 0, lanes 4..7 half 1.
  const __m256 a0 = _mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1]));
  const __m256 a1 = _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3]));
  __m256 m = _mm256_max_ps(_mm256_permute2f128_ps(a0, a1, 0x20), _mm256_permute2f128_ps(a0, a1, 0x31));
  m = _mm256_max_ps(m, _mm256_permute_ps(m, 0x4e));
  m = _mm256_max_ps(m, _mm256_permute_ps(m, 0xb1));
  const ActivationScales sc = scales_of(_mm256_cvtss_f32(m), _mm256_cvtss_f32(_mm256_permute2f128_ps(m, m, 0x11)));
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  __m256i i[4];
  for (int g = 0; g < 2; ++g) {
    const __m256 id = _mm256_set1_ps(sc.id[g]);
    for (int t = 0; t < 2; ++t)
      i[2 * g + t] = _mm256_cvtps_epi32(_mm256_min_ps(
          _mm256_max_ps(_mm256_round_ps(_mm256_mul_ps(v[2 * g + t], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                        lo),
          hi));
    _mm_storeu_ps(d4 + 4 * g, _mm_set1_ps(sc.d[g]));
    e16[g] = sc.shift[g];
  }
  // Both halves' Σ q in one reduction, as above.
  const __m256i h0 = _mm256_add_epi32(i[0], i[1]), h1 = _mm256_add_epi32(i[2], i[3]);
  __m256i sv = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20), _mm256_permute2x128_si256(h0, h1, 0x31));
  sv = _mm256_add_epi32(sv, _mm256_shuffle_epi32(sv, 0x4e));
  sv = _mm256_add_epi32(sv, _mm256_shuffle_epi32(sv, 0xb1));
  sum16[0] = _mm256_cvtsi256_si32(sv);
  sum16[1] = _mm256_extract_epi32(sv, 4);
  for (int g = 0; g < 2; ++g) s16[g] = sc.d[g] * static_cast<float>(sum16[g]);
  // Values within ±127: the saturating packs are exact; the permute undoes their lane interleave.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
}  // namespace

void quantize_activations(const float* x, int64_t m, int64_t k, Q8Activations& a, ThreadPool* pool) {
  a.m = m;
  a.k = k;
  a.q.resize(static_cast<size_t>(m * k));
  a.d4.resize(static_cast<size_t>(m * k / 4));
  a.s16.resize(static_cast<size_t>(m * k / 16));
  a.sum16.resize(static_cast<size_t>(m * k / 16));
  a.e16.resize(static_cast<size_t>(m * k / 16));
  auto rows = [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t c0 = 0; c0 < k; c0 += 32)
        quantize_block(x + i * k + c0, &a.q[i * k + c0], &a.d4[(i * k + c0) / 4], &a.s16[(i * k + c0) / 16],
                       &a.sum16[(i * k + c0) / 16], &a.e16[(i * k + c0) / 16]);
  };
  if (pool && m * k >= kSplitWork)
    pool->parallel_for(m, rows);
  else
    rows(0, m);
}

const uint8_t* Q8Activations::x8_records() const {
  const auto at = reinterpret_cast<uintptr_t>(x8.data());
  return x8.data() + (64 - at % 64) % 64;
}

void Q8Activations::pack_rows8(bool with_min, ThreadPool* pool) {
  const int64_t chunks = (k + 63) / 64, pairs = (chunks + 1) / 2, groups16 = k / 16;
  x8.resize(static_cast<size_t>(m * chunks * 128 + 64));
  auto* base = const_cast<uint8_t*>(x8_records());
  s8.resize(with_min ? static_cast<size_t>(m * pairs * 8) : 0);
  auto pack = [&](int64_t grp0, int64_t grp1) {
    for (int64_t g0 = grp0 * 8; g0 < std::min(m, grp1 * 8); g0 += 8) {
      const int64_t rows = std::min<int64_t>(8, m - g0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = g0 + r;
        for (int64_t c = 0; c < chunks; ++c) {
          uint8_t* rec = base + (g0 * chunks + c * rows + r) * 128;
          const int64_t cols = std::min<int64_t>(64, k - c * 64);
          if (cols == 64) {
            const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
            for (int h = 0; h < 2; ++h)
              _mm256_storeu_si256(reinterpret_cast<__m256i*>(rec + 32 * h),
                                  _mm256_xor_si256(flip, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                                                             &q[i * k + c * 64 + 32 * h]))));
            std::memcpy(rec + 64, &d4[(i * k + c * 64) / 4], 16 * sizeof(float));
            continue;
          }
          for (int64_t t = 0; t < 64; ++t)
            rec[t] = static_cast<uint8_t>((t < cols ? static_cast<uint8_t>(q[i * k + c * 64 + t]) : 0) ^ 0x80u);
          auto* d = reinterpret_cast<float*>(rec + 64);
          for (int64_t l = 0; l < 16; ++l) d[l] = l < cols / 4 ? d4[(i * k + c * 64) / 4 + l] : 0.0f;
        }
        if (with_min)
          for (int64_t p = 0; p < pairs; ++p) {
            float* rec = &s8[(g0 * pairs + p * rows + r) * 8];
            for (int64_t l = 0; l < 8; ++l) rec[l] = p * 8 + l < groups16 ? s16[i * groups16 + p * 8 + l] : 0.0f;
          }
      }
    }
  };
  const int64_t groups = (m + 7) / 8;
  if (pool && groups > 1 && m * k >= kSplitWork)
    pool->parallel_for(groups, pack);
  else
    pack(0, groups);
}

void Q8Activations::pack_blocks8(ThreadPool* pool) {
  const int64_t nb = k / 32;
  xb.resize(static_cast<size_t>(m * k));
  xd.resize(static_cast<size_t>(2 * m * nb));
  xe.resize(static_cast<size_t>(2 * m * nb));
  xo.resize(static_cast<size_t>(2 * m * nb));
  xdb.resize(static_cast<size_t>(m * nb));
  xm.resize(static_cast<size_t>(m * nb));
  auto pack = [&](int64_t grp0, int64_t grp1) {
    for (int64_t i0 = grp0 * 8; i0 < std::min(m, grp1 * 8); i0 += 8) {
      const int64_t rows = std::min<int64_t>(8, m - i0);
      for (int64_t b = 0; b < nb; ++b)
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t at = i0 * nb + b * rows + r, i = i0 + r;
          std::memcpy(&xb[at * 32], &q[i * k + b * 32], 32);
          for (int64_t h = 0; h < 2; ++h) {
            xd[2 * at + h] = d4[(i * k + b * 32 + 16 * h) / 4];
            xe[2 * at + h] = e16[2 * (i * nb + b) + h];
            xo[2 * at + h] = -32 * sum16[2 * (i * nb + b) + h];
          }
          xdb[at] = std::min(xd[2 * at], xd[2 * at + 1]);
          xm[at] = s16[2 * (i * nb + b)] + s16[2 * (i * nb + b) + 1];
        }
    }
  };
  const int64_t groups = (m + 7) / 8;
  if (pool && groups > 1 && m * k >= kSplitWork)
    pool->parallel_for(groups, pack);
  else
    pack(0, groups);
}

int q8_fused_max_rows(Q8Kernel k) { return k == Q8Kernel::Avx512Vnni ? 8 : 4; }

namespace {
// The fused path for output columns [j0, j1): activation rows in tiles of about 8 KiB of codes
// (with their scales and sums, about 24 KiB: they stay in L1 while every weight row of the range
// passes over them, each weight row read from L2 once per tile), each weight chunk unpacked once
// per max_rows activation rows.
void fused_cols(Q8FusedRows fused, Q8FusedWeightRows fused4, int max_rows, const uint8_t* base, int64_t row_bytes,
                int64_t k, const Q8Activations& act, int64_t m, int64_t n, int64_t j0, int64_t j1, float* y,
                bool accumulate) {
  if (fused4) {  // decode (m = 1): four weight rows per call
    float v[4];
    for (; j0 + 4 <= j1; j0 += 4) {
      fused4(base + j0 * row_bytes, row_bytes, k, act, 0, v);
      for (int w = 0; w < 4; ++w) y[j0 + w] = accumulate ? y[j0 + w] + v[w] : v[w];
    }
  }
  const int64_t tile = std::max<int64_t>(max_rows, (8 * 1024 / k) / max_rows * max_rows);
  float v[8];
  for (int64_t i0 = 0; i0 < m; i0 += tile) {
    const int64_t i1 = std::min(m, i0 + tile);
    for (int64_t j = j0; j < j1; ++j) {
      const uint8_t* row = base + j * row_bytes;
      for (int64_t i = i0; i < i1; i += max_rows) {
        const int rows = static_cast<int>(std::min<int64_t>(max_rows, i1 - i));
        fused(row, k, act, i, rows, v);
        for (int r = 0; r < rows; ++r) {
          float& out = y[(i + r) * n + j];
          out = accumulate ? out + v[r] : v[r];
        }
      }
    }
  }
}
// Up to how many activation rows AVX-512 CPUs run the 256-bit code of the 16-lane model (same
// bits). Default 0: since the activations are packed, the 512-bit kernel is faster even for one
// row (hot Q4_0 decode, 576x1536: 61-75 -> 49-50 us); GRAFT_Q8_AVX2_ROWS=2 brings the old choice
// back for comparisons.
const int64_t kAvx2Rows = [] {
  const char* e = std::getenv("GRAFT_Q8_AVX2_ROWS");
  return e ? std::atoll(e) : 0;
}();
}  // namespace

bool q8_fused_needs_pack(Q8Kernel k, DType t, int64_t m) {
  return k == Q8Kernel::Avx512Vnni && m > kAvx2Rows && q8_fused(k, t) != nullptr;
}

Q8FusedWeightRows q8_fused4_for_rows(Q8Kernel k, DType t, int64_t m) {
  return m == 1 && q8_fused_needs_pack(k, t, m) ? q8_fused4_avx512vnni(t) : nullptr;
}

Q8FusedRows q8_fused_for_rows(Q8Kernel k, DType t, int64_t m) {
  Q8FusedRows f = q8_fused(k, t);
  if (f && k == Q8Kernel::Avx512Vnni && m <= kAvx2Rows) f = q8_fused_avx2_16lane(t);
  return f;
}

Q8FusedRows q8_fused(Q8Kernel k, DType t) {
  static const bool enabled = [] {
    const char* env = std::getenv("GRAFT_Q8_FUSED");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  if (!enabled) return nullptr;
  switch (k) {
    case Q8Kernel::Avx2: case Q8Kernel::AvxVnni: return q8_fused_avx2(t);
    case Q8Kernel::Avx512Vnni: return q8_fused_avx512vnni(t);
    default: return nullptr;
  }
}

namespace {
void check_blocks(DType t, int64_t k) {
  if (!quant_format(t)) fail_as(ErrorKind::kInternal, "matmul_blocks: ", dtype_name(t), " is not a GGUF block format");
  if (k % dtype_block_elems(t) != 0)
    fail("matmul: ", dtype_name(t), " weight rows of ", k, " columns are not whole blocks");
}
}  // namespace

void prepare_blocks(ThreadPool* pool, Q8Kernel kernel, const float* x, int64_t m, int64_t k,
                    std::span<const DType> types, Q8Activations& act, bool allow_fused) {
  for (DType t : types) check_blocks(t, k);
  quantize_activations(x, m, k, act, pool);
  bool pack = false, with_min = false;
  for (DType t : types) {
    if (!allow_fused || !q8_fused_needs_pack(kernel, t, m)) continue;
    pack = true;
    with_min = with_min || quant_format(t)->has_min;
  }
  if (pack) act.pack_rows8(with_min, pool);
}

void blocks_cols(Q8Kernel kernel, const Q8Activations& act, const Tensor& w, float* y, bool accumulate, int64_t j0,
                 int64_t j1, bool allow_fused) {
  const QuantFormat* fmt = quant_format(w.dtype);
  const int64_t m = act.m, k = act.k, n = w.shape[0];
  const int64_t row_bytes = dtype_bytes(w.dtype, k);
  const auto* base = static_cast<const uint8_t*>(w.data);
  if (const Q8FusedRows fused = allow_fused ? q8_fused_for_rows(kernel, w.dtype, m) : nullptr) {
    fused_cols(fused, q8_fused4_for_rows(kernel, w.dtype, m), q8_fused_max_rows(kernel), base, row_bytes, k, act, m, n, j0, j1, y, accumulate);
    return;
  }
  const Q8Dot dot = q8_dot(kernel);
  std::vector<int8_t> q(static_cast<size_t>(k));
  std::vector<float> a4(static_cast<size_t>(k / 4)), b16(static_cast<size_t>(k / 16));
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = base + j * row_bytes;
    // Decode streams each weight byte once: ask for the bytes 4 KiB ahead (rows are
    // contiguous), as the dense kernels do; prefetches past the end never fault.
    for (int64_t o = 0; o < row_bytes; o += 64) __builtin_prefetch(row + 4096 + o, 0, 3);
    fmt->unpack(row, k, q.data(), a4.data(), b16.data());
    for (int64_t i = 0; i < m; ++i) {
      float v = dot(q.data(), a4.data(), &act.q[i * k], &act.d4[i * k / 4], k, !fmt->has_min);
      if (fmt->has_min) v += q8_min_term(b16.data(), &act.s16[i * k / 16], k / 16);
      float& out = y[i * n + j];
      out = accumulate ? out + v : v;
    }
  }
}

void matmul_blocks(ThreadPool& pool, Q8Kernel kernel, const float* x, int64_t m, int64_t k, const Tensor& w,
                   float* y, bool accumulate, const ColumnEpilogue* epilogue, bool allow_fused) {
  check_blocks(w.dtype, k);
  const int64_t n = w.shape[0];
  if (m == 0 || n == 0) return;
  Q8Activations act;
  const DType types[] = {w.dtype};
  prepare_blocks(&pool, kernel, x, m, k, types, act, allow_fused);
  const int64_t grain = std::max<int64_t>(1, (32 * 1024) / std::max<int64_t>(1, m * k));
  pool.parallel_for(
      n,
      [&](int64_t j0, int64_t j1) {
        blocks_cols(kernel, act, w, y, accumulate, j0, j1, allow_fused);
        if (epilogue) (*epilogue)(j0, j1);
      },
      grain);
}

}  // namespace graft::compute::detail
