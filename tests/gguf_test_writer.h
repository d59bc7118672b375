// A tiny GGUF writer for tests: builds files byte by byte, with knobs to break every part.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace graft::test {

// Little-endian byte sink.
struct Bytes {
  std::string b;
  template <typename T>
  Bytes& put(T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    b.append(buf, sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.append(s);
    return *this;
  }
  Bytes& raw(std::string_view s) {
    b.append(s);
    return *this;
  }
};

namespace gguf_ids {
// GGUF metadata value types and GGML tensor types.
constexpr uint32_t kU8 = 0, kI8 = 1, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9,
                   kU64 = 10, kI64 = 11, kF64 = 12;
constexpr uint32_t kGgmlF32 = 0, kGgmlF16 = 1, kGgmlQ4_0 = 2, kGgmlQ8_0 = 8, kGgmlQ4_K = 12, kGgmlIQ2_XXS = 16, kGgmlI32 = 26,
                   kGgmlF64 = 28, kGgmlBF16 = 30;
}  // namespace gguf_ids

using namespace gguf_ids;

// Builds a GGUF file from parts, with knobs to break each of them.
struct GgufBuilder {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors_override, n_kv_override;
  std::vector<std::string> kvs;  // encoded key/value entries
  struct TensorEntry {
    std::string name;
    std::vector<uint64_t> ne;  // GGUF order: ne[0] innermost
    uint32_t type;
    uint64_t offset;
  };
  std::vector<TensorEntry> tensors;
  uint64_t alignment = 32;
  std::string data;  // the data section

  GgufBuilder& kv(std::string_view key, uint32_t type, const Bytes& value) {
    Bytes e;
    e.str(key).u32(type).raw(value.b);
    kvs.push_back(e.b);
    return *this;
  }
  GgufBuilder& kv_u32(std::string_view key, uint32_t v) { return kv(key, kU32, Bytes().u32(v)); }
  GgufBuilder& kv_string(std::string_view key, std::string_view v) { return kv(key, kString, Bytes().str(v)); }
  GgufBuilder& kv_bool(std::string_view key, bool v) { return kv(key, kBool, Bytes().u8(v ? 1 : 0)); }
  GgufBuilder& kv_i32(std::string_view key, int32_t v) { return kv(key, kI32, Bytes().put(v)); }
  GgufBuilder& kv_strings(std::string_view key, const std::vector<std::string>& v) {
    Bytes b;
    b.u32(kString).u64(v.size());
    for (const auto& s : v) b.str(s);
    return kv(key, kArray, b);
  }
  GgufBuilder& kv_i32s(std::string_view key, const std::vector<int32_t>& v) {
    Bytes b;
    b.u32(kI32).u64(v.size());
    for (int32_t x : v) b.put(x);
    return kv(key, kArray, b);
  }
  GgufBuilder& kv_f32s(std::string_view key, const std::vector<float>& v) {
    Bytes b;
    b.u32(kF32).u64(v.size());
    for (float x : v) b.put(x);
    return kv(key, kArray, b);
  }

  // Places `bytes` at the next aligned offset of the data section.
  GgufBuilder& tensor(std::string name, std::vector<uint64_t> ne, uint32_t type, std::string_view bytes) {
    uint64_t off = (data.size() + alignment - 1) / alignment * alignment;
    data.resize(off, '\0');
    data.append(bytes);
    tensors.push_back({std::move(name), std::move(ne), type, off});
    return *this;
  }
  GgufBuilder& f32_tensor(std::string name, std::vector<uint64_t> ne) {
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    std::string bytes(n * 4, '\0');
    for (uint64_t i = 0; i < n; ++i) {
      float f = static_cast<float>(i);
      std::memcpy(bytes.data() + i * 4, &f, 4);
    }
    return tensor(std::move(name), std::move(ne), kGgmlF32, bytes);
  }

  std::string build() const {
    Bytes out;
    out.raw(magic).u32(version);
    out.u64(n_tensors_override.value_or(tensors.size()));
    out.u64(n_kv_override.value_or(kvs.size()));
    for (const auto& e : kvs) out.raw(e);
    for (const auto& t : tensors) {
      out.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
      for (uint64_t d : t.ne) out.u64(d);
      out.u32(t.type).u64(t.offset);
    }
    out.b.resize((out.b.size() + alignment - 1) / alignment * alignment, '\0');
    out.raw(data);
    return out.b;
  }
};

}  // namespace graft::test
