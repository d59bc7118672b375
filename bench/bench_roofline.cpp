// The machine's read roofline: how fast 1 and 2 threads can stream memory that is not in any cache,
// the ceiling decode is judged against (bytes read per token x tokens/s / this; issue 35). A load
// loop over 4 GiB on transparent huge pages (core/huge_pages.h, as graft's weights are), eight
// independent accumulators so no add chain limits it, AVX-512 where the CPU has it (else AVX2); each
// thread streams its own contiguous half. No software prefetch: on huge pages the hardware
// prefetcher streams on its own, and prefetching 1 KiB ahead measured 21 GB/s against 27 without
// (2-vCPU Zen 4 VM, 2026-12-07).
//
//   build/graft_bench --benchmark_filter=BM_ReadRoofline --benchmark_repetitions=3
//
// bytes_per_second is the figure (GB/s = bytes_per_second / 1e9). bench/vs_peers.sh runs it in the
// same session as the engines it compares.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <cstring>
#include <thread>
#include <vector>

#include "graft/core/huge_pages.h"

namespace {

constexpr size_t kBytes = size_t{4} << 30;

const uint8_t* buffer() {
  static const std::shared_ptr<uint8_t[]> buf = [] {
    auto b = graft::huge_page_buffer(kBytes);
    std::memset(b.get(), 1, kBytes);  // real pages, not the shared zero page
    return b;
  }();
  return buf.get();
}

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t n) {
  __m512i a[8];
  for (auto& x : a) x = _mm512_setzero_si512();
  for (size_t i = 0; i < n; i += 512) {
    for (int j = 0; j < 8; ++j) a[j] = _mm512_add_epi64(a[j], _mm512_load_si512(p + i + 64 * j));
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm512_add_epi64(a[0], a[j]);
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, a[0]);
  uint64_t s = 0;
  for (uint64_t x : out) s += x;
  return s;
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t n) {
  __m256i a[8];
  for (auto& x : a) x = _mm256_setzero_si256();
  for (size_t i = 0; i < n; i += 256) {
    for (int j = 0; j < 8; ++j)
      a[j] = _mm256_add_epi64(a[j], _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32 * j)));
  }
  for (int j = 1; j < 8; ++j) a[0] = _mm256_add_epi64(a[0], a[j]);
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), a[0]);
  return out[0] + out[1] + out[2] + out[3];
}

void BM_ReadRoofline(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const uint8_t* p = buffer();
  const bool wide = __builtin_cpu_supports("avx512f");
  state.SetLabel(wide ? "avx512" : "avx2");
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  for (auto _ : state) {
    std::vector<std::thread> ts;
    const size_t part = kBytes / static_cast<size_t>(threads);
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        const uint8_t* q = p + part * static_cast<size_t>(t);
        sums[static_cast<size_t>(t)] = wide ? read_avx512(q, part) : read_avx2(q, part);
      });
    for (auto& t : ts) t.join();
    benchmark::DoNotOptimize(sums.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(kBytes));
}
BENCHMARK(BM_ReadRoofline)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);

}  // namespace
