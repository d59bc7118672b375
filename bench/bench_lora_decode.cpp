// Decode cost of an unfused adapter per factor type (--lora-dtype), measured inside one process so
// that the neighbours' noise on a shared machine falls on every variant alike: one model load, one
// Transformer per factor type (sharing the weights), and per iteration 8 decode steps of each in
// turn — the base (the auto set at scale 0, which does no adapter work), then auto, bf16 and q8_0
// at scale 1 — each on its own KV cache (reset every 256 tokens), all on one varied token sequence. Counters: the base's tokens/s
// and each variant's time over the base's in the same iterations (LoRA / base as a speed ratio).
//
//   GRAFT_BENCH_MODEL=M.gguf GRAFT_BENCH_LORA=ADAPTER build/graft_bench --benchmark_filter=BM_LoraDecode
//       --benchmark_min_time=20 --benchmark_repetitions=3   (one line)
// GRAFT_BENCH_QBITS=4|8 quantizes the model at load (mlx affine, groups of 64, as --q-bits).
// Skipped when GRAFT_BENCH_MODEL or GRAFT_BENCH_LORA is unset.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graft/adapter/weight_adapter.h"
#include "graft/model/loader.h"
#include "graft/runtime/kv_cache.h"
#include "graft/runtime/lora.h"
#include "graft/runtime/transformer.h"

namespace {

using namespace graft;

struct Variant {
  std::string name;
  std::unique_ptr<runtime::Transformer> transformer;
  std::unique_ptr<runtime::KVCache> cache;
  std::vector<runtime::ScaledAdapter> adapters;  // none for the base
  double seconds = 0.0;
  int64_t step = 0;  // tokens decoded: the next token's index in the shared sequence
};

void BM_LoraDecode(benchmark::State& state) {
  const char* model_path = std::getenv("GRAFT_BENCH_MODEL");
  const char* lora_path = std::getenv("GRAFT_BENCH_LORA");
  if (!model_path || !lora_path) {
    state.SkipWithError("set GRAFT_BENCH_MODEL and GRAFT_BENCH_LORA");
    return;
  }
  ThreadPool pool(static_cast<int>(state.range(0)));
  static model::LoadedModel m = [&] {
    model::LoadOptions o;
    if (const char* bits = std::getenv("GRAFT_BENCH_QBITS"); bits && *bits) o.quantize = model::QuantSpec{std::atoi(bits), 64};
    model::LoadedModel lm = model::load_model(model_path, o);
    runtime::prepare_weights(lm.weights, pool);
    return lm;
  }();
  const auto adapter = std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(lora_path));
  constexpr int64_t kCtx = 256;
  const auto bindings = model::model_bindings(m.config, *m.source);
  std::vector<Variant> variants;
  for (const char* d : {"base", "auto", "bf16", "q8_0"}) {
    Variant v;
    v.name = d;
    const runtime::LoraDType dt = v.name == "base" ? std::nullopt : runtime::parse_lora_dtype(d);
    if (v.name != "base") v.adapters = {{runtime::build_lora_adapter(m.config, *m.source, *bindings, adapter, dt), 1.0f, 0}};
    v.transformer = std::make_unique<runtime::Transformer>(m.config, m.weights);
    v.cache = std::make_unique<runtime::KVCache>(m.config, kCtx, runtime::kDefaultKVCacheType);
    variants.push_back(std::move(v));
  }
  // A varied token sequence, the same for every variant: on a mixture-of-experts model one repeated
  // token would keep choosing much the same experts (and their adapter terms) step after step.
  const int64_t vocab = m.config.vocab_size;
  for (auto _ : state) {
    for (Variant& v : variants) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 8; ++i) {
        if (v.cache->size() + 1 >= kCtx) v.cache->truncate(0);
        const int32_t token = static_cast<int32_t>(1 + (v.step++ * 7919) % (vocab - 1));
        runtime::SequenceInput in{v.cache.get(), std::span(&token, 1), false, v.adapters};
        benchmark::DoNotOptimize(v.transformer->forward(pool, std::span(&in, 1)));
      }
      v.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  const double base = variants[0].seconds;
  state.counters["base_tok_s"] = benchmark::Counter(8.0 * static_cast<double>(state.iterations()) / base);
  for (size_t i = 1; i < variants.size(); ++i) state.counters[variants[i].name] = base / variants[i].seconds;
}
BENCHMARK(BM_LoraDecode)->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
