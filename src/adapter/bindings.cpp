#include "graft/adapter/bindings.h"

#include <algorithm>

#include "graft/core/error.h"

namespace graft::adapter {

namespace {

// Prefixes kohya / ComfyUI / LyCORIS / OneTrainer put before the flattened module path.
constexpr const char* kFlatPrefixes[] = {"lora_unet_", "lora_te_", "lora_te1_", "lora_te2_", "lora_transformer_",
                                         "lycoris_", "lora_"};

std::string flatten(std::string s) {
  std::replace(s.begin(), s.end(), '.', '_');
  return s;
}

void split_name(const std::string& name, std::string& stem, std::string& param) {
  for (const char* p : {"weight", "bias"}) {
    const std::string suffix = std::string(".") + p;
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      stem = name.substr(0, name.size() - suffix.size());
      param = p;
      return;
    }
  }
  stem = name;
  param = "weight";
}

// The whole of one tensor as an update's target.
Binding whole_tensor(const std::string& name, const Shape& shape) {
  Binding b;
  b.one_dimensional = shape.size() == 1;
  b.delta_rows = shape.empty() ? 1 : shape[0];
  b.delta_cols = shape.size() >= 2 ? shape_numel(shape) / shape[0] : 0;
  b.slices.push_back({name, 0, 0, b.delta_rows});
  return b;
}

}  // namespace

std::vector<std::string> module_aliases(const std::string& stem) {
  std::vector<std::string> out = {stem, "base_model.model." + stem};
  const std::string flat = flatten(stem);
  for (const char* p : kFlatPrefixes) out.push_back(p + flat);
  return out;
}

void WeightAdapterBindings::register_aliases(const std::string& stem, const std::string& param, const Binding& b,
                                             const std::string& owner) {
  for (const std::string& alias : module_aliases(stem)) {
    const std::string key = alias + "|" + param;
    auto it = owners_.find(key);
    if (it != owners_.end()) {
      if (it->second == owner) continue;  // the same tensor reaching one alias twice is harmless
      fail("adapter bindings: alias '", alias, "' (", param, ") would map to both '", it->second, "' and '", owner,
           "'; refusing to pick one");
    }
    owners_[key] = owner;
    aliases_[key] = b;
  }
}

void WeightAdapterBindings::add_tensor(const std::string& name, const Shape& shape) {
  std::string stem, param;
  split_name(name, stem, param);
  shapes_[name] = shape;
  register_aliases(stem, param, whole_tensor(name, shape), name);
}

void WeightAdapterBindings::add_alias(const std::string& alias, const std::string& tensor) {
  auto s = tensor_shape(tensor);
  if (!s) fail("adapter bindings: alias '", alias, "' names unknown tensor '", tensor, "'");
  std::string stem, param;
  split_name(tensor, stem, param);
  const std::string key = alias + "|" + param;
  auto it = owners_.find(key);
  if (it != owners_.end() && it->second != tensor)
    fail("adapter bindings: alias '", alias, "' (", param, ") would map to both '", it->second, "' and '", tensor,
         "'; refusing to pick one");
  owners_[key] = tensor;
  aliases_[key] = whole_tensor(tensor, *s);
}

void WeightAdapterBindings::add_fused_split(const std::string& external_module, const std::vector<std::string>& parts) {
  Binding b;
  for (const auto& part : parts) {
    auto s = tensor_shape(part);
    if (!s || s->size() != 2) fail("adapter bindings: fused split '", external_module, "' names unknown 2-D tensor '", part, "'");
    if (b.delta_cols == 0) b.delta_cols = (*s)[1];
    if ((*s)[1] != b.delta_cols)
      fail("adapter bindings: fused split '", external_module, "': parts have different column counts");
    b.slices.push_back({part, b.delta_rows, 0, (*s)[0]});
    b.delta_rows += (*s)[0];
  }
  register_aliases(external_module, "weight", b, external_module + " (fused split)");
}

void WeightAdapterBindings::add_fused_part(const std::string& external_module, const std::string& fused_tensor,
                                           int64_t row_offset, int64_t rows) {
  auto s = tensor_shape(fused_tensor);
  if (!s || s->size() != 2) fail("adapter bindings: fused part '", external_module, "' names unknown tensor '", fused_tensor, "'");
  if (row_offset < 0 || rows <= 0 || row_offset + rows > (*s)[0])
    fail("adapter bindings: fused part '", external_module, "' rows [", row_offset, ", ", row_offset + rows,
         ") outside '", fused_tensor, "' ", shape_str(*s));
  Binding b;
  b.delta_rows = rows;
  b.delta_cols = (*s)[1];
  b.slices.push_back({fused_tensor, 0, row_offset, rows});
  register_aliases(external_module, "weight", b, external_module + " (part of " + fused_tensor + ")");
}

const Binding* WeightAdapterBindings::resolve(const std::string& module, const std::string& param) const {
  auto it = aliases_.find(module + "|" + param);
  return it == aliases_.end() ? nullptr : &it->second;
}

std::optional<Shape> WeightAdapterBindings::tensor_shape(const std::string& tensor) const {
  auto it = shapes_.find(tensor);
  if (it == shapes_.end()) return std::nullopt;
  return it->second;
}

WeightAdapterBindings bindings_for_source(const io::TensorSource& source) {
  WeightAdapterBindings b;
  for (const auto& name : source.names()) b.add_tensor(name, source.info(name)->shape);
  return b;
}

}  // namespace graft::adapter
