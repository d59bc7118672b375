// matmul() on a Tensor: validation, ISA choice, threading, and the scalar reference.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "graft/core/error.h"
#include "graft/compute/kernels.h"
#include "compute/matmul_internal.h"
#include "compute/matmul_q8.h"

namespace graft::compute {

namespace detail {

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Avx2:
      // F16C is part of x86-64-v3, the build's baseline, so it needs no check here (and clang 14
      // has no "f16c" string for __builtin_cpu_supports).
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
  }
  return false;
}

namespace {
Isa detect_isa() {
  // GRAFT_MATMUL_ISA=avx2 forces the baseline kernels (for comparisons on AVX-512 machines).
  const char* env = std::getenv("GRAFT_MATMUL_ISA");
  if (env && std::strcmp(env, "avx2") == 0) return Isa::Avx2;
  return isa_supported(Isa::Avx512) ? Isa::Avx512 : Isa::Avx2;
}
}  // namespace

Isa best_isa() {
  static const Isa isa = detect_isa();
  return isa;
}

void matmul_cols(Isa isa, const MatmulArgs& a, int64_t j0, int64_t j1) {
  if (isa == Isa::Avx512)
    matmul_cols_avx512(a, j0, j1);
  else
    matmul_cols_avx2(a, j0, j1);
}

int64_t prefill_col_block(int64_t k, int64_t elem_bytes, int64_t nr) {
  const int64_t rows = (256 * 1024) / std::max<int64_t>(1, k * elem_bytes);
  return std::max<int64_t>(nr, rows / nr * nr);
}

void check_matmul_args(const char* who, const float* x, int64_t m, int64_t k, const Tensor& w, const float* y) {
  if (w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16 && !detail::quant_format(w.dtype))
    fail(who, ": weight dtype ", dtype_name(w.dtype), " is not supported (F32, F16, BF16 or a GGUF block format)");
  if (w.shape.size() != 2 || w.shape[1] != k)
    fail(who, ": weight shape ", shape_str(w.shape), " does not match [n, k] with k = ", k);
  if (m < 0) fail(who, ": m = ", m, " is negative");
  if (m > 0 && w.shape[0] > 0 && (!y || !w.data || (k > 0 && !x)))
    fail(who, ": null x, weight or output pointer");
}

}  // namespace detail

namespace {

// Columns per parallel_for unit: a multiple of every kernel's tile width, so chunks cut on tile
// boundaries (results do not depend on the cut; this only avoids narrow tail tiles).
constexpr int64_t kColUnit = 24;

// The dense F32 kernels over w's columns, split over the pool (GGUF blocks: dequantized tile by
// tile, Activations::F32). The arguments are checked by the caller.
void f32_cols_over_pool(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
                        bool accumulate, const ColumnEpilogue* epilogue) {
  const int64_t n = w.shape[0];
  if (m == 0 || n == 0) return;
  const detail::MatmulArgs a{x, m, k, n, w.data, w.dtype, y, accumulate};
  const detail::Isa isa = detail::best_isa();
  const int64_t units = (n + kColUnit - 1) / kColUnit;
  const int64_t unit_work = std::max<int64_t>(1, m * std::max<int64_t>(k, 1) * kColUnit);
  const int64_t grain = std::max<int64_t>(1, detail::kMinChunkWork / unit_work);
  pool.parallel_for(
      units,
      [&](int64_t u0, int64_t u1) {
        detail::matmul_cols(isa, a, u0 * kColUnit, std::min(n, u1 * kColUnit));
        if (epilogue) (*epilogue)(u0 * kColUnit, std::min(n, u1 * kColUnit));
      },
      grain);
}

}  // namespace

void matmul_f32_activations(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
                            bool accumulate, const ColumnEpilogue* epilogue) {
  detail::check_matmul_args("matmul_f32_activations", x, m, k, w, y);
  f32_cols_over_pool(pool, x, m, k, w, y, accumulate, epilogue);
}

void matmul(ThreadPool& pool, const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
            bool accumulate, const ColumnEpilogue* epilogue) {
  detail::check_matmul_args("matmul", x, m, k, w, y);
  if (m == 0 || w.shape[0] == 0) return;
  if (dtype_is_quantized(w.dtype))
    return detail::matmul_blocks(pool, detail::best_q8_kernel(), x, m, k, w, y, accumulate, epilogue);
  f32_cols_over_pool(pool, x, m, k, w, y, accumulate, epilogue);
}

void matmul_reference(const float* x, int64_t m, int64_t k, const Tensor& w, float* y,
                      bool accumulate) {
  detail::check_matmul_args("matmul_reference", x, m, k, w, y);
  const int64_t n = w.shape[0];
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t j = 0; j < n; ++j) {
    convert_to_f32(w.dtype, static_cast<const uint8_t*>(w.data) + dtype_bytes(w.dtype, j * k),
                   row.data(), k);
    for (int64_t i = 0; i < m; ++i) {
      // Double accumulation: the reference is (nearly) the exact dot product, so a test's error
      // bound covers only the fast path's F32 rounding.
      double s = 0;
      for (int64_t t = 0; t < k; ++t) s += static_cast<double>(x[i * k + t]) * row[t];
      float& out = y[i * n + j];
      out = accumulate ? static_cast<float>(out + s) : static_cast<float>(s);
    }
  }
}

const char* matmul_q8_kernel() { return detail::q8_kernel_name(detail::best_q8_kernel()); }

const char* matmul_isa() { return detail::best_isa() == detail::Isa::Avx512 ? "avx512" : "avx2"; }

}  // namespace graft::compute
