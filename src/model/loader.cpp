#include "graft/model/loader.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/adapter/adapted_source.h"
#include "graft/core/error.h"
#include "graft/io/json_file.h"
#include "graft/model/fused_projections.h"
#include "graft/model/stacked_experts.h"
#include "graft/model/model_adapters.h"
#include "graft/text/gguf_tokenizer.h"

namespace graft::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& p) { return io::read_json_file(p.string(), io::kMaxConfigBytes, "config"); }

bool is_gguf(const std::string& path) {
  if (!fs::is_regular_file(path)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in && std::string(magic, 4) == "GGUF";
}

// tokenizer_config.json's chat_template (a string, or a list of named templates: "default" wins),
// or transformers 5's separate chat_template.jinja.
std::optional<std::string> hf_chat_template(const fs::path& dir) {
  const fs::path jinja = dir / "chat_template.jinja";
  if (fs::exists(jinja)) return io::read_regular_file(jinja.string(), io::kMaxConfigBytes, "chat template");
  const fs::path cfg = dir / "tokenizer_config.json";
  if (!fs::exists(cfg)) return std::nullopt;
  json j = read_json(cfg);
  if (!j.contains("chat_template")) return std::nullopt;
  const json& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const auto& e : t)
      if (e.is_object() && e.contains("name") && e["name"] == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
  fail("'", cfg.string(), "': chat_template is neither a string nor a list with a 'default' entry");
}

// generation_config.json may list several EOS ids (Llama-3 instruct); they all stop generation.
void merge_generation_config(const fs::path& dir, ModelConfig& c) {
  const fs::path p = dir / "generation_config.json";
  if (!fs::exists(p)) return;
  json j = read_json(p);
  auto add = [&](const json& v) {
    if (v.is_number_integer()) {
      const int64_t wide = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX) ? -1 : v.get<int64_t>();
      if (wide < 0 || wide >= c.vocab_size)
        fail("'", p.string(), "': eos_token_id ", io::json_excerpt(v), " is not a token id in [0, ", c.vocab_size, ")");
      const int32_t id = static_cast<int32_t>(wide);
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end())
        c.eos_token_ids.push_back(id);
    }
  };
  if (j.contains("eos_token_id")) {
    if (j["eos_token_id"].is_array())
      for (const auto& v : j["eos_token_id"]) add(v);
    else
      add(j["eos_token_id"]);
  }
}

}  // namespace

ModelSource open_model_source(const std::string& path) {
  if (!fs::exists(path)) fail("model path '", path, "' does not exist");
  if (is_gguf(path)) return open_gguf_model_source(path);
  if (!fs::is_directory(path))
    fail("model path '", path, "' is neither a GGUF file nor a Hugging Face model directory");
  const fs::path cfg = fs::path(path) / "config.json";
  if (!fs::exists(cfg)) fail("model directory '", path, "' has no config.json");
  ModelConfig c = parse_hf_config(read_json(cfg), cfg.string());
  merge_generation_config(path, c);
  std::shared_ptr<io::TensorSource> source = io::open_safetensors_checkpoint(path);
  // Each layer holds several tensors: refuse a layer count the files cannot back before anything
  // loops over it.
  if (static_cast<uint64_t>(c.num_layers) > source->names().size())
    fail("config '", cfg.string(), "': num_hidden_layers is ", c.num_layers, " but the checkpoint holds only ",
         source->names().size(), " tensors");
  if (c.quantization && c.fused_projections)
    fail_as(ErrorKind::kUnsupported, "config '", cfg.string(), "': quantization is not supported for ", c.model_type,
            " (an mlx-lm quantized checkpoint of fused qkv_proj/gate_up_proj is not implemented; use the dense ",
            "checkpoint, or a GGUF file)");
  source = split_fused_projections(source, c);
  source = unstack_mlx_experts(source, c);  // mlx-lm's stacked switch_mlp experts, dense or quantized
  if (c.quantization) unstack_quantization_overrides(*c.quantization, c);
  if (c.quantization) source = std::make_shared<QuantizedCheckpointSource>(source, *c.quantization);
  return ModelSource{"safetensors", c, source, nullptr};
}

