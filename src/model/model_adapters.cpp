#include "graft/model/model_adapters.h"

#include <algorithm>
#include <sstream>

#include "graft/core/error.h"
#include "graft/model/adapter_bindings.h"
#include "graft/model/gguf_adapters.h"

namespace graft::model {

namespace {

[[noreturn]] void refuse(const std::string& what, const std::vector<std::string>& problems) {
  std::ostringstream os;
  os << what << " (" << problems.size() << " problem" << (problems.size() > 1 ? "s" : "") << "); no weight was changed:";
  for (const auto& p : problems) os << "\n  - " << p;
  throw Error(os.str());
}

}  // namespace

adapter::WeightAdapterBindings bindings_for_model(const ModelConfig& config, const io::TensorSource& source) {
  adapter::WeightAdapterBindings b = model_adapter_bindings(config, source);
  if (config.tie_word_embeddings && !source.has(kLmHeadName))
    b.add_tensor(kLmHeadName, {config.vocab_size, config.hidden_size});
  add_gguf_tensor_aliases(b, config);
  return b;
}

std::shared_ptr<const ModelBindings> model_bindings(const ModelConfig& config, const io::TensorSource& source) {
  auto b = std::make_shared<ModelBindings>();
  b->aliases = bindings_for_model(config, source);
  for (auto& [name, role] : tensor_roles(config)) b->roles.emplace(std::move(name), role);
  return b;
}

void check_tied_head_rules(const ModelConfig& config, const FamilyTraits& family,
                           const std::vector<adapter::AdapterUse>& adapters,
                           const adapter::WeightAdapterBindings& bindings, AdapterPath path) {
  if (!config.tie_word_embeddings) return;
  const char* path_name = path == AdapterPath::Fused ? "fused" : "unfused";
  std::vector<std::string> problems;
  for (const auto& use : adapters)
    for (const auto& t : use.adapter->targets) {
      const adapter::Binding* b = bindings.resolve(t.module, t.param);
      if (!b) continue;  // bind_weight_adapter reports it
      for (const auto& s : b->slices) {
        if (s.tensor == kLmHeadName)
          problems.push_back("'" + use.adapter->path + "' module '" + t.module +
                             "' adapts lm_head, but this checkpoint ties lm_head to embed_tokens "
                             "(tie_word_embeddings); an lm_head pair would also change the input embedding, so it is "
                             "refused (" + path_name + " path)");
        else if (s.tensor == kEmbedName && !family.tied_embedding_adapters)
          problems.push_back("'" + use.adapter->path + "' module '" + t.module + "' adapts embed_tokens of a tied " +
                             config.model_type + " checkpoint; embedding adapters on tied checkpoints are supported "
                             "only for families whose head is the embedding read as a linear layer (" +
                             path_name + " path)");
      }
    }
  if (!problems.empty()) refuse("cannot apply adapter(s) to the tied embedding/head", problems);
}

std::shared_ptr<adapter::WeightAdapterPlan> bind_model_adapters(const ModelConfig& config,
                                                                const io::TensorSource& source,
                                                                const std::vector<adapter::AdapterUse>& uses,
                                                                AdapterPath path,
                                                                const std::vector<std::string>& quantized_weights,
                                                                bool allow_requantize) {
  return bind_model_adapters(config, source, *model_bindings(config, source), uses, path, quantized_weights,
                             allow_requantize);
}

std::shared_ptr<adapter::WeightAdapterPlan> bind_model_adapters(const ModelConfig& config,
                                                                const io::TensorSource& source,
                                                                const ModelBindings& bindings,
                                                                const std::vector<adapter::AdapterUse>& uses,
                                                                AdapterPath path,
                                                                const std::vector<std::string>& quantized_weights,
                                                                bool allow_requantize) {
  // The plan keeps these (GGUF adapters in this model's q/k row order), so every path reads them.
  const std::vector<adapter::AdapterUse> adapters = gguf_adapters_for_model(config, uses);
  check_tied_head_rules(config, family(config.model_type), adapters, bindings.aliases, path);
  adapter::BindOptions bo;
  bo.allow_quantized_base = path == AdapterPath::Unfused;  // terms never touch the stored weights
  auto plan = adapter::bind_weight_adapter(adapters, bindings.aliases, source, bo);
  if (path == AdapterPath::Fused && !allow_requantize) {
    std::vector<std::string> problems;
    for (const auto& [tensor, updates] : plan->updates)
      if (std::find(quantized_weights.begin(), quantized_weights.end(), tensor) != quantized_weights.end())
        problems.push_back("'" + tensor + "' is stored quantized; writing it merged is refused - write every " +
                           "weight dense with fuse --dequantize, or apply the adapter at run time: generate/serve " +
                           "--adapter (merged and quantized again) or --lora (exact on quantized bases)");
    if (!problems.empty()) refuse("cannot fuse adapter(s) into a quantized checkpoint", problems);
  }
  return plan;
}

}  // namespace graft::model
