// Merge: a fuzzed PEFT adapter (parts [adapter_config.json, adapter_model.safetensors]) bound to
// one of the tiny committed base checkpoints (the input's last byte picks the family and dtype,
// and the merge policy and strength), then every updated tensor merged and read. The bases are
// fixed fixtures, not random weights: the adapter side is what the fuzzer varies.
#include "fuzz_adapter.h"
#include "graft/adapter/adapted_source.h"
#include "graft/model/loader.h"
#include "graft/model/model_adapters.h"

namespace {
const graft::model::ModelSource& base(size_t i) {
  static const char* kNames[] = {"llama_f32", "qwen2_f32", "qwen3_f32", "mistral_f32", "llama_bf16"};
  static std::vector<graft::model::ModelSource> bases = [] {
    std::vector<graft::model::ModelSource> out;
    for (const char* n : kNames)
      out.push_back(graft::model::open_model_source(std::string(GRAFT_SOURCE_DIR) + "/tests/fixtures/models/" + n));
    return out;
  }();
  return bases[i % bases.size()];
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const uint8_t choice = size ? data[size - 1] : 0;
  const graft::model::ModelSource& b = base(choice);
  graft::fuzz::ScratchDir dir;
  const std::string path = graft::fuzz::write_adapter(dir, data, size, "peft");
  graft::fuzz::expect_graft_errors_only([&] {
    auto a = std::make_shared<graft::adapter::WeightAdapter>(graft::adapter::read_weight_adapter(path));
    static const float kStrengths[] = {1.0f, 0.5f, -2.0f};
    std::vector<graft::adapter::AdapterUse> uses{{a, kStrengths[(choice / 8) % 3]}};
    auto plan = graft::model::bind_model_adapters(b.config, *b.source, uses, graft::model::AdapterPath::Fused);
    graft::adapter::AdaptedSourceOptions o;
    static const graft::adapter::MergePolicy kPolicies[] = {graft::adapter::MergePolicy::DeltaF32,
                                                            graft::adapter::MergePolicy::RankWiseF32,
                                                            graft::adapter::MergePolicy::RoundedBF16Delta};
    o.policy = kPolicies[(choice / 32) % 3];
    auto merged = graft::adapter::make_weight_adapter_source(b.source, plan, o);
    for (const auto& [tensor, updates] : plan->updates) (void)merged->read(tensor);
  });
  return 0;
}
