// BF16-activation matmul (compute/bf16_dot.h): CPU check, the scalar model of the two instructions
// (vcvtne2ps2bf16's rounding, one lane of vdpbf16ps), the scalar reference, and the threaded entry
// point. The vector kernel is in bf16_dot_avx512.cpp.
#include "graft/compute/bf16_dot.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "graft/core/error.h"
#include "compute/bf16_dot_internal.h"
#include "compute/matmul_internal.h"

namespace graft::compute {

namespace {
bool detect_bf16_dot() {
  const char* env = std::getenv("GRAFT_BF16_DOT");
  if (env && std::strcmp(env, "0") == 0) return false;
  // GRAFT_MATMUL_ISA=avx2 (best_isa() = Avx2) stands for an AVX2-only machine: no BF16 dot either.
  return detail::best_isa() == detail::Isa::Avx512 && __builtin_cpu_supports("avx512bf16");
}

// Denormal in, denormal out: a zero of the same sign (the instructions' DAZ / FTZ).
float flush(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }

// Columns per parallel_for unit: a multiple of the kernel's tile width (4).
constexpr int64_t kColUnit = 24;

void check_bf16_args(const char* who, const float* x, int64_t m, int64_t k, const Tensor& w, const float* y) {
  detail::check_matmul_args(who, x, m, k, w, y);
  if (w.dtype != DType::BF16) fail(who, ": weight dtype ", dtype_name(w.dtype), " is not BF16");
}
}  // namespace

bool bf16_dot_supported() {
  static const bool ok = detect_bf16_dot();
  return ok;
}

uint16_t round_to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t exp = (u >> 23) & 0xff, mant = u & 0x7fffff;
  if (exp == 0) return static_cast<uint16_t>((u >> 16) & 0x8000);  // zero or denormal
  if (exp == 0xff) {
    if (mant == 0) return static_cast<uint16_t>(u >> 16);  // infinity
    return static_cast<uint16_t>((u >> 16) | 0x40);        // NaN, quieted
  }
  const uint32_t lsb = (u >> 16) & 1;
  return static_cast<uint16_t>((u + 0x7fff + lsb) >> 16);  // may carry into the exponent: correct
}

float bf16_dot_lane(float acc, uint16_t x_even, uint16_t w_even, uint16_t x_odd, uint16_t w_odd) {
  auto in = [](uint16_t h) { return flush(std::bit_cast<float>(static_cast<uint32_t>(h) << 16)); };
  acc = flush(std::fma(in(x_odd), in(w_odd), flush(acc)));
  return flush(std::fma(in(x_even), in(w_even), acc));
}

void round_rows_bf16(const float* x, int64_t m, int64_t k, Bf16Rows& out, ThreadPool* pool) {
  out.m = m;
  out.k = k;
  out.kp = (k + 31) / 32 * 32;
  out.bits.assign(static_cast<size_t>(m * out.kp), 0);
  auto rows = [&](int64_t i0, int64_t i1) {
    if (bf16_dot_supported()) return detail::round_rows_bf16_avx512(x, k, out.kp, out.bits.data(), i0, i1);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t t = 0; t < k; ++t) out.bits[i * out.kp + t] = round_to_bf16(x[i * k + t]);
  };
  if (pool && m * k >= 64 * 1024)
    pool->parallel_for(m, rows, std::max<int64_t>(1, 16 * 1024 / std::max<int64_t>(k, 1)));
  else
    rows(0, m);
}

void bf16_dot_cols(const Bf16Rows& x, const Tensor& w, float* y, bool accumulate, int64_t j0, int64_t j1) {
  if (!bf16_dot_supported()) fail_as(ErrorKind::kInternal, "bf16_dot_cols: this CPU has no AVX512-BF16");
  detail::bf16_dot_cols_avx512(x.bits.data(), x.m, x.k, x.kp, static_cast<const uint16_t*>(w.data), w.shape[0], y,
                               accumulate, j0, j1);
}

void matmul_bf16_dot(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
                     bool accumulate, const ColumnEpilogue* epilogue) {
  check_bf16_args("matmul_bf16_dot", x, m, k, w, y);
  const int64_t n = w.shape[0];
  if (m == 0 || n == 0) return;
  Bf16Rows xr;
  round_rows_bf16(x, m, k, xr, &pool);
  const int64_t units = (n + kColUnit - 1) / kColUnit;
  const int64_t grain = std::max<int64_t>(1, detail::kMinChunkWork / std::max<int64_t>(1, m * std::max<int64_t>(k, 1) * kColUnit));
  pool.parallel_for(
      units,
      [&](int64_t u0, int64_t u1) {
        const int64_t j0 = u0 * kColUnit, j1 = std::min(n, u1 * kColUnit);
        bf16_dot_cols(xr, w, y, accumulate, j0, j1);
        if (epilogue) (*epilogue)(j0, j1);
      },
      grain);
}

void matmul_bf16_dot_reference(const float* x, int64_t m, int64_t k, const Tensor& w, float* y, bool accumulate) {
  check_bf16_args("matmul_bf16_dot_reference", x, m, k, w, y);
  const int64_t n = w.shape[0], kp = (k + 31) / 32 * 32;
  const auto* wb = static_cast<const uint16_t*>(w.data);
  std::vector<uint16_t> xr(static_cast<size_t>(kp)), wr(static_cast<size_t>(kp));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(xr.begin(), xr.end(), 0);
    for (int64_t t = 0; t < k; ++t) xr[t] = round_to_bf16(x[i * k + t]);
    for (int64_t j = 0; j < n; ++j) {
      std::fill(wr.begin(), wr.end(), 0);
      std::memcpy(wr.data(), wb + j * k, static_cast<size_t>(k) * 2);
      float lane[16] = {};
      for (int64_t t = 0; t < kp; t += 32)
        for (int l = 0; l < 16; ++l)
          lane[l] = bf16_dot_lane(lane[l], xr[t + 2 * l], wr[t + 2 * l], xr[t + 2 * l + 1], wr[t + 2 * l + 1]);
      // The dense kernels' tree: halves, quarters, pairs, the last pair.
      float h[8], q[4];
      for (int l = 0; l < 8; ++l) h[l] = lane[l] + lane[l + 8];
      for (int l = 0; l < 4; ++l) q[l] = h[l] + h[l + 4];
      const float s = (q[0] + q[2]) + (q[1] + q[3]);
      float& out = y[i * n + j];
      out = accumulate ? out + s : s;
    }
  }
}

}  // namespace graft::compute
