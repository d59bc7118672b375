#include "graft/io/safetensors.h"

#include "graft/io/json_file.h"

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "graft/core/error.h"

namespace graft::io {

using nlohmann::json;

namespace {
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the reference implementation's limit

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {{"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
                                 {"I8", DType::I8},   {"I16", DType::I16}, {"I32", DType::I32},
                                 {"I64", DType::I64}, {"U8", DType::U8},   {"U32", DType::U32}};
}  // namespace

DType parse_safetensors_dtype(const std::string& s, const std::string& context) {
  for (const auto& d : kDTypes)
    if (s == d.name) return d.dtype;
  std::string supported;
  for (const auto& d : kDTypes) supported += std::string(supported.empty() ? "" : ", ") + d.name;
  fail_as(ErrorKind::kUnsupported, context, ": unknown or unsupported dtype '", s, "' (supported: ", supported, ")");
}

const char* safetensors_dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  fail("dtype ", dtype_name(t), " cannot be stored in safetensors");
}

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  auto st = std::shared_ptr<SafetensorsFile>(new SafetensorsFile());
  st->file_ = std::make_shared<MappedFile>(path);
  const uint8_t* base = st->file_->data();
  const uint64_t size = st->file_->size();
  if (size < 8) fail("safetensors '", path, "': file is ", size, " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | base[i];
  if (n > size - 8)
    fail("safetensors '", path, "': header length ", n, " exceeds the file (", size - 8, " bytes after the length field)");
  if (n > kMaxHeaderBytes) fail("safetensors '", path, "': header length ", n, " exceeds the 100 MiB limit");
  json header;
  check_json_nesting(std::string_view(reinterpret_cast<const char*>(base + 8), n), path);
  try {
    header = json::parse(base + 8, base + 8 + n);
  } catch (const json::exception& e) {
    fail("safetensors '", path, "': header is not valid JSON (", e.what(), ")");
  }
  if (!header.is_object()) fail("safetensors '", path, "': header is not a JSON object");
  st->data_begin_ = base + 8 + n;
  const uint64_t data_size = size - 8 - n;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const std::string ctx = "safetensors '" + path + "' tensor '" + name + "'";
    if (name == "__metadata__") {
      if (it->is_null()) continue;  // mlx writes null; the reference reader accepts it
      if (!it->is_object()) fail("safetensors '", path, "': __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) fail("safetensors '", path, "': __metadata__ value '", m.key(), "' is not a string");
        st->metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    const json& e = *it;
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      fail(ctx, ": expected an object with dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) fail(ctx, ": dtype is not a string");
    SafetensorsEntry entry;
    entry.name = name;
    entry.dtype = parse_safetensors_dtype(e["dtype"].get<std::string>(), ctx);
    if (!e["shape"].is_array()) fail(ctx, ": shape is not an array");
    uint64_t numel = 1;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned()) fail(ctx, ": shape ", json_excerpt(e["shape"]), " has a non-integer or negative dimension");
      uint64_t v = d.get<uint64_t>();
      if (v != 0 && numel > std::numeric_limits<uint64_t>::max() / 8 / v) fail(ctx, ": shape overflows");
      numel *= v;
      entry.shape.push_back(static_cast<int64_t>(v));
    }
    const json& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail(ctx, ": data_offsets must be two non-negative integers");
    entry.begin = off[0].get<uint64_t>();
    entry.end = off[1].get<uint64_t>();
    if (entry.end < entry.begin || entry.end > data_size)
      fail(ctx, ": data_offsets [", entry.begin, ", ", entry.end, "] out of range (data section is ", data_size, " bytes)");
    const uint64_t expect = numel * static_cast<uint64_t>(dtype_block_bytes(entry.dtype));
    if (entry.end - entry.begin != expect)
      fail(ctx, ": ", entry.end - entry.begin, " bytes for ", dtype_name(entry.dtype), " ", shape_str(entry.shape),
           ", expected ", expect);
    st->index_[name] = st->entries_.size();
    st->entries_.push_back(std::move(entry));
  }

  // Overlapping byte ranges mean two tensors alias each other: a corrupted or hostile file.
  std::vector<const SafetensorsEntry*> by_offset;
  for (const auto& e : st->entries_) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end)
      fail("safetensors '", path, "': tensors '", by_offset[i - 1]->name, "' and '", by_offset[i]->name,
           "' have overlapping data_offsets");
  }
  return st;
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (!e) fail("safetensors '", path(), "': no tensor named '", name, "'");
  Tensor t;
  t.dtype = e->dtype;
  t.shape = e->shape;
  t.data = data_begin_ + e->begin;
  t.owner = std::shared_ptr<const void>(file_, file_->data());
  // Some writers (mlx) do not align tensors: a BF16 tensor of odd length shifts everything after
  // it. Hand out an aligned copy then, so every consumer may read elements in place.
  const size_t align = static_cast<size_t>(dtype_bytes(e->dtype, 1));
  if (align > 1 && reinterpret_cast<uintptr_t>(t.data) % align != 0) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    return Tensor::owned(t.dtype, t.shape, std::vector<uint8_t>(p, p + (e->end - e->begin)));
  }
  return t;
}

