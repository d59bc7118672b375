// Kernel benchmarks: memory bandwidth, matmul decode/prefill for the SmolLM2-135M shapes, thread
// pool dispatch and the small vector ops.
//
//   build-rt/graft_bench --benchmark_filter='StreamRead|MatmulDecode'
//
// Decode numbers are "cold": each iteration uses the next of several weight copies that together
// exceed the last-level cache, so weights stream from DRAM as in a real token step (the model's
// ~270 MB of BF16 weights never fit in cache). Compare their GB/s with BM_StreamRead.
#include <benchmark/benchmark.h>

#include <cstring>

#include "graft/core/gguf_blocks.h"
#include <immintrin.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "graft/model/weights.h"
#include "graft/runtime/kernels.h"
#include "graft/compute/ops.h"

namespace {

using graft::DType;
using graft::Tensor;
using graft::ThreadPool;

int hw_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// ---- streaming read ---------------------------------------------------------------------------

__attribute__((target("avx512f"))) uint64_t read_avx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return static_cast<uint64_t>(_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))));
}

uint64_t read_avx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i < n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  float out[8];
  _mm256_storeu_ps(out, s);
  return static_cast<uint64_t>(out[0] + out[7]);
}

struct AlignedFloats {
  float* p = nullptr;
  explicit AlignedFloats(size_t n) {
    p = static_cast<float*>(std::aligned_alloc(64, n * sizeof(float)));
    std::memset(p, 0, n * sizeof(float));  // touch every page before timing
  }
  ~AlignedFloats() { std::free(p); }
};

// Sequential read of a 1 GiB buffer split across the pool's threads.
void BM_StreamRead(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const int64_t n = (int64_t{1} << 30) / 4;
  AlignedFloats buf(static_cast<size_t>(n));
  ThreadPool pool(threads);
  const bool wide = __builtin_cpu_supports("avx512f");
  state.SetLabel(wide ? "avx512" : "avx2");
  for (auto _ : state) {
    pool.parallel_for(threads, [&](int64_t b, int64_t e) {
      const int64_t lo = n * b / threads, hi = n * e / threads;  // multiples of 64 floats
      benchmark::DoNotOptimize(wide ? read_avx512(buf.p + lo, hi - lo) : read_avx2(buf.p + lo, hi - lo));
    });
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}
BENCHMARK(BM_StreamRead)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

// ---- matmul -----------------------------------------------------------------------------------

Tensor random_weights(DType dt, int64_t n, int64_t k, uint32_t seed) {
  if (graft::dtype_is_quantized(dt)) {  // GGUF blocks: random codes, small finite f16 scales
    std::vector<uint8_t> bytes(static_cast<size_t>(graft::dtype_bytes(dt, n * k)));
    uint32_t s = seed * 2654435761u + 1;
    for (auto& b : bytes) b = static_cast<uint8_t>((s = s * 1664525u + 1013904223u) >> 24);
    const int64_t bb = graft::dtype_block_bytes(dt);
    for (int64_t b = 0; b < static_cast<int64_t>(bytes.size()) / bb; ++b)
      for (int off : graft::gguf_block_f16_fields(dt)) {
        const uint16_t h = graft::f32_to_f16(0.01f);
        std::memcpy(&bytes[b * bb + off], &h, 2);
      }
    return Tensor::owned(dt, {n, k}, std::move(bytes));
  }
  std::vector<float> f(static_cast<size_t>(n * k));
  uint32_t s = seed * 2654435761u + 1;
  for (float& v : f) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(static_cast<int32_t>(s >> 8) % 2001) * 1e-3f;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(graft::dtype_bytes(dt, n * k)));
  graft::convert_from_f32(f.data(), dt, bytes.data(), n * k);
  return Tensor::owned(dt, {n, k}, std::move(bytes));
}

