#include "graft/io/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <type_traits>

#include "graft/core/error.h"

namespace graft::io {

namespace {

constexpr uint64_t kAlignment = 32;

struct Sink {
  std::string b;
  template <typename T>
  void put(T v) {
    char buf[sizeof(T)];
    std::memcpy(buf, &v, sizeof(T));
    b.append(buf, sizeof(T));
  }
  void str(const std::string& s) {
    put<uint64_t>(s.size());
    b.append(s);
  }
  void pad() { b.resize((b.size() + kAlignment - 1) / kAlignment * kAlignment, '\0'); }
};

uint32_t ggml_type_of(const GgufWriteTensor& t) {
  if (const std::optional<uint32_t> id = ggml_type_id(t.tensor.dtype)) return *id;
  fail_as(ErrorKind::kUnsupported, "GGUF writer: tensor '", t.name, "' has dtype ", dtype_name(t.tensor.dtype),
          ", which GGUF has no type id for");
}

// One scalar of the stored type `type`. The value's variant must be the one GgufFile reads that
// type into (unsigned -> uint64_t, signed -> int64_t, floats -> double); a mismatch is refused.
void put_scalar(Sink& h, const std::string& key, GgufType type,
                const std::variant<int64_t, uint64_t, double, bool, std::string>& v) {
  const auto want = [&](auto tag) {
    using T = decltype(tag);
    if (!std::holds_alternative<T>(v))
      fail_as(ErrorKind::kBadRequest, "GGUF writer: metadata '", key, "' is typed ", gguf_type_name(type),
              " but holds another kind of value");
    return std::get<T>(v);
  };
  switch (type) {
    case GgufType::UINT8: h.put(static_cast<uint8_t>(want(uint64_t{}))); return;
    case GgufType::INT8: h.put(static_cast<int8_t>(want(int64_t{}))); return;
    case GgufType::UINT16: h.put(static_cast<uint16_t>(want(uint64_t{}))); return;
    case GgufType::INT16: h.put(static_cast<int16_t>(want(int64_t{}))); return;
    case GgufType::UINT32: h.put(static_cast<uint32_t>(want(uint64_t{}))); return;
    case GgufType::INT32: h.put(static_cast<int32_t>(want(int64_t{}))); return;
    case GgufType::UINT64: h.put(want(uint64_t{})); return;
    case GgufType::INT64: h.put(want(int64_t{})); return;
    case GgufType::FLOAT32: h.put(static_cast<float>(want(double{}))); return;  // read from a float: exact
    case GgufType::FLOAT64: h.put(want(double{})); return;
    case GgufType::BOOL: h.put(static_cast<uint8_t>(want(bool{}))); return;
    case GgufType::STRING: h.str(want(std::string{})); return;
    case GgufType::ARRAY: break;
  }
  fail_as(ErrorKind::kBadRequest, "GGUF writer: metadata '", key, "': a nested array or unknown value type ",
          static_cast<uint32_t>(type));
}

void put_value(Sink& h, const std::string& key, const GgufValue& v) {
  // The writer lays tensors out at 32 bytes; a copied general.alignment must agree.
  if (key == "general.alignment" && (v.type != GgufType::UINT32 || !std::holds_alternative<uint64_t>(v.value) ||
                                     std::get<uint64_t>(v.value) != kAlignment))
    fail_as(ErrorKind::kBadRequest, "GGUF writer: general.alignment must be uint32 32 (the layout written)");
  h.put(static_cast<uint32_t>(v.type));
  if (v.type != GgufType::ARRAY) {
    std::visit([&](const auto& x) {
      if constexpr (std::is_same_v<std::decay_t<decltype(x)>, GgufValue::Array>)
        fail_as(ErrorKind::kBadRequest, "GGUF writer: metadata '", key, "' holds an array but is typed ",
                gguf_type_name(v.type));
      else
        put_scalar(h, key, v.type, x);
    }, v.value);
    return;
  }
  const auto& arr = std::get<GgufValue::Array>(v.value);
  h.put(static_cast<uint32_t>(v.elem_type));
  h.put<uint64_t>(arr.size());
  for (const auto& e : arr) put_scalar(h, key, v.elem_type, e);
}

void put_value(Sink& h, const std::string&, const GgufWriteValue& value) {
  if (const auto* s = std::get_if<std::string>(&value)) {
    h.put<uint32_t>(8);
    h.str(*s);
  } else if (const auto* f = std::get_if<float>(&value)) {
    h.put<uint32_t>(6);
    h.put(*f);
  } else {
    h.put<uint32_t>(4);
    h.put(std::get<uint32_t>(value));
  }
}

}  // namespace

namespace {

template <typename Value>
void write_file(const std::string& path, const std::vector<std::pair<std::string, Value>>& metadata,
                const std::vector<GgufWriteTensor>& tensors, const WriteProgress& progress) {
  Sink h;
  h.b.append("GGUF");
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors.size());
  h.put<uint64_t>(metadata.size());
  for (const auto& [key, value] : metadata) {
    h.str(key);
    put_value(h, key, value);
  }
  std::vector<uint32_t> types;  // checked before anything is written
  for (const auto& t : tensors) types.push_back(ggml_type_of(t));
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    h.str(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.tensor.shape.size()));
    for (auto it = t.tensor.shape.rbegin(); it != t.tensor.shape.rend(); ++it) h.put<uint64_t>(static_cast<uint64_t>(*it));
    h.put<uint32_t>(types[&t - tensors.data()]);
    h.put<uint64_t>(offset);
    offset += (static_cast<uint64_t>(t.tensor.nbytes()) + kAlignment - 1) / kAlignment * kAlignment;
  }
  h.pad();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail_as(ErrorKind::kIo, "'", tmp, "': cannot be created");
    out.write(h.b.data(), static_cast<std::streamsize>(h.b.size()));
    static const char zeros[kAlignment] = {};
    int64_t done = 0;
    for (const auto& t : tensors) {
      const auto n = static_cast<uint64_t>(t.tensor.nbytes());
      out.write(static_cast<const char*>(t.tensor.data), static_cast<std::streamsize>(n));
      out.write(zeros, static_cast<std::streamsize>((kAlignment - n % kAlignment) % kAlignment));
      if (progress) progress(done += static_cast<int64_t>(n), static_cast<int64_t>(offset));
    }
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      fail_as(ErrorKind::kIo, "'", tmp, "': write failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail_as(ErrorKind::kIo, "'", path, "': cannot rename the written file into place (", ec.message(), ")");
  }
}

}  // namespace

void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufWriteValue>>& metadata,
                const std::vector<GgufWriteTensor>& tensors, const WriteProgress& progress) {
  write_file(path, metadata, tensors, progress);
}

void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufWriteTensor>& tensors, const WriteProgress& progress) {
  write_file(path, metadata, tensors, progress);
}

}  // namespace graft::io