void SafetensorsFile::release(const std::string& name) const {
  if (const SafetensorsEntry* e = find(name)) file_->release(data_begin_ + e->begin, e->end - e->begin);
}

namespace {
std::string build_header(const std::vector<SafetensorsWriter::Declared>& tensors,
                         const std::map<std::string, std::string>& metadata, const std::string& path) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    if (header.contains(t.name)) fail("safetensors writer '", path, "': duplicate tensor name '", t.name, "'");
    const uint64_t nb = static_cast<uint64_t>(dtype_bytes(t.dtype, shape_numel(t.shape)));
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + nb}}};
    offset += nb;
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');  // align the data section to 8 bytes, as the reference writer does
  return h;
}
}  // namespace

struct SafetensorsWriter::Impl {
  std::string path, tmp;
  std::vector<Declared> tensors;
  size_t next = 0;
  std::ofstream out;
  bool finished = false;
};

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<Declared> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->tmp = impl_->path + ".tmp";
  impl_->tensors = std::move(tensors);
  const std::string h = build_header(impl_->tensors, metadata, impl_->path);
  impl_->out.open(impl_->tmp, std::ios::binary | std::ios::trunc);
  if (!impl_->out) fail_as(ErrorKind::kIo, "cannot write '", impl_->tmp, "': ", std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  impl_->out.write(reinterpret_cast<const char*>(len), 8);
  impl_->out.write(h.data(), static_cast<std::streamsize>(h.size()));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!impl_->finished) {
    impl_->out.close();
    std::error_code ec;
    std::filesystem::remove(impl_->tmp, ec);
  }
}

uint64_t SafetensorsWriter::header_bytes(const std::vector<Declared>& tensors, const std::map<std::string, std::string>& metadata) {
  return 8 + build_header(tensors, metadata, "").size();
}

void SafetensorsWriter::write(const Tensor& t) {
  if (impl_->next >= impl_->tensors.size()) fail("safetensors writer '", impl_->path, "': more tensors than declared");
  const Declared& d = impl_->tensors[impl_->next];
  if (t.dtype != d.dtype || t.shape != d.shape)
    fail("safetensors writer '", impl_->path, "': tensor '", d.name, "' is ", dtype_name(t.dtype), " ", shape_str(t.shape),
         ", declared ", dtype_name(d.dtype), " ", shape_str(d.shape));
  impl_->out.write(static_cast<const char*>(t.data), t.nbytes());
  if (!impl_->out)
    fail_as(ErrorKind::kIo, "write to '", impl_->tmp, "' failed: ", std::strerror(errno), " (disk full or file size limit?)");
  ++impl_->next;
}

void SafetensorsWriter::finish() {
  if (impl_->next != impl_->tensors.size())
    fail("safetensors writer '", impl_->path, "': ", impl_->next, " of ", impl_->tensors.size(), " tensors written");
  impl_->out.close();
  if (!impl_->out)
    fail_as(ErrorKind::kIo, "closing '", impl_->tmp, "' failed: ", std::strerror(errno), " (disk full or file size limit?)");
  std::filesystem::rename(impl_->tmp, impl_->path);
  impl_->finished = true;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Declared> declared;
  for (const auto& [name, t] : tensors) declared.push_back({name, t.dtype, t.shape});
  SafetensorsWriter w(path, declared, metadata);
  for (const auto& [name, t] : tensors) w.write(t);
  w.finish();
}

}  // namespace graft::io