void set_counters(benchmark::State& state, int64_t m, int64_t n, int64_t k, int64_t wbytes) {
  const double it = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(it * static_cast<double>(wbytes) / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(it * 2.0 * m * n * k / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(graft::compute::matmul_isa());
}

void BM_MatmulDecode(benchmark::State& state, DType dt, int64_t n, int64_t k, bool cold) {
  const int64_t wbytes = graft::dtype_bytes(dt, n * k);
  // Enough copies to overflow the last-level cache when cold: at least 3 and 256 MiB, and twice the
  // L3 the machine reports (a VM can see its host's: 300 MiB on one Xeon guest).
  const int64_t l3 = std::max<int64_t>(0, sysconf(_SC_LEVEL3_CACHE_SIZE));
  const int64_t copies = cold ? std::max<int64_t>(3, std::max<int64_t>(256ll << 20, 2 * l3) / wbytes) : 1;
  ThreadPool pool(static_cast<int>(state.range(0)));
  // As a model's matrices after load (GGUF Q4_0/Q8_0 interleaved where the CPU's kernel wants it).
  std::vector<graft::model::Matrix> ws;
  for (int64_t c = 0; c < copies; ++c) {
    ws.push_back(graft::model::Matrix::of(random_weights(dt, n, k, static_cast<uint32_t>(c))));
    graft::compute::prepare_weight(ws.back(), &pool);
  }
  std::vector<float> x(static_cast<size_t>(k), 0.5f), y(static_cast<size_t>(n));
  size_t at = 0;
  for (auto _ : state) {
    graft::compute::matmul(pool, x.data(), 1, ws[at], y.data());
    benchmark::DoNotOptimize(y.data());
    at = (at + 1) % ws.size();
  }
  set_counters(state, 1, n, k, wbytes);
  if (ws[0].bf16_activations) state.SetLabel("bf16-dot");
}

void BM_MatmulPrefill(benchmark::State& state, DType dt, int64_t m, int64_t n, int64_t k) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  graft::model::Matrix w = graft::model::Matrix::of(random_weights(dt, n, k, 1));
  graft::compute::prepare_weight(w, &pool);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n));
  for (auto _ : state) {
    graft::compute::matmul(pool, x.data(), m, w, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, m, n, k, graft::dtype_bytes(dt, n * k));
  if (w.bf16_activations) state.SetLabel("bf16-dot");
}

// The copy into the interleaved layout at load (prepare_weight on one matrix; the file's bytes per
// second in bytes_per_second): a model's load time is its weights over this rate.
void BM_InterleaveAtLoad(benchmark::State& state, DType dt, int64_t n, int64_t k) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  const Tensor w = random_weights(dt, n, k, 1);
  int64_t copy_bytes = 0;
  for (auto _ : state) {
    graft::model::Matrix m = graft::model::Matrix::of(w);
    copy_bytes = graft::compute::prepare_weight(m, &pool);
    benchmark::DoNotOptimize(m.interleaved.get());
  }
  state.SetBytesProcessed(state.iterations() * graft::dtype_bytes(dt, n * k));
  state.counters["copy_MB"] = static_cast<double>(copy_bytes) / 1e6;
}

// SmolLM2-135M projections: q/o 576x576, k/v 192x576, gate/up 1536x576, down 576x1536, lm_head.
const int64_t kShapes[][2] = {{576, 576}, {192, 576}, {1536, 576}, {576, 1536}, {49152, 576}};

