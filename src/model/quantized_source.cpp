#include "graft/model/quantized_source.h"

#include <set>
#include <sstream>

#include "graft/core/error.h"

namespace graft::model {

QuantizedCheckpointSource::QuantizedCheckpointSource(std::shared_ptr<const io::TensorSource> raw,
                                                     const QuantizationConfig& config)
    : raw_(std::move(raw)) {
  std::vector<std::string> problems;
  for (const auto& name : raw_->names()) {
    if (!name.ends_with(".scales")) continue;
    const std::string stem = name.substr(0, name.size() - 7);
    const std::string weight = stem + ".weight";
    auto spec = config.spec_for(stem);
    auto wi = raw_->info(weight), si = raw_->info(name), bi = raw_->info(stem + ".biases");
    if (!spec) {
      problems.push_back("'" + name + "' exists but config.json's quantization block leaves '" + stem +
                         "' unquantized (false)");
      continue;
    }
    if (!wi || !bi) {
      problems.push_back("quantized module '" + stem + "' lacks " + (!wi ? "'.weight'" : "'.biases'") +
                         " (affine quantization stores weight, scales and biases)");
      continue;
    }
    if (wi->dtype != DType::U32 || wi->shape.size() != 2 || si->shape.size() != 2) {
      problems.push_back("quantized module '" + stem + "': weight is " + std::string(dtype_name(wi->dtype)) + " " +
                         shape_str(wi->shape) + ", scales " + shape_str(si->shape) +
                         "; expected U32 packed codes [rows, cols*bits/32] and 2-D scales");
      continue;
    }
    Module m{*spec, wi->shape[0], wi->shape[1] * 32 / spec->bits, si->dtype, stem};
    const Shape groups = {m.rows, m.cols / spec->group_size};
    if (si->shape != groups || bi->shape != groups) {
      problems.push_back("quantized module '" + stem + "': scales " + shape_str(si->shape) + " / biases " +
                         shape_str(bi->shape) + " do not match " + std::to_string(spec->bits) + "-bit codes " +
                         shape_str(wi->shape) + " with group size " + std::to_string(spec->group_size) +
                         " (expected " + shape_str(groups) + ")");
      continue;
    }
    modules_[weight] = m;
  }
  if (!problems.empty()) {
    std::ostringstream os;
    os << "quantized checkpoint " << raw_->describe() << " is inconsistent (" << problems.size() << " problem"
       << (problems.size() > 1 ? "s" : "") << "):";
    for (const auto& p : problems) os << "\n  - " << p;
    throw Error(os.str());
  }
}

std::vector<std::string> QuantizedCheckpointSource::names() const {
  std::vector<std::string> out;
  for (const auto& n : raw_->names()) {
    if (n.ends_with(".scales") && modules_.count(n.substr(0, n.size() - 7) + ".weight")) continue;
    if (n.ends_with(".biases") && modules_.count(n.substr(0, n.size() - 7) + ".weight")) continue;
    out.push_back(n);
  }
  return out;
}

std::optional<io::TensorInfo> QuantizedCheckpointSource::info(const std::string& name) const {
  auto it = modules_.find(name);
  if (it != modules_.end()) return io::TensorInfo{DType::F32, {it->second.rows, it->second.cols}};
  for (const char* suffix : {".scales", ".biases"})
    if (name.ends_with(suffix) && modules_.count(name.substr(0, name.size() - 7) + ".weight")) return std::nullopt;
  return raw_->info(name);
}

AffineQuantized QuantizedCheckpointSource::quantized(const std::string& weight_name) const {
  auto it = modules_.find(weight_name);
  if (it == modules_.end()) fail(raw_->describe(), ": '", weight_name, "' is not quantized");
  const Module& m = it->second;
  return make_affine_quantized(raw_->read(weight_name), raw_->read(m.stem + ".scales"), raw_->read(m.stem + ".biases"),
                               m.spec.bits, m.spec.group_size, m.rows, m.cols, raw_->describe() + ": '" + m.stem + "'");
}

QuantSpec QuantizedCheckpointSource::spec(const std::string& weight_name) const {
  auto it = modules_.find(weight_name);
  if (it == modules_.end()) fail(raw_->describe(), ": '", weight_name, "' is not quantized");
  return it->second.spec;
}

void QuantizedCheckpointSource::release(const std::string& name) const {
  raw_->release(name);
  auto it = modules_.find(name);
  if (it == modules_.end()) return;
  raw_->release(it->second.stem + ".scales");
  raw_->release(it->second.stem + ".biases");
}

DType QuantizedCheckpointSource::scale_dtype(const std::string& weight_name) const {
  auto it = modules_.find(weight_name);
  if (it == modules_.end()) fail(raw_->describe(), ": '", weight_name, "' is not quantized");
  return it->second.scale_dtype;
}

std::vector<std::string> QuantizedCheckpointSource::quantized_weights() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : modules_) out.push_back(name);
  return out;
}

Tensor QuantizedCheckpointSource::read(const std::string& name) const {
  if (is_quantized(name)) return dequantize_affine(quantized(name));
  if (!info(name)) fail(raw_->describe(), ": no tensor '", name, "'");
  return raw_->read(name);
}

}  // namespace graft::model
