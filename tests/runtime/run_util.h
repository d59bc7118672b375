// Running a loaded model in tests: full-prompt logits and pure-argmax greedy continuations, with
// an optional set of unfused adapters and their per-sequence scales.
#pragma once
#include <algorithm>
#include <memory>
#include <vector>

#include "graft/model/loader.h"
#include "graft/runtime/lora.h"
#include "graft/runtime/transformer.h"

namespace graft::test {

// Logits for every position of `ids` ([ids.size(), vocab], row-major).
inline std::vector<float> prompt_logits(const model::LoadedModel& m, std::shared_ptr<const runtime::LoraSet> set,
                                        std::vector<float> scales, const std::vector<int32_t>& ids, int threads = 2) {
  runtime::ThreadPool pool(threads);
  runtime::Transformer t(m.config, m.weights, std::move(set));
  runtime::KVCache cache(m.config, static_cast<int64_t>(ids.size()) + 1);
  runtime::SequenceInput in{&cache, ids, true, scales};
  return t.forward(pool, std::span(&in, 1));
}

// n argmax steps after the prompt (EOS not special), one token per forward pass.
inline std::vector<int32_t> greedy_ids(const model::LoadedModel& m, std::shared_ptr<const runtime::LoraSet> set,
                                       std::vector<float> scales, const std::vector<int32_t>& ids, size_t n) {
  runtime::ThreadPool pool(2);
  runtime::Transformer t(m.config, m.weights, std::move(set));
  runtime::KVCache cache(m.config, static_cast<int64_t>(ids.size() + n) + 1);
  runtime::SequenceInput in{&cache, ids, false, scales};
  auto lg = t.forward(pool, std::span(&in, 1));
  std::vector<int32_t> out;
  while (out.size() < n) {
    out.push_back(static_cast<int32_t>(std::max_element(lg.begin(), lg.end()) - lg.begin()));
    runtime::SequenceInput step{&cache, std::span(&out.back(), 1), false, scales};
    lg = t.forward(pool, std::span(&step, 1));
  }
  return out;
}

}  // namespace graft::test
