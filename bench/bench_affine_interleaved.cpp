// mlx affine (4/8-bit, group 64) matrices as a model runs them after load (runtime::prepare_weight:
// interleaved x16, 8-bit activations; runtime/interleaved_blocks.h, issue 10), next to the F32 affine
// kernel (BM_MatmulAffine in bench_kernels.cpp; prefill rows for it here) on SmolLM2-135M's shapes.
// Hot weights, so these are kernel costs, not bandwidth.
//
//   build/graft_bench --benchmark_filter='BM_MatmulAffine(Interleaved)?/q4/m(1|128)/1536/576/threads:1/'
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "graft/core/affine_quant.h"
#include "graft/model/weights.h"
#include "graft/runtime/kernels.h"

namespace {

using graft::DType;
using graft::ThreadPool;

graft::AffineQuantized random_affine(int bits, int64_t n, int64_t k) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<uint8_t> bytes(static_cast<size_t>(n * k * 4));
  for (size_t i = 0; i < bytes.size(); i += 4) {
    const float v = nd(rng);
    std::memcpy(&bytes[i], &v, 4);
  }
  return graft::quantize_affine(graft::Tensor::owned(DType::F32, {n, k}, std::move(bytes)), bits, 64, DType::BF16);
}

void counters(benchmark::State& state, int64_t m, int64_t n, int64_t k, int64_t wbytes) {
  const double it = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(it * static_cast<double>(wbytes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(it * 2.0 * m * n * k / 1e9, benchmark::Counter::kIsRate);
}

// Skipped where the CPU has no integer kernel or GRAFT_Q8_INTERLEAVE=0.
void BM_MatmulAffineInterleaved(benchmark::State& state, int bits, int64_t m, int64_t n, int64_t k) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  graft::model::Matrix w = graft::model::Matrix::of(random_affine(bits, n, k));
  const int64_t copied = graft::compute::prepare_weight(w, &pool);
  if (copied == 0) {
    state.SkipWithError("no interleaved copy (GRAFT_Q8_INTERLEAVE=0 or no integer kernel)");
    return;
  }
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n));
  for (auto _ : state) {
    graft::compute::matmul(pool, x.data(), m, w, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  counters(state, m, n, k, copied);
  state.SetLabel(graft::compute::matmul_q8_kernel());
}

// The F32 affine kernel (what GRAFT_Q8_INTERLEAVE=0 runs) at prefill rows.
void BM_MatmulAffinePrefill(benchmark::State& state, int bits, int64_t m, int64_t n, int64_t k) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const graft::AffineQuantized w = random_affine(bits, n, k);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n));
  for (auto _ : state) {
    graft::compute::matmul_affine(pool, x.data(), m, k, w, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  counters(state, m, n, k, w.nbytes());
}

int register_affine_interleaved() {
  const int t = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int64_t shapes[][2] = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {49152, 576}};
  for (int bits : {4, 8})
    for (const auto& s : shapes)
      for (int64_t m : {1, 16, 128}) {
        if (m > 1 && s[0] == 49152) continue;                         // lm_head runs on the last token only
        if (m == 128 && s[0] != 1536 && s[1] != 1536) continue;      // prefill: gate/up and down
        const std::string tail = "/q" + std::to_string(bits) + "/m" + std::to_string(m) + "/" +
                                 std::to_string(s[0]) + "/" + std::to_string(s[1]);
        benchmark::RegisterBenchmark(("BM_MatmulAffineInterleaved" + tail).c_str(), BM_MatmulAffineInterleaved,
                                     bits, m, s[0], s[1])
            ->ArgName("threads")->Arg(1)->Arg(t)->UseRealTime()->Unit(benchmark::kMicrosecond);
        if (m == 128)
          benchmark::RegisterBenchmark(("BM_MatmulAffinePrefill" + tail).c_str(), BM_MatmulAffinePrefill, bits, m,
                                       s[0], s[1])
              ->ArgName("threads")->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
  return 0;
}
const int registered_affine_interleaved = register_affine_interleaved();

}  // namespace
