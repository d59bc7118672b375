// A small GGUF v3 writer: string / float32 / uint32 metadata and dense tensors (F32, F16, BF16),
// 32-byte aligned as llama.cpp's gguf writer lays them out. Used to write llama.cpp LoRA adapters.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "graft/core/tensor.h"

namespace graft::io {

using GgufWriteValue = std::variant<std::string, float, uint32_t>;

struct GgufWriteTensor {
  std::string name;
  Tensor tensor;  // row-major, outermost first (written as GGUF ne[] reversed)
};

// Writes `path` atomically (a temporary file beside it, renamed into place; removed on failure).
// Metadata keys are written in the given order; tensors in the given order.
void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufWriteValue>>& metadata,
                const std::vector<GgufWriteTensor>& tensors);

}  // namespace graft::io
