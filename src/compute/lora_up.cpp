// The up-projection of an unfused adapter term (kernels.h: lora_up_add), run in the column
// epilogue of the projection's matmul: y[c] += s·Σ_k low[k]·Bᵀ[k, c] for Bᵀ in F32 or BF16 (each
// column's sum over k in one fixed order, one fused multiply-add per step), and its 8-bit form
// (UpQ8: exact int32 sums). Every vector width and column cut gives the bits of the scalar loop.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "graft/core/dtype.h"
#include "graft/core/error.h"
#include "graft/compute/kernels.h"
#include "compute/matmul_internal.h"
#include "compute/matmul_q8.h"

namespace graft::compute {

namespace {
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
inline float load1(const float* p) { return *p; }
inline float load1(const uint16_t* p) { return bf16_to_f32(*p); }

template <class T>
void lora_up_add_t(const T* bt, int64_t cols, int64_t r, const float* low, float s, int64_t c0, int64_t c1, float* y) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t c = c0;
  // 32 columns at a time: four independent fma chains (one chain waited on the fma latency at
  // every k). Each column's sum runs over k in the same order either way.
  for (; c + 32 <= c1; c += 32) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t k = 0; k < r; ++k) {
      const __m256 lk = _mm256_set1_ps(low[k]);
      for (int u = 0; u < 4; ++u) acc[u] = _mm256_fmadd_ps(lk, load8(bt + k * cols + c + 8 * u), acc[u]);
    }
    for (int u = 0; u < 4; ++u) {
      float* yc = y + (c + 8 * u - c0);
      _mm256_storeu_ps(yc, _mm256_add_ps(_mm256_loadu_ps(yc), _mm256_mul_ps(sv, acc[u])));
    }
  }
  for (; c + 8 <= c1; c += 8) {  // eight columns' sums stay in one register across all k
    __m256 acc = _mm256_setzero_ps();
    for (int64_t k = 0; k < r; ++k) acc = _mm256_fmadd_ps(_mm256_set1_ps(low[k]), load8(bt + k * cols + c), acc);
    float* yc = y + (c - c0);
    _mm256_storeu_ps(yc, _mm256_add_ps(_mm256_loadu_ps(yc), _mm256_mul_ps(sv, acc)));
  }
  for (; c < c1; ++c) {
    float acc = 0.0f;
    for (int64_t k = 0; k < r; ++k) acc = std::fma(low[k], load1(bt + k * cols + c), acc);
    y[c - c0] += s * acc;
  }
}

}  // namespace

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's AVX-512 intrinsics (_mm512_undefined)
#endif
namespace {
#define GRAFT_UP512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma")))
GRAFT_UP512 inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
GRAFT_UP512 inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// The same per-column arithmetic on 16 lanes (64 columns, four chains, per step): each column's sum
// is independent of its neighbours, so the bits are lora_up_add_t's. With eight adapters mixed in a
// server step the up-projections were 10 % of the step.
template <class T>
GRAFT_UP512 void lora_up_add_512(const T* bt, int64_t cols, int64_t r, const float* low, float s, int64_t c0,
                                 int64_t c1, float* y) {
  const __m512 sv = _mm512_set1_ps(s);
  int64_t c = c0;
  for (; c + 64 <= c1; c += 64) {
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t k = 0; k < r; ++k) {
      const __m512 lk = _mm512_set1_ps(low[k]);
      for (int u = 0; u < 4; ++u) acc[u] = _mm512_fmadd_ps(lk, load16(bt + k * cols + c + 16 * u), acc[u]);
    }
    for (int u = 0; u < 4; ++u) {
      float* yc = y + (c + 16 * u - c0);
      _mm512_storeu_ps(yc, _mm512_add_ps(_mm512_loadu_ps(yc), _mm512_mul_ps(sv, acc[u])));
    }
  }
  if (c < c1) lora_up_add_t(bt, cols, r, low, s, c, c1, y + (c - c0));
}

}  // namespace