namespace {

// Where each matrix an adapter is fused into goes (LoadOptions::fuse_dense): the loader's
// instructions in `wo`, and the count per resulting format.
std::map<std::string, int64_t> plan_fused_storage(const io::TensorSource& source,
                                                  const QuantizedCheckpointSource* quantized,
                                                  const adapter::WeightAdapterPlan& plan, const LoadOptions& options,
                                                  WeightLoadOptions& wo) {
  std::map<std::string, int64_t> formats;
  for (const auto& [tensor, updates] : plan.updates) {
    const std::optional<io::TensorInfo> info = source.info(tensor);
    if (quantized && quantized->is_quantized(tensor)) {
      if (options.fuse_dense) {
        wo.dense.insert(tensor);
        ++formats[std::string(dtype_name(options.weight_dtype.value_or(DType::F32)))];
      } else {
        wo.requantize.insert(tensor);
        wo.requantize_scale_dtype = quantized->scale_dtype(tensor);
        ++formats["mlx " + std::to_string(kRequantizeBits) + "-bit"];
      }
    } else if (info && dtype_is_quantized(info->dtype) && !options.weight_dtype && !options.quantize) {
      // (--dtype or --q-bits convert every GGUF matrix anyway: the merged F32 follows them.)
      if (options.fuse_dense) {
        ++formats["F32"];
        continue;
      }
      wo.requantize_blocks.insert(tensor);
      ++formats["Q8_0"];
    } else if (info) {
      ++formats[std::string(dtype_name(options.weight_dtype.value_or(dtype_is_quantized(info->dtype) ? DType::F32 : info->dtype)))];
    }
  }
  return formats;
}

}  // namespace

LoadedModel load_model(const std::string& path, const LoadOptions& options) {
  ModelSource src = open_model_source(path);
  std::optional<text::Tokenizer> tok;
  std::optional<std::string> chat_template;
  std::string template_origin;
  if (src.gguf) {
    tok.emplace(text::Tokenizer::from_spec(text::tokenizer_spec_from_gguf(*src.gguf)));
    chat_template = text::chat_template_from_gguf(*src.gguf);
    template_origin = "'" + path + "' (tokenizer.chat_template)";
  } else {
    const fs::path tj = fs::path(path) / "tokenizer.json";
    if (!fs::exists(tj)) fail("model directory '", path, "' has no tokenizer.json");
    const fs::path tc = fs::path(path) / "tokenizer_config.json";
    tok.emplace(text::Tokenizer::from_files(tj.string(), fs::exists(tc) ? tc.string() : ""));
    chat_template = hf_chat_template(path);
    template_origin = fs::exists(fs::path(path) / "chat_template.jinja")
                          ? "'" + (fs::path(path) / "chat_template.jinja").string() + "'"
                          : "'" + tc.string() + "' (chat_template)";
  }
  if (tok->vocab_size() > src.config.vocab_size)
    fail("model '", path, "': tokenizer has ", tok->vocab_size(), " tokens but the embedding has only ",
         src.config.vocab_size, " rows");
  if (src.config.eos_token_ids.empty() && tok->eos_id()) src.config.eos_token_ids.push_back(*tok->eos_id());
  auto quantized = std::dynamic_pointer_cast<const QuantizedCheckpointSource>(src.source);
  WeightLoadOptions wo;
  wo.progress = options.progress;
  wo.weight_dtype = options.weight_dtype;
  wo.quantize = options.quantize;
  wo.copy_weights = options.copy_weights;
  wo.pool = options.pool;
  wo.quantized = quantized.get();
  std::shared_ptr<const io::TensorSource> weights_source = src.source;
  std::shared_ptr<const adapter::WeightAdapterPlan> plan;
  std::map<std::string, int64_t> fused_formats;
  if (!options.fused_adapters.empty()) {
    const auto qweights = quantized ? quantized->quantized_weights() : std::vector<std::string>{};
    // Quantized bases are requantized or kept dense (fuse_dense), never refused here.
    plan = bind_model_adapters(src.config, *src.source, options.fused_adapters, AdapterPath::Fused, qweights,
                               /*allow_requantize=*/true);
    adapter::AdaptedSourceOptions ao;
    ao.policy = options.merge_policy;
    ao.pool = options.pool;
    ao.dtype = options.weight_dtype;  // merge straight into the load dtype: one rounding, not two
    weights_source = adapter::make_weight_adapter_source(src.source, plan, ao);
    fused_formats = plan_fused_storage(*src.source, quantized.get(), *plan, options, wo);
  }
  ModelWeights w = load_weights(src.config, *weights_source, wo);
  return LoadedModel{path,          src.format,      src.config,      src.source,
                     quantized,     plan,            std::move(fused_formats), std::move(w),
                     std::move(*tok), chat_template, template_origin};
}

}  // namespace graft::model
