// A small GGUF v3 writer: metadata and tensors of every dtype GGUF has an id for (dense and the
// block formats, whose bytes are written as they are), 32-byte aligned as llama.cpp's gguf writer
// lays them out. Used to write llama.cpp LoRA adapters (string / float32 / uint32 metadata) and to
// rewrite a model file with other tensor types (metadata copied as GgufFile read it).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "graft/core/tensor.h"
#include "graft/io/gguf.h"

namespace graft::io {

using GgufWriteValue = std::variant<std::string, float, uint32_t>;

struct GgufWriteTensor {
  std::string name;
  Tensor tensor;  // row-major, outermost first (written as GGUF ne[] reversed)
};

// Bytes of tensor data written so far and in all, after each tensor (a progress bar's input).
using WriteProgress = std::function<void(int64_t done, int64_t total)>;

// Writes `path` atomically (a temporary file beside it, renamed into place; removed on failure).
// Metadata keys are written in the given order; tensors in the given order.
void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufWriteValue>>& metadata,
                const std::vector<GgufWriteTensor>& tensors, const WriteProgress& progress = {});
// The same with metadata of any GGUF value type (GgufFile::metadata()'s values: each is written with
// its stored type, arrays with their element type).
void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufWriteTensor>& tensors, const WriteProgress& progress = {});

}  // namespace graft::io
