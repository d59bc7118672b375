// WeightAdapterBindings: which model tensor (rows) an adapter's module name refers to. A model or
// checkpoint declares its real tensor names; every alias an adapter file may use is generated
// forward from those names and registered here, centrally: the bare module path, PEFT's
// "base_model.model." prefix, and the underscore-flattened kohya/ComfyUI/LyCORIS forms. Names are
// never parsed backwards (flattening is lossy). Two tensors claiming one alias is an error.
//
// A binding may also split a fused external projection (an adapter trained on "qkv_proj") into
// the model's complete tensors by output rows, or place separate external projections into row
// ranges of one fused model tensor.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graft/core/tensor.h"
#include "graft/io/tensor_source.h"

namespace graft::adapter {

// Rows [src_row, src_row + rows) of an update's ΔW go to rows [dst_row, ...) of `tensor`.
struct BoundSlice {
  std::string tensor;
  int64_t src_row = 0;
  int64_t dst_row = 0;
  int64_t rows = 0;
};

struct Binding {
  std::vector<BoundSlice> slices;
  int64_t delta_rows = 0;  // rows the update's ΔW must have
  int64_t delta_cols = 0;  // columns it must have (0 for 1-D tensors)
  bool one_dimensional = false;
};

class WeightAdapterBindings {
 public:
  // A model tensor "X.weight" / "X.bias" (or any name: stem = name, param "weight") with its shape.
  void add_tensor(const std::string& name, const Shape& shape);
  // An external fused module (e.g. "model.layers.0.self_attn.qkv_proj") whose ΔW rows are the
  // concatenation of these complete model tensors (already added), in order.
  void add_fused_split(const std::string& external_module, const std::vector<std::string>& parts);
  // An external module whose ΔW lands on rows [row_offset, row_offset + rows) of a fused tensor.
  void add_fused_part(const std::string& external_module, const std::string& fused_tensor, int64_t row_offset,
                      int64_t rows);

  // One exact extra name (no generated variants) for a tensor already added, as the same param:
  // llama.cpp's GGUF names ("blk.0.attn_q" for "model.layers.0.self_attn.q_proj.weight").
  void add_alias(const std::string& alias, const std::string& tensor);

  // The binding of (module as the adapter file spells it, "weight" | "bias"), if any alias matches.
  const Binding* resolve(const std::string& module, const std::string& param) const;
  std::optional<Shape> tensor_shape(const std::string& tensor) const;
  size_t alias_count() const { return aliases_.size(); }

 private:
  void register_aliases(const std::string& stem, const std::string& param, const Binding& b, const std::string& owner);
  std::map<std::string, Binding> aliases_;     // "alias|param" -> binding
  std::map<std::string, std::string> owners_;  // "alias|param" -> what registered it (collision messages)
  std::map<std::string, Shape> shapes_;
};

// Bindings for every tensor of a checkpoint (what `graft fuse` uses on any safetensors model).
WeightAdapterBindings bindings_for_source(const io::TensorSource& source);

// The aliases graft generates for a module stem (exposed for `inspect` and tests).
std::vector<std::string> module_aliases(const std::string& stem);

}  // namespace graft::adapter