void lora_up_add(const Tensor& bt, const float* low, float s, int64_t c0, int64_t c1, float* y) {
  const int64_t r = bt.shape[0], cols = bt.shape[1];
  const bool wide = detail::best_isa() == detail::Isa::Avx512;
  switch (bt.dtype) {
    case DType::BF16: {
      const auto* b = static_cast<const uint16_t*>(bt.data);
      return wide ? lora_up_add_512(b, cols, r, low, s, c0, c1, y) : lora_up_add_t(b, cols, r, low, s, c0, c1, y);
    }
    case DType::F32: {
      const auto* b = static_cast<const float*>(bt.data);
      return wide ? lora_up_add_512(b, cols, r, low, s, c0, c1, y) : lora_up_add_t(b, cols, r, low, s, c0, c1, y);
    }
    default: fail("lora_up_add: Bᵀ is ", dtype_name(bt.dtype), "; expected F32 or BF16");
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// ---- 8-bit up-projection (UpQ8) ----------------------------------------------------------------

namespace {
constexpr int64_t kUpRows = 16;  // rows per stored group

inline int8_t round_code(float v, float id) { return static_cast<int8_t>(std::round(v * id)); }

inline size_t code_index(int64_t o, int64_t k, int64_t r4) {
  return static_cast<size_t>(((o / kUpRows * (r4 / 4) + k / 4) * kUpRows + o % kUpRows) * 4 + k % 4);
}

// One group's 16 sums Σ_k q_low[k]·(q[o, k] + 128) in int32: the reference every path reproduces
// exactly (the caller subtracts the offset 128·Σ_k q_low[k]).
void group_sums_scalar(const UpQ8& b, int64_t g, const int8_t* q_low, int32_t* out) {
  const uint8_t* codes = b.codes.data() + g * kUpRows * b.r4;
  for (int64_t o = 0; o < kUpRows; ++o) {
    int32_t acc = 0;
    for (int64_t j = 0; j < b.r4 / 4; ++j)
      for (int64_t t = 0; t < 4; ++t) acc += int32_t{q_low[4 * j + t]} * codes[(j * kUpRows + o) * 4 + t];
    out[o] = acc;
  }
}

// AVX2: codes and activations widened to int16, pairs multiplied and summed by vpmaddwd (exact:
// 255·127·2 fits), pairs of pairs by vphaddd; the 8-row halves come out as rows 0,1,4,5 | 2,3,6,7
// and are put back in order once per group.
void group_sums_avx2(const UpQ8& b, int64_t g, const int8_t* q_low, int32_t* out) {
  const uint8_t* codes = b.codes.data() + g * kUpRows * b.r4;
  __m256i acc[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int64_t j = 0; j < b.r4 / 4; ++j) {
    int32_t a4;
    std::memcpy(&a4, q_low + 4 * j, 4);
    const __m256i a = _mm256_cvtepi8_epi16(_mm_set1_epi32(a4));  // q_low[4j..4j+3], four times
    for (int h = 0; h < 2; ++h) {                                // rows 8h..8h+7: 32 bytes
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (j * kUpRows + 8 * h) * 4));
      const __m256i lo = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(w)), a);
      const __m256i hi = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(w, 1)), a);
      acc[h] = _mm256_add_epi32(acc[h], _mm256_hadd_epi32(lo, hi));
    }
  }
  const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  for (int h = 0; h < 2; ++h)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * h), _mm256_permutevar8x32_epi32(acc[h], order));
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's AVX-512 intrinsics (_mm512_undefined)
#endif
// AVX512-VNNI: one vpdpbusd (unsigned codes × signed activations) per 4 k for all 16 rows.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"))) void group_sums_vnni512(const UpQ8& b, int64_t g,
                                                                                        const int8_t* q_low,
                                                                                        int32_t* out) {
  const uint8_t* codes = b.codes.data() + g * kUpRows * b.r4;
  __m512i acc = _mm512_setzero_si512();
  for (int64_t j = 0; j < b.r4 / 4; ++j) {
    int32_t a4;
    std::memcpy(&a4, q_low + 4 * j, 4);
    acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(codes + j * kUpRows * 4), _mm512_set1_epi32(a4));
  }
  _mm512_storeu_si512(out, acc);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

