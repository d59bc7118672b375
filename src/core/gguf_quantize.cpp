// F32 → GGUF blocks as ggml's reference quantizers compute them. Every expression keeps ggml's
// operand order and types (float products and sums, int codes converted to float where ggml
// converts them), because a different but "equivalent" order changes a rounding and so a code.
#include "graft/core/gguf_quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "graft/core/error.h"
#include "graft/core/gguf_blocks.h"

namespace graft {

namespace {

constexpr float kGroupMaxEps = 1e-15f;  // ggml's GROUP_MAX_EPS: a group below this is all zero

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

// Round to nearest (ties to even) by adding 1.5·2²³ and reading the mantissa, as ggml does; valid
// for |v| < 2²², which every caller's codes are by construction.
int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

// ---- blocks of 32 ----

void q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
}

// The element of largest magnitude, first one on ties (Q4_0 and Q5_0 scale by it, sign included).
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

// Codes q of x·id + offset truncated toward zero (ggml casts through int8_t), capped at cap.
uint8_t truncated_code(float v, int cap) { return static_cast<uint8_t>(std::min(cap, static_cast<int>(static_cast<int8_t>(v)))); }

void q4_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x) / -8;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  for (int j = 0; j < 16; ++j)
    b[2 + j] = static_cast<uint8_t>(truncated_code(x[j] * id + 8.5f, 15) | truncated_code(x[16 + j] * id + 8.5f, 15) << 4);
}

void q5_0(const float* x, uint8_t* b) {
  const float d = signed_absmax(x) / -16;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const uint8_t lo = truncated_code(x[j] * id + 16.5f, 31), hi = truncated_code(x[16 + j] * id + 16.5f, 31);
    b[6 + j] = static_cast<uint8_t>((lo & 0x0f) | (hi & 0x0f) << 4);
    qh |= static_cast<uint32_t>(lo >> 4) << j | static_cast<uint32_t>(hi >> 4) << (j + 16);
  }
  std::memcpy(b + 2, &qh, 4);
}

// Q4_1 and Q5_1 header: the block's min and d = (max − min) / levels as f16 at b, b + 2. Returns
// 1 / d (0 for a constant block) and the min through *min.
float put_min_header(const float* x, int levels, uint8_t* b, float* min) {
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    if (x[j] < lo) lo = x[j];
    if (x[j] > hi) hi = x[j];
  }
  const float d = (hi - lo) / static_cast<float>(levels);
  put_f16(b, d);
  put_f16(b + 2, lo);
  *min = lo;
  return d != 0.0f ? 1.0f / d : 0.0f;
}

void q4_1(const float* x, uint8_t* b) {
  float min;
  const float id = put_min_header(x, 15, b, &min);
  for (int j = 0; j < 16; ++j)
    b[4 + j] = static_cast<uint8_t>(truncated_code((x[j] - min) * id + 0.5f, 15) |
                                    truncated_code((x[16 + j] - min) * id + 0.5f, 15) << 4);
}

void q5_1(const float* x, uint8_t* b) {
  float min;
  const float id = put_min_header(x, 31, b, &min);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    // ggml casts straight to uint8_t here (no cap): (x − min)·id ≤ 31 + rounding.
    const auto lo = static_cast<uint8_t>((x[j] - min) * id + 0.5f), hi = static_cast<uint8_t>((x[16 + j] - min) * id + 0.5f);
    b[8 + j] = static_cast<uint8_t>((lo & 0x0f) | (hi & 0x0f) << 4);
    qh |= static_cast<uint32_t>((lo & 0x10) >> 4) << j | static_cast<uint32_t>((hi & 0x10) >> 4) << (j + 16);
  }
  std::memcpy(b + 4, &qh, 4);
}

// ---- K-quants (super-blocks of 256) ----

