// Adapter merge benchmarks: merge_tensor on a SmolLM2-sized 1536x576 BF16 base (the MLP up/gate
// projection) with one rank-16 LoRA, per policy, single thread, BF16 output. Also the transposed
// 576x1536 shape (down_proj) and a LoKr update for comparison.
//
//   build-rt/graft_bench --benchmark_filter=Merge
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "graft/adapter/merge.h"

namespace {

using graft::DType;
using graft::Tensor;
using namespace graft::adapter;

Tensor random_tensor(DType dt, const graft::Shape& shape, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::vector<float> v(static_cast<size_t>(graft::shape_numel(shape)));
  for (auto& x : v) x = scale * (static_cast<float>(gen() >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f);
  std::vector<uint8_t> bytes(static_cast<size_t>(graft::dtype_bytes(dt, static_cast<int64_t>(v.size()))));
  graft::convert_from_f32(v.data(), dt, bytes.data(), static_cast<int64_t>(v.size()));
  return Tensor::owned(dt, shape, std::move(bytes));
}

void run_merge(benchmark::State& state, const Tensor& base, const Update& u, MergePolicy policy) {
  const std::vector<PlannedUpdate> plan{{&u, 0, 0, base.shape[0], 1.0f}};
  for (auto _ : state) {
    Tensor out = merge_tensor(base, plan, policy, DType::BF16);
    benchmark::DoNotOptimize(out.data);
  }
  state.SetItemsProcessed(state.iterations() * base.numel());  // items = weights merged
  state.SetBytesProcessed(state.iterations() * base.numel() * 4);  // BF16 in + BF16 out
}

// range(0): policy; range(1): 0 = [1536, 576], 1 = [576, 1536].
void BM_MergeLoraRank16(benchmark::State& state) {
  const auto policy = static_cast<MergePolicy>(state.range(0));
  const int64_t out = state.range(1) ? 576 : 1536, in = state.range(1) ? 1536 : 576;
  const Tensor base = random_tensor(DType::BF16, {out, in}, 1, 0.05f);
  const Update u = LowRankUpdate{random_tensor(DType::BF16, {16, in}, 2, 0.05f),
                                 random_tensor(DType::BF16, {out, 16}, 3, 0.05f), 2.0f};
  state.SetLabel(std::string(policy_name(policy)) + (state.range(1) ? " 576x1536" : " 1536x576"));
  run_merge(state, base, u, policy);
}
BENCHMARK(BM_MergeLoraRank16)->ArgsProduct({{0, 1, 2}, {0, 1}})->Unit(benchmark::kMicrosecond);

// LoKr on [1536, 576]: W1 [8, 8] full, W2 [192, 72] = w2_a [192, 16] · w2_b [16, 72].
void BM_MergeLokr(benchmark::State& state) {
  const auto policy = static_cast<MergePolicy>(state.range(0));
  const Tensor base = random_tensor(DType::BF16, {1536, 576}, 1, 0.05f);
  KroneckerUpdate k;
  k.w1 = random_tensor(DType::BF16, {8, 8}, 4, 0.05f);
  k.w2_a = random_tensor(DType::BF16, {192, 16}, 5, 0.05f);
  k.w2_b = random_tensor(DType::BF16, {16, 72}, 6, 0.05f);
  const Update u = k;
  state.SetLabel(policy_name(policy));
  run_merge(state, base, u, policy);
}
BENCHMARK(BM_MergeLokr)->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

}  // namespace
