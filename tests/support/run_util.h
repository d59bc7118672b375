// Running a loaded model in tests: full-prompt logits and pure-argmax greedy continuations, with
// optional unfused adapters (a LoraSet, named by position) at per-sequence scales; reading fixtures
// and comparing against them.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "graft/adapter/weight_adapter.h"
#include "graft/model/loader.h"
#include "graft/runtime/lora.h"
#include "graft/runtime/transformer.h"

namespace graft::test {

// The reference tools (transformers, PEFT, mlx-lm, LyCORIS) compute in F32 with keys and values kept
// unrounded, and the tolerances of the tests against their fixtures (down to 1e-5) measure graft's
// arithmetic. Graft's default F16 KV cache alone moves the tiny fixture models' logits by up to ~1e-2
// (measured 0.010 against transformers' fixtures, bound 1e-4), so comparisons against reference
// fixtures pin the F32 cache. The 16-bit caches are held to their own bounds against the F32 cache
// in tests/engine/kv_cache_types_test.cpp.
inline constexpr DType kReferenceCache = DType::F32;

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path);
  return nlohmann::json::parse(in);
}

inline std::shared_ptr<const adapter::WeightAdapter> read_adapter(const std::string& path) {
  return std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(path));
}

// max |a - ref| over every element; ref is an F32 tensor of the same size.
inline float max_abs_diff(const std::vector<float>& a, const Tensor& ref) {
  EXPECT_EQ(static_cast<int64_t>(a.size()), ref.numel());
  EXPECT_EQ(ref.dtype, DType::F32);
  float m = 0;
  const size_t n = std::min(a.size(), static_cast<size_t>(ref.numel()));
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - ref.as<float>()[i]));
  return m;
}

// got == expect, except that a divergence is accepted at a recorded near tie of the reference
// (its top-2 gap at that step < 1e-4); nothing after the divergence is compared.
inline void expect_same_greedy(const std::vector<int32_t>& got, const std::vector<int32_t>& expect,
                               const std::vector<double>& gaps, const std::string& what) {
  ASSERT_EQ(got.size(), expect.size()) << what;
  ASSERT_EQ(gaps.size(), expect.size()) << what;
  for (size_t i = 0; i < expect.size(); ++i) {
    if (got[i] == expect[i]) continue;
    std::printf("%s: diverged at step %zu (reference top-2 gap %g)\n", what.c_str(), i, gaps[i]);
    EXPECT_LT(gaps[i], 1e-4) << what << ": diverged at step " << i << " (got " << got[i] << ", expected " << expect[i]
                             << ") where the reference's top-2 gap is " << gaps[i];
    break;
  }
}

// Several adapters built for one model, each bound on its own (what an engine's registry builds one
// at a time), named by position in the tests.
struct LoraSet {
  std::vector<std::shared_ptr<const runtime::LoraAdapter>> adapters;
  size_t size() const { return adapters.size(); }
};

inline std::shared_ptr<const LoraSet> make_lora_set(const model::ModelConfig& config, const io::TensorSource& source,
                                                    const std::vector<adapter::AdapterUse>& uses,
                                                    runtime::LoraDType factor_dtype = std::nullopt) {
  auto set = std::make_shared<LoraSet>();
  const auto bindings = model::model_bindings(config, source);
  for (const auto& u : uses)
    set->adapters.push_back(runtime::build_lora_adapter(config, source, *bindings, u.adapter, factor_dtype));
  return set;
}

// Adapter i of `set` at scales[i] (order i), as a sequence carries them (scale 0 included: the forward
// pass skips it); adapters past the end of `scales` are left out.
inline std::vector<runtime::ScaledAdapter> scaled(const LoraSet* set, const std::vector<float>& scales) {
  std::vector<runtime::ScaledAdapter> out;
  for (size_t i = 0; set && i < set->size() && i < scales.size(); ++i)
    out.push_back({set->adapters[i], scales[i], static_cast<int64_t>(i)});
  return out;
}
inline std::vector<runtime::ScaledAdapter> scaled(const std::shared_ptr<const LoraSet>& set,
                                                  const std::vector<float>& scales) {
  return scaled(set.get(), scales);
}

// Logits for every position of `ids` ([ids.size(), vocab], row-major).
inline std::vector<float> prompt_logits(const model::LoadedModel& m, std::shared_ptr<const LoraSet> set,
                                        std::vector<float> scales, const std::vector<int32_t>& ids, int threads = 2) {
  ThreadPool pool(threads);
  runtime::Transformer t(m.config, m.weights);
  runtime::KVCache cache(m.config, static_cast<int64_t>(ids.size()) + 1, kReferenceCache);
  const auto adapters = scaled(set, scales);
  runtime::SequenceInput in{&cache, ids, true, adapters};
  return t.forward(pool, std::span(&in, 1));
}

// n argmax steps after the prompt (EOS not special), one token per forward pass.
inline std::vector<int32_t> greedy_ids(const model::LoadedModel& m, std::shared_ptr<const LoraSet> set,
                                       std::vector<float> scales, const std::vector<int32_t>& ids, size_t n) {
  ThreadPool pool(2);
  runtime::Transformer t(m.config, m.weights);
  runtime::KVCache cache(m.config, static_cast<int64_t>(ids.size() + n) + 1, kReferenceCache);
  const auto adapters = scaled(set, scales);
  runtime::SequenceInput in{&cache, ids, false, adapters};
  auto lg = t.forward(pool, std::span(&in, 1));
  std::vector<int32_t> out;
  while (out.size() < n) {
    out.push_back(static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin()));
    runtime::SequenceInput step{&cache, std::span(&out.back(), 1), false, adapters};
    lg = t.forward(pool, std::span(&step, 1));
  }
  return out;
}

}  // namespace graft::test
