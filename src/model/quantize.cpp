#include "graft/model/quantize.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "graft/core/affine_quant.h"
#include "graft/core/convert.h"
#include "graft/core/error.h"
#include "graft/core/interrupt.h"
#include "graft/io/checkpoint_writer.h"
#include "graft/io/json_file.h"
#include "graft/io/staged_dir.h"
#include "graft/model/family.h"
#include "graft/model/loader.h"

namespace graft::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {


// The dense checkpoint seen as its quantized form. Each quantized module's three tensors come from
// one quantization, kept until another module is asked for (the writer asks for them in turn).
class QuantizingSource : public io::TensorSource {
 public:
  QuantizingSource(std::shared_ptr<const io::TensorSource> base, std::set<std::string> modules, const QuantizeOptions& o)
      : base_(std::move(base)), modules_(std::move(modules)), opt_(o) {}

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& n : base_->names()) {
      out.push_back(n);
      if (modules_.count(n)) {
        const std::string stem = n.substr(0, n.size() - 7);
        out.push_back(stem + ".scales");
        out.push_back(stem + ".biases");
      }
    }
    return out;
  }

  std::optional<io::TensorInfo> info(const std::string& name) const override {
    auto [weight, part] = split(name);
    if (weight.empty()) {
      auto i = base_->info(name);
      if (i && opt_.dtype && is_float(i->dtype)) i->dtype = *opt_.dtype;
      return i;
    }
    auto i = base_->info(weight);
    const DType dt = opt_.dtype ? *opt_.dtype : i->dtype;
    const int64_t rows = i->shape[0], cols = i->shape[1];
    if (part == "weight") return io::TensorInfo{DType::U32, {rows, cols * opt_.bits / 32}};
    return io::TensorInfo{dt, {rows, cols / opt_.group_size}};
  }

  Tensor read(const std::string& name) const override {
    auto [weight, part] = split(name);
    if (weight.empty()) {
      Tensor t = base_->read(name);
      return opt_.dtype && is_float(t.dtype) ? convert_tensor(t, *opt_.dtype) : t;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_name_ != weight) {
      Tensor w = base_->read(weight);
      if (opt_.dtype) w = convert_tensor(w, *opt_.dtype);
      cached_ = quantize_affine(w, opt_.bits, opt_.group_size, w.dtype);
      cached_dtype_ = w.dtype;
      cached_name_ = weight;
    }
    if (part == "weight") return cached_.packed;
    return affine_param_as(part == "scales" ? cached_.scales : cached_.biases, cached_dtype_);
  }

  std::string describe() const override { return base_->describe() + " (quantizing)"; }

 private:
  static bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
  // "<m>.weight" of a quantized module -> ("<m>.weight", "weight"); its scales/biases likewise.
  std::pair<std::string, std::string> split(const std::string& name) const {
    if (modules_.count(name)) return {name, "weight"};
    for (const char* part : {"scales", "biases"}) {
      const std::string suffix = std::string(".") + part;
      if (name.ends_with(suffix)) {
        const std::string w = name.substr(0, name.size() - suffix.size()) + ".weight";
        if (modules_.count(w)) return {w, part};
      }
    }
    return {"", ""};
  }

  std::shared_ptr<const io::TensorSource> base_;
  std::set<std::string> modules_;
  QuantizeOptions opt_;
  mutable std::mutex mu_;
  mutable std::string cached_name_;
  mutable AffineQuantized cached_;
  mutable DType cached_dtype_ = DType::F32;
};

}  // namespace

QuantizeResult quantize_checkpoint(const std::string& model_dir, const std::string& out_dir, const QuantizeOptions& o) {
  check_affine_params(o.bits, o.group_size, o.group_size, "--bits/--group-size");
  if (o.dtype && *o.dtype != DType::F32 && *o.dtype != DType::F16 && *o.dtype != DType::BF16)
    fail_as(ErrorKind::kBadRequest, "quantize: --dtype must be F32, F16 or BF16");
  ModelSource src = open_model_source(model_dir);
  if (src.format != "safetensors")
    fail_as(ErrorKind::kUnsupported, "quantize: '", model_dir, "' is a ", src.format,
         " file; graft quantize reads a dense Hugging Face directory (config.json + safetensors)");
  if (src.config.fused_projections)  // the loader refuses quantized checkpoints of these (model/loader.cpp)
    fail_as(ErrorKind::kUnsupported, "quantize: '", model_dir, "' is a ", src.config.model_type,
            " checkpoint; quantizing its fused qkv_proj/gate_up_proj is not supported");
  if (src.config.num_experts > 0)  // mlx-lm quantizes stacked switch_mlp experts, not per-expert matrices
    fail_as(ErrorKind::kUnsupported, "quantize: '", model_dir, "' is a ", src.config.model_type,
            " checkpoint; quantizing mixture-of-experts weights is not supported (use a GGUF file for quantized experts)");
  if (src.config.quantization) fail_as(ErrorKind::kBadRequest, "quantize: '", model_dir, "' is already quantized (config.json has a quantization block)");
  if (fs::exists(out_dir) && fs::exists(model_dir) && fs::equivalent(out_dir, model_dir))
    fail_as(ErrorKind::kBadRequest, "quantize: --out must differ from --model");
  if (fs::exists(out_dir) && (!fs::is_directory(out_dir) || !fs::is_empty(out_dir)))
    fail_as(ErrorKind::kBadRequest, "quantize: output directory '", out_dir, "' exists and is not empty; refusing to overwrite");

  // mlx-lm quantizes every Linear and Embedding whose input size divides by the group size.
  const ModelConfig& c = src.config;
  std::vector<std::string> candidates = {kEmbedName};
  if (!c.tie_word_embeddings || src.source->has(kLmHeadName)) candidates.push_back(kLmHeadName);
  for (int64_t l = 0; l < c.num_layers; ++l)
    for (Role r : {Role::Q, Role::K, Role::V, Role::O, Role::Gate,
                          Role::Up, Role::Down})
      candidates.push_back(hf_layer_tensor_name(l, r));
  std::set<std::string> modules;
  for (const auto& n : candidates) {
    auto i = src.source->info(n);
    if (i && i->shape.size() == 2 && i->shape[1] % o.group_size == 0) modules.insert(n);
  }
  QuantizingSource q(src.source, modules, o);

  json config = io::read_json_file((fs::path(model_dir) / "config.json").string(), io::kMaxConfigBytes, "config");
  const json block = {{"group_size", o.group_size}, {"bits", o.bits}, {"mode", "affine"}};
  config["quantization"] = block;
  config["quantization_config"] = block;

  // Written into a staging directory beside out_dir, renamed into place only when every file is
  // written, checked and flushed: out_dir holds a complete checkpoint or nothing.
  io::StagedDirectory staged(out_dir);
  QuantizeResult r;
  io::CheckpointWriteOptions w;
  w.progress = o.progress;
  const auto written = io::write_checkpoint(q, staged.path(), w);
  for (const auto& e : fs::directory_iterator(model_dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || e.path().extension() == ".safetensors" || name == "model.safetensors.index.json" ||
        name == "config.json")
      continue;
    staged.copy_file(e.path().string(), name);
  }
  staged.write_file("config.json", config.dump(2) + "\n");
  throw_if_interrupted();
  staged.commit();
  r.quantized_modules = static_cast<int64_t>(modules.size());
  r.kept_tensors = written.tensors - 3 * r.quantized_modules;
  r.bytes = written.bytes;
  return r;
}

}  // namespace graft::model
