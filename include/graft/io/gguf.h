// GGUF v2/v3 reader: header, typed metadata, tensor directory, tensor bytes through mmap.
// Only reading and validation live here; mapping GGUF names to Hugging Face names is model/'s job.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "graft/core/mapped_file.h"
#include "graft/core/tensor.h"

namespace graft::io {

// One metadata value. Arrays hold scalars or strings (nested arrays are refused).
struct GgufValue {
  using Array = std::vector<std::variant<int64_t, uint64_t, double, bool, std::string>>;
  std::variant<int64_t, uint64_t, double, bool, std::string, Array> value;
};

struct GgufTensorInfo {
  std::string name;
  DType dtype;
  Shape shape;          // converted to row-major outermost-first (GGUF ne[] reversed)
  uint64_t offset = 0;  // relative to the data section
};

class GgufFile {
 public:
  // Parses and validates everything (magic, version 2/3, counts, string lengths, tensor types,
  // offsets inside the file, alignment). Errors name the file and the field or tensor.
  static std::shared_ptr<GgufFile> open(const std::string& path);

  const std::string& path() const;
  uint32_t version() const;
  const std::map<std::string, GgufValue>& metadata() const;
  const std::vector<GgufTensorInfo>& tensors() const;

  bool has(const std::string& key) const;
  // Typed getters: require_* throws naming the file and key (missing or wrong type);
  // optional_* returns nullopt when absent and throws on a wrong type.
  std::string require_string(const std::string& key) const;
  std::optional<std::string> optional_string(const std::string& key) const;
  int64_t require_int(const std::string& key) const;  // any integer type
  std::optional<int64_t> optional_int(const std::string& key) const;
  std::optional<double> optional_float(const std::string& key) const;  // float or integer types
  std::optional<bool> optional_bool(const std::string& key) const;
  std::vector<std::string> require_string_array(const std::string& key) const;
  std::optional<std::vector<double>> optional_float_array(const std::string& key) const;
  std::optional<std::vector<int64_t>> optional_int_array(const std::string& key) const;

  // A view of one tensor's bytes (kept alive by the mapping), or throws naming the tensor.
  Tensor tensor(const std::string& name) const;
  const GgufTensorInfo* find(const std::string& name) const;

 private:
  GgufFile() = default;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace graft::io
