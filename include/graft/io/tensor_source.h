// TensorSource: where a model's weights come from, by name. A checkpoint on disk is one; the
// adapter layer wraps one in an overlay that materializes adapted tensors on read. Interface kept
// narrow on purpose: names, metadata of one tensor, and the tensor itself.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graft/core/tensor.h"

namespace graft::io {

struct TensorInfo {
  DType dtype;
  Shape shape;
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual std::vector<std::string> names() const = 0;
  virtual std::optional<TensorInfo> info(const std::string& name) const = 0;
  // The tensor in its stored dtype (zero-copy where the storage allows); throws naming the source
  // and tensor when it is absent.
  virtual Tensor read(const std::string& name) const = 0;
  // Human-readable origin for error messages ("model.safetensors", a directory, ...).
  virtual std::string describe() const = 0;

  // A hint that the caller will not read this tensor's stored bytes again (an overlay that has
  // merged it): sources backed by a file mapping drop its pages from the process. Views already
  // handed out stay valid (the pages reload from the file if touched). Default: nothing.
  virtual void release(const std::string& name) const { (void)name; }

  bool has(const std::string& name) const { return info(name).has_value(); }
};

// A Hugging Face checkpoint directory: model.safetensors, or model.safetensors.index.json with its
// shards (every shard it names must exist and hold the tensors the index assigns to it).
std::shared_ptr<TensorSource> open_safetensors_checkpoint(const std::string& dir);
// One safetensors file as a source.
std::shared_ptr<TensorSource> open_safetensors_source(const std::string& file);

}  // namespace graft::io
