// Writes any TensorSource as a Hugging Face safetensors checkpoint: model.safetensors, or shards
// model-0000k-of-0000n.safetensors with model.safetensors.index.json when larger than the shard
// limit. Tensors are read, converted and written one at a time, so memory stays near one tensor.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "graft/io/tensor_source.h"

namespace graft::io {

struct CheckpointWriteOptions {
  std::optional<DType> dtype;  // convert floating-point tensors (F32/F16/BF16) to this dtype
  uint64_t max_shard_bytes = 5'000'000'000ull;
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  std::function<void(int64_t done, int64_t total)> progress;
};

struct CheckpointWriteResult {
  int64_t tensors = 0;
  int64_t shards = 0;
  uint64_t bytes = 0;  // tensor data bytes written
};

CheckpointWriteResult write_checkpoint(const TensorSource& source, const std::string& out_dir,
                                       const CheckpointWriteOptions& options = {});

}  // namespace graft::io