int register_matmul() {
  const int t = hw_threads();
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    const std::string d(graft::dtype_name(dt));
    for (const auto& s : kShapes) {
      const std::string shape = std::to_string(s[0]) + "/" + std::to_string(s[1]);
      auto* b = benchmark::RegisterBenchmark(("BM_MatmulDecode/" + d + "/" + shape).c_str(),
                                             BM_MatmulDecode, dt, s[0], s[1], true);
      b->ArgName("threads")->Arg(1);
      if (t > 1) b->Arg(t);
      b->UseRealTime()->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(("BM_MatmulDecodeHot/" + d + "/" + shape).c_str(), BM_MatmulDecode,
                                   dt, s[0], s[1], false)
          ->ArgName("threads")->Arg(t)->UseRealTime()->Unit(benchmark::kMicrosecond);
      if (s[0] == 49152 || dt == DType::F16) continue;  // lm_head runs on the last token only
      for (int64_t m : {16, 128})
        benchmark::RegisterBenchmark(("BM_MatmulPrefill/" + d + "/" + std::to_string(m) + "/" + shape).c_str(),
                                     BM_MatmulPrefill, dt, m, s[0], s[1])
            ->ArgName("threads")->Arg(1)->Arg(t)->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  }
  // GGUF block formats (the fused q8-activation kernels): decode, and 8 rows (a server step with
  // eight sequences) and 128 rows (prefill).
  for (DType dt : {DType::Q4_0, DType::Q4_1, DType::Q8_0, DType::Q4_K}) {
    const std::string d(graft::dtype_name(dt));
    for (const auto& s : {kShapes[2], kShapes[3]}) {
      const std::string shape = std::to_string(s[0]) + "/" + std::to_string(s[1]);
      benchmark::RegisterBenchmark(("BM_MatmulDecodeHot/" + d + "/" + shape).c_str(), BM_MatmulDecode, dt, s[0],
                                   s[1], false)
          ->ArgName("threads")->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
      for (int64_t m : {8, 128})
        benchmark::RegisterBenchmark(("BM_MatmulPrefill/" + d + "/" + std::to_string(m) + "/" + shape).c_str(),
                                     BM_MatmulPrefill, dt, m, s[0], s[1])
            ->ArgName("threads")->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
  }
  // A 3B Llama's projections (hidden 3072, intermediate 8192: q/o 3072x3072, gate/up 8192x3072, down
  // 3072x8192) in the K-quants a Q4_K_M file holds (Q4_K, and Q6_K for attn_v, half of ffn_down and
  // the head; Q5_K for Q5_K_M files; Q8_0, the decode rate to compare): decode (hot: one matrix
  // reused; cold: streamed from memory) and a 512-token prompt, one thread. GRAFT_Q8_INTERLEAVE=0 runs the stored
  // blocks' kernels instead (the comparison in docs/PERFORMANCE.md).
  const int64_t k3b[][2] = {{3072, 3072}, {8192, 3072}, {3072, 8192}};
  // BF16 too (dense: vdpbf16ps on BF16-rounded activations where the CPU has AVX512-BF16, else
  // the F32-FMA tiles; GRAFT_BF16_DOT=0 forces the latter), with 2 and 8 rows for the threshold.
  for (DType dt : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0, DType::BF16}) {
    const std::string d(graft::dtype_name(dt));
    for (const auto& s : k3b) {
      if (dt == DType::BF16)
        for (int64_t m : {2, 8})
          benchmark::RegisterBenchmark(("BM_Matmul3B/" + d + "/" + std::to_string(m) + "/" + std::to_string(s[0]) +
                                        "/" + std::to_string(s[1])).c_str(),
                                       BM_MatmulPrefill, dt, m, s[0], s[1])
              ->ArgName("threads")->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
      const std::string shape = std::to_string(s[0]) + "/" + std::to_string(s[1]);
      benchmark::RegisterBenchmark(("BM_Matmul3B/" + d + "/1/" + shape).c_str(), BM_MatmulDecode, dt, s[0], s[1],
                                   false)
          ->ArgName("threads")->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
      // Cold: the weights stream from memory as in a whole model's decode (copies past the L3).
      benchmark::RegisterBenchmark(("BM_Matmul3BCold/" + d + "/1/" + shape).c_str(), BM_MatmulDecode, dt, s[0],
                                   s[1], true)
          ->ArgName("threads")->Arg(1)->UseRealTime()->Unit(benchmark::kMicrosecond);
      auto* b512 = benchmark::RegisterBenchmark(("BM_Matmul3B/" + d + "/512/" + shape).c_str(), BM_MatmulPrefill, dt,
                                                512, s[0], s[1]);
      b512->ArgName("threads")->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
      if (dt == DType::BF16) b512->Arg(2);
    }
    benchmark::RegisterBenchmark(("BM_Interleave3B/" + d + "/8192/3072").c_str(), BM_InterleaveAtLoad, dt, 8192, 3072)
        ->ArgName("threads")->Arg(1)->Arg(t)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  return 0;
}
const int registered = register_matmul();

// Affine-quantized (mlx) decode and prefill on the same shapes: 4 and 8 bits, group 64.
void BM_MatmulAffine(benchmark::State& state, int bits, int64_t m, int64_t n, int64_t k) {
  const graft::AffineQuantized w = graft::quantize_affine(random_weights(DType::F32, n, k, 1), bits, 64, DType::BF16);
  std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n));
  ThreadPool pool(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    graft::compute::matmul_affine(pool, x.data(), m, k, w, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, m, n, k, w.nbytes());
}

int register_affine() {
  for (int bits : {4, 8})
    for (const auto& s : kShapes)
      for (int64_t m : {1, 16}) {
        if (m > 1 && s[0] == 49152) continue;
        benchmark::RegisterBenchmark(("BM_MatmulAffine/q" + std::to_string(bits) + "/m" + std::to_string(m) + "/" +
                                      std::to_string(s[0]) + "/" + std::to_string(s[1])).c_str(),
                                     BM_MatmulAffine, bits, m, s[0], s[1])
            ->ArgName("threads")->Arg(1)->Arg(hw_threads())->UseRealTime()->Unit(benchmark::kMicrosecond);
      }
  return 0;
}
const int registered_affine = register_affine();

// ---- thread pool and ops ----------------------------------------------------------------------