// ggml's make_qkx2_quants: the scale and min of one sub-block of n values for codes 0..nmax that
// minimise the weighted squared error, searched over nstep + 1 candidate scales. Returns the scale,
// writes the codes to L and −min to *neg_min.
float best_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                     float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, uint8_t{0});
    *neg_min = -min;
    return 0.f;
  }
  float iscale = static_cast<float>(nmax) / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
    L[i] = static_cast<uint8_t>(l);
    const float diff = scale * static_cast<float>(l) + min - x[i];
    best_error += w[i] * (diff * diff);
  }
  uint8_t Laux[256];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nearest_int(iscale * (x[i] - min)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float cur_error = 0;
      for (int i = 0; i < n; ++i) {
        const float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        cur_error += w[i] * (diff * diff);
      }
      if (cur_error < best_error) {
        std::copy(Laux, Laux + n, L);
        best_error = cur_error;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

// Q4_K block: d, dmin (f16), 12 bytes of 6-bit sub-block scales and mins, 128 bytes of nibbles.
void q4_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] = best_scale_min(32, 15, xs, weights, L + 32 * j, &mins[j], -1.f, 0.1f, 20);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  uint8_t* packed = b + 4;  // the 12 scale/min bytes (layout: graft/core/gguf_blocks.h, q4k_scale_min)
  for (int j = 0; j < 8; ++j) {
    // ggml stores nearest_int through uint8_t before capping at 63.
    const auto ls = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_scale * scales[j])));
    const auto lm = std::min<uint8_t>(63, static_cast<uint8_t>(nearest_int(inv_min * mins[j])));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 0xf) | (lm & 0xf) << 4);
      packed[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  put_f16(b, max_scale / 63.f);
  put_f16(b + 2, max_min / 63.f);
  const float d_all = gguf_f16_at(b), dmin_all = gguf_f16_at(b + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    q4k_scale_min(packed, j, &sc, &m);
    const float d = d_all * static_cast<float>(sc);
    if (d == 0.0f) continue;  // ggml keeps the search's codes for a sub-block whose scale rounds to 0
    const float dm = dmin_all * static_cast<float>(m);
    for (int i = 0; i < 32; ++i) L[32 * j + i] = static_cast<uint8_t>(std::clamp(nearest_int((x[32 * j + i] + dm) / d), 0, 15));
  }
  uint8_t* q = b + 16;
  for (int j = 0; j < 256; j += 64, q += 32)
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | L[j + l + 32] << 4);
}

// ggml's make_qx_quants with rmse_type 1 (weights x²) and no importance weights: the signed scale
// of n values for codes −nmax..nmax−1, searched over 19 scales around nmax / max. Codes + nmax in L.
float best_signed_scale(int n, int nmax, const float* x, int8_t* L) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, int8_t{0});
    return 0.f;
  }
  const auto code = [&](float iscale, int i) { return std::clamp(nearest_int(iscale * x[i]), -nmax, nmax - 1); };
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = code(iscale, i);
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = code(iscale, i);
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(nmax + code(iscale, i));
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q6_K block: ql[128] (low nibbles), qh[64] (2 high bits each), int8 scales[16], d (f16).
void q6_k(const float* x, uint8_t* b) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = best_signed_scale(16, 32, x + 16 * ib, L + 16 * ib);
    const float abs_scale = std::fabs(scales[ib]);
    if (abs_scale > max_abs_scale) {
      max_abs_scale = abs_scale;
      max_scale = scales[ib];
    }
  }
  std::memset(b, 0, 210);
  if (max_abs_scale < kGroupMaxEps) return;  // all zero: codes 0, scales 0, d = +0
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  const float iscale = -128.f / max_scale;
  put_f16(b + 208, 1 / iscale);
  for (int ib = 0; ib < 16; ++ib) sc[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
  const float d_all = gguf_f16_at(b + 208);
  for (int j = 0; j < 16; ++j) {
    const float d = d_all * static_cast<float>(sc[j]);
    if (d == 0.0f) continue;
    for (int i = 0; i < 16; ++i) L[16 * j + i] = static_cast<int8_t>(std::clamp(nearest_int(x[16 * j + i] / d), -32, 31) + 32);
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int j = 0; j < 256; j += 128, ql += 64, qh += 32)
    for (int l = 0; l < 32; ++l) {
      const auto q = [&](int k) { return static_cast<uint8_t>(L[j + l + 32 * k]); };
      ql[l] = static_cast<uint8_t>((q(0) & 0xf) | (q(2) & 0xf) << 4);
      ql[l + 32] = static_cast<uint8_t>((q(1) & 0xf) | (q(3) & 0xf) << 4);
      qh[l] = static_cast<uint8_t>(q(0) >> 4 | (q(1) >> 4) << 2 | (q(2) >> 4) << 4 | (q(3) >> 4) << 6);
    }
}

using BlockQuantizer = void (*)(const float*, uint8_t*);

BlockQuantizer quantizer_for(DType t) {
  switch (t) {
    case DType::Q8_0: return q8_0;
    case DType::Q4_0: return q4_0;
    case DType::Q4_1: return q4_1;
    case DType::Q5_0: return q5_0;
    case DType::Q5_1: return q5_1;
    case DType::Q4_K: return q4_k;
    case DType::Q6_K: return q6_k;
    default: return nullptr;
  }
}

}  // namespace

bool gguf_quantize_supported(DType t) { return quantizer_for(t) != nullptr; }

void quantize_gguf_blocks(DType t, const float* src, void* dst, int64_t n) {
  const BlockQuantizer quantize = quantizer_for(t);
  if (!quantize)
    fail_as(ErrorKind::kUnsupported, "quantizing to ", dtype_name(t),
            " is not implemented (written: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q6_K)");
  const int64_t block = dtype_block_elems(t);
  if (n < 0 || n % block != 0)
    fail_as(ErrorKind::kBadRequest, "quantizing ", n, " values to ", dtype_name(t), ": not a multiple of its ",
            block, "-element block");
  const int64_t block_bytes = dtype_block_bytes(t);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t i = 0; i < n / block; ++i) quantize(src + i * block, out + i * block_bytes);
}

}  // namespace graft
