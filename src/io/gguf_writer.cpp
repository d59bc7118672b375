#include "graft/io/gguf_writer.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

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
  switch (t.tensor.dtype) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::BF16: return 30;
    default: break;
  }
  fail_as(ErrorKind::kUnsupported, "GGUF writer: tensor '", t.name, "' has dtype ", dtype_name(t.tensor.dtype),
          "; only F32, F16 and BF16 are written");
}

}  // namespace

void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufWriteValue>>& metadata,
                const std::vector<GgufWriteTensor>& tensors) {
  Sink h;
  h.b.append("GGUF");
  h.put<uint32_t>(3);
  h.put<uint64_t>(tensors.size());
  h.put<uint64_t>(metadata.size());
  for (const auto& [key, value] : metadata) {
    h.str(key);
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
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    h.str(t.name);
    h.put<uint32_t>(static_cast<uint32_t>(t.tensor.shape.size()));
    for (auto it = t.tensor.shape.rbegin(); it != t.tensor.shape.rend(); ++it) h.put<uint64_t>(static_cast<uint64_t>(*it));
    h.put<uint32_t>(ggml_type_of(t));
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
    for (const auto& t : tensors) {
      const auto n = static_cast<uint64_t>(t.tensor.nbytes());
      out.write(static_cast<const char*>(t.tensor.data), static_cast<std::streamsize>(n));
      out.write(zeros, static_cast<std::streamsize>((kAlignment - n % kAlignment) % kAlignment));
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

}  // namespace graft::io
