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

// GGUF metadata value type ids, as stored in the file.
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
// "uint32", "string", "array", ... ("type 17" for an unknown id).
std::string gguf_type_name(GgufType t);
// GGML tensor type name for a GGML type id ("Q4_K", "F32", ...), or "" if the id is unknown.
std::string ggml_type_name(uint32_t ggml_type);
// The GGML type id graft writes for a dtype (F32 0, Q4_K 12, BF16 30, ...), or nullopt for one GGUF
// has no id for (U8, U32).
std::optional<uint32_t> ggml_type_id(DType t);

// One metadata value. Arrays hold scalars or strings (nested arrays are refused).
// Signed integers are held as int64_t, unsigned as uint64_t, floats as double.
struct GgufValue {
  using Array = std::vector<std::variant<int64_t, uint64_t, double, bool, std::string>>;
  std::variant<int64_t, uint64_t, double, bool, std::string, Array> value;
  GgufType type = GgufType::UINT8;       // the stored type
  GgufType elem_type = GgufType::UINT8;  // for arrays: the element type
};

struct GgufTensorInfo {
  std::string name;
  DType dtype;
  Shape shape;          // converted to row-major outermost-first (GGUF ne[] reversed)
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;  // bytes of data
  uint32_t ggml_type = 0;  // the GGML type id as stored
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
  uint64_t alignment() const;    // general.alignment, 32 by default
  uint64_t data_offset() const;  // absolute file offset of the data section
  uint64_t file_size() const;

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
  std::optional<std::vector<std::string>> optional_string_array(const std::string& key) const;
  std::optional<std::vector<double>> optional_float_array(const std::string& key) const;
  std::optional<std::vector<int64_t>> optional_int_array(const std::string& key) const;  // integer arrays

  // A view of one tensor's bytes (kept alive by the mapping), or throws naming the tensor.
  Tensor tensor(const std::string& name) const;
  const GgufTensorInfo* find(const std::string& name) const;

 private:
  GgufFile() = default;
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace graft::io