void BM_ParallelForOverhead(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  int64_t sink = 0;
  for (auto _ : state) {
    pool.parallel_for(pool.size(), [&](int64_t b, int64_t) { benchmark::DoNotOptimize(sink += b); });
  }
}
BENCHMARK(BM_ParallelForOverhead)->Arg(1)->Arg(2)->Arg(4)->UseRealTime();

void BM_RmsNorm(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(static_cast<size_t>(n), 0.3f), w(static_cast<size_t>(n), 1.1f), out(x.size());
  for (auto _ : state) graft::compute::rms_norm(x.data(), w.data(), n, 1e-5f, out.data());
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_RmsNorm)->Arg(576);

void BM_SiluMul(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> g(static_cast<size_t>(n), 0.3f), u(g.size(), 1.1f), out(g.size());
  for (auto _ : state) graft::compute::silu_mul(g.data(), u.data(), n, out.data());
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_SiluMul)->Arg(1536);

void BM_Softmax(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x(static_cast<size_t>(n), 0.3f);
  for (auto _ : state) {
    graft::compute::softmax(x.data(), n);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Softmax)->Arg(1024);

// Attention of SmolLM2's three query heads sharing one F16 key/value head over n cached positions
// (head size 64, a KV-cache stride of 192): the grouped call (each key and value widened once for
// the three heads) against three one-head calls. Same bits (tests/runtime/ops_test.cpp).
void BM_AttendF16(benchmark::State& state, bool grouped) {
  const int64_t n = state.range(0), hd = 64, stride = 192, heads = 3;
  std::vector<float> q(static_cast<size_t>(heads * hd), 0.1f), out(static_cast<size_t>(heads * hd));
  std::vector<float> scores(static_cast<size_t>(heads * n));
  std::vector<uint16_t> k(static_cast<size_t>(n * stride), 0x3c00), v(static_cast<size_t>(n * stride), 0x3800);
  for (auto _ : state) {
    if (grouped)
      graft::compute::attend_f16(q.data(), k.data(), v.data(), stride, n, hd, 0.125f, scores.data(), out.data(), heads);
    else
      for (int64_t h = 0; h < heads; ++h)
        graft::compute::attend_f16(q.data() + h * hd, k.data(), v.data(), stride, n, hd, 0.125f, scores.data() + h * n,
                                   out.data() + h * hd);
    benchmark::DoNotOptimize(out.data());
  }
}
BENCHMARK_CAPTURE(BM_AttendF16, three_heads_grouped, true)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_AttendF16, one_head_at_a_time, false)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond);

// One decode step's attention over a 3B Llama's F16 KV cache (28 layers, 8 key/value heads of 128
// shared by 3 query heads each, stored head-major as runtime::KVCache stores it) at depth n: the
// cache, 112 KiB a position, is read once per step, from memory, not cache, as in a decode step.
// bytes_per_second: the cache's bytes read.
void BM_AttendDecode3B(benchmark::State& state) {
  const int64_t n = state.range(0), hd = 128, kv_heads = 8, group = 3, layers = 28;
  std::vector<float> q(static_cast<size_t>(kv_heads * group * hd), 0.01f), out(q.size());
  std::vector<float> scores(static_cast<size_t>(group * n));
  std::vector<std::vector<uint16_t>> k(layers), v(layers);
  for (int64_t l = 0; l < layers; ++l) {
    k[l].assign(static_cast<size_t>(n * kv_heads * hd), 0x3c00);
    v[l].assign(static_cast<size_t>(n * kv_heads * hd), 0x3800);
  }
  // Between steps (untimed), a read of 512 MiB, more than this VM's 300 MiB L3, as a decode step's
  // weights would: the cache comes from memory, as it does in a decode step.
  std::vector<int64_t> flush(static_cast<size_t>(64) << 20, 1);
  int64_t sink = 0;
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t i = 0; i < flush.size(); i += 8) sink += flush[i];
    benchmark::DoNotOptimize(sink);
    state.ResumeTiming();
    for (int64_t l = 0; l < layers; ++l)
      for (int64_t h = 0; h < kv_heads; ++h) {
        graft::compute::attend_f16(q.data() + h * group * hd, k[l].data() + h * n * hd, v[l].data() + h * n * hd, hd, n, hd,
                                   0.088f, scores.data(), out.data() + h * group * hd, group);
        benchmark::DoNotOptimize(out.data());
      }
  }
  state.SetBytesProcessed(state.iterations() * layers * 2 * n * kv_heads * hd * 2);
}
BENCHMARK(BM_AttendDecode3B)->Arg(576)->Arg(4096)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