using GroupSums = void (*)(const UpQ8&, int64_t, const int8_t*, int32_t*);

GroupSums group_sums_for(detail::Q8Kernel k) {
  switch (k) {
    case detail::Q8Kernel::Avx512Vnni: return group_sums_vnni512;
    case detail::Q8Kernel::Avx2:
    case detail::Q8Kernel::AvxVnni: return group_sums_avx2;
    default: return group_sums_scalar;
  }
}
}  // namespace

float UpQ8::at(int64_t o, int64_t k) const {
  return scale[static_cast<size_t>(o)] * static_cast<float>(int{codes[code_index(o, k, r4)]} - 128);
}

UpQ8 quantize_up_q8(const float* b, int64_t rows, int64_t r) {
  UpQ8 q;
  q.rows = rows;
  q.r = r;
  q.r4 = (r + 3) / 4 * 4;
  const int64_t rows16 = (rows + kUpRows - 1) / kUpRows * kUpRows;
  q.codes.assign(static_cast<size_t>(rows16 * q.r4), 128);
  q.scale.assign(static_cast<size_t>(rows16), 0.0f);
  for (int64_t o = 0; o < rows; ++o) {
    float amax = 0.0f;
    for (int64_t k = 0; k < r; ++k) amax = std::max(amax, std::fabs(b[o * r + k]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    q.scale[static_cast<size_t>(o)] = d;
    for (int64_t k = 0; k < r; ++k)
      q.codes[code_index(o, k, q.r4)] = static_cast<uint8_t>(round_code(b[o * r + k], id) + 128);
  }
  return q;
}

float quantize_low_q8(const float* low, int64_t r, int64_t r4, int8_t* q, int32_t* offset) {
  float amax = 0.0f;
  for (int64_t k = 0; k < r; ++k) amax = std::max(amax, std::fabs(low[k]));
  const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
  int32_t sum = 0;
  for (int64_t k = 0; k < r4; ++k) {
    q[k] = k < r ? round_code(low[k], id) : 0;
    sum += q[k];
  }
  *offset = 128 * sum;
  return d;
}

namespace detail {
void lora_up_add_q8_with(Q8Kernel kernel, const UpQ8& b, const int8_t* q_low, int32_t offset, float d_low, float s,
                         int64_t c0, int64_t c1, float* y) {
  const GroupSums sums = group_sums_for(kernel);
  const float sd = s * d_low;
  alignas(32) int32_t isum[kUpRows];
  for (int64_t g = c0 / kUpRows; g * kUpRows < c1; ++g) {
    sums(b, g, q_low, isum);
    const int64_t o0 = std::max(c0, g * kUpRows), o1 = std::min(c1, (g + 1) * kUpRows);
    if (o1 - o0 == kUpRows) {  // a whole group: the same operations, eight lanes at a time
      const __m256i off = _mm256_set1_epi32(offset);
      for (int h = 0; h < 2; ++h) {
        float* yo = y + (o0 + 8 * h - c0);
        const __m256i is = _mm256_sub_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(isum + 8 * h)), off);
        const __m256 t = _mm256_mul_ps(_mm256_set1_ps(sd), _mm256_loadu_ps(b.scale.data() + o0 + 8 * h));
        _mm256_storeu_ps(yo, _mm256_add_ps(_mm256_loadu_ps(yo), _mm256_mul_ps(t, _mm256_cvtepi32_ps(is))));
      }
      continue;
    }
    for (int64_t o = o0; o < o1; ++o)
      y[o - c0] += (sd * b.scale[static_cast<size_t>(o)]) * static_cast<float>(isum[o - g * kUpRows] - offset);
  }
}
}  // namespace detail

void lora_up_add_q8(const UpQ8& b, const int8_t* q_low, int32_t offset, float d_low, float s, int64_t c0, int64_t c1,
                    float* y) {
  detail::lora_up_add_q8_with(detail::best_q8_kernel(), b, q_low, offset, d_low, s, c0, c1, y);
}

}  // namespace graft::compute
