// GGUF v2/v3 reader. The whole header (metadata and tensor directory) is parsed and validated up
// front, so that every later access (metadata getters, tensor views) works on checked data.
//
// Layout (little-endian): "GGUF" u32 version u64 n_tensors u64 n_kv, then n_kv x (string key,
// u32 type, value), then n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type,
// u64 offset), then padding to general.alignment, then the data section. Strings are u64 length +
// bytes (no terminator). Arrays are u32 element type + u64 count + elements.
#include "graft/io/gguf.h"

#include <algorithm>
#include <cstdio>
#include <bit>
#include <cstring>
#include <limits>
#include <sstream>
#include <unordered_map>

#include "graft/core/error.h"

namespace graft::io {

namespace {

static_assert(std::endian::native == std::endian::little, "graft's GGUF reader assumes a little-endian host");

constexpr uint64_t kHeaderBytes = 4 + 4 + 8 + 8;
// Smallest possible encodings, used to reject absurd counts before allocating anything.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;          // empty key, type, one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // empty name, n_dims=0, type, offset
constexpr uint32_t kMaxDims = 4;
constexpr uint64_t kDefaultAlignment = 32;

// GGML type ids -> names (ggml.h, enum ggml_type). Empty entries were removed from ggml.
constexpr const char* kGgmlTypeNames[] = {
    "F32",     "F16",     "Q4_0",    "Q4_1",     "Q4_2",    "Q4_3",     "Q5_0",     "Q5_1",
    "Q8_0",    "Q8_1",    "Q2_K",    "Q3_K",     "Q4_K",    "Q5_K",     "Q6_K",     "Q8_K",
    "IQ2_XXS", "IQ2_XS",  "IQ3_XXS", "IQ1_S",    "IQ4_NL",  "IQ3_S",    "IQ2_S",    "IQ4_XS",
    "I8",      "I16",     "I32",     "I64",      "F64",     "IQ1_M",    "BF16",     "Q4_0_4_4",
    "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",  "TQ2_0",    "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4",
};
constexpr const char* kSupportedTypes =
    "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, I8, I16, I32, I64";

std::optional<DType> dtype_from_ggml(uint32_t t) {
  switch (t) {
    case 0: return DType::F32;
    case 1: return DType::F16;
    case 2: return DType::Q4_0;
    case 3: return DType::Q4_1;
    case 6: return DType::Q5_0;
    case 7: return DType::Q5_1;
    case 8: return DType::Q8_0;
    case 10: return DType::Q2_K;
    case 11: return DType::Q3_K;
    case 12: return DType::Q4_K;
    case 13: return DType::Q5_K;
    case 14: return DType::Q6_K;
    case 20: return DType::IQ4_NL;
    case 23: return DType::IQ4_XS;
    case 24: return DType::I8;
    case 25: return DType::I16;
    case 26: return DType::I32;
    case 27: return DType::I64;
    case 30: return DType::BF16;
    default: return std::nullopt;
  }
}

// Alignment the element type needs in memory (the mapping is page-aligned, so a file offset that
// is a multiple of this gives an aligned pointer). Block formats start with an f16 scale.
uint64_t natural_alignment(DType t) {
  switch (t) {
    case DType::I64: return 8;
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::I8: case DType::U8: return 1;
    default: return 2;
  }
}

bool is_known_gguf_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

uint64_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
    case GgufType::UINT16: case GgufType::INT16: return 2;
    case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
    case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: return 8;
    case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 4 + 8;
  }
  return 1;
}

// A bounds-checked little-endian cursor over the mapped file. `ctx` names what is being read
// (a key, a tensor), so that a truncation error says where it happened.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* data, uint64_t size) : path_(path), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  void set_context(std::string ctx) { ctx_ = std::move(ctx); }
  const std::string& context() const { return ctx_; }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    uint64_t at = pos_;
    uint64_t len = read<uint64_t>(what);
    if (len > remaining())
      fail("GGUF '", path_, "': ", what, " of ", ctx_, " at offset ", at, " has length ", len,
           ", but only ", remaining(), " bytes remain in the file (", size_, " bytes)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  void need(uint64_t n, const char* what) {
    if (n > remaining())
      fail("GGUF '", path_, "': file truncated: reading ", what, " of ", ctx_, " at offset ", pos_, " needs ", n,
           " bytes, but only ", remaining(), " remain (file is ", size_, " bytes)");
  }

  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string ctx_ = "the header";
};

using Scalar = std::variant<int64_t, uint64_t, double, bool, std::string>;

Scalar read_scalar(Cursor& c, GgufType t, const std::string& path) {
  switch (t) {
    case GgufType::UINT8: return static_cast<uint64_t>(c.read<uint8_t>("a uint8 value"));
    case GgufType::INT8: return static_cast<int64_t>(c.read<int8_t>("an int8 value"));
    case GgufType::UINT16: return static_cast<uint64_t>(c.read<uint16_t>("a uint16 value"));
    case GgufType::INT16: return static_cast<int64_t>(c.read<int16_t>("an int16 value"));
    case GgufType::UINT32: return static_cast<uint64_t>(c.read<uint32_t>("a uint32 value"));
    case GgufType::INT32: return static_cast<int64_t>(c.read<int32_t>("an int32 value"));
    case GgufType::UINT64: return c.read<uint64_t>("a uint64 value");
    case GgufType::INT64: return c.read<int64_t>("an int64 value");
    case GgufType::FLOAT32: return static_cast<double>(c.read<float>("a float32 value"));
    case GgufType::FLOAT64: return c.read<double>("a float64 value");
    case GgufType::BOOL: {
      uint64_t at = c.pos();
      uint8_t b = c.read<uint8_t>("a bool value");
      if (b > 1) fail("GGUF '", path, "': ", c.context(), ": bool at offset ", at, " is ", int(b), ", expected 0 or 1");
      return b == 1;
    }
    case GgufType::STRING: return c.read_string("a string value");
    case GgufType::ARRAY: break;
  }
  fail("GGUF '", path, "': ", c.context(), ": internal error reading type ", static_cast<uint32_t>(t));
}

GgufValue read_value(Cursor& c, uint32_t type_id, const std::string& key, const std::string& path) {
  if (!is_known_gguf_type(type_id))
    fail("GGUF '", path, "': key '", key, "' has unknown value type ", type_id,
         " (expected 0..12: uint8, int8, uint16, int16, uint32, int32, float32, bool, string, array, uint64, int64, "
         "float64)");
  GgufValue v;
  v.type = static_cast<GgufType>(type_id);
  if (v.type != GgufType::ARRAY) {
    std::visit([&](auto&& x) { v.value = std::move(x); }, read_scalar(c, v.type, path));
    return v;
  }
  uint32_t elem = c.read<uint32_t>("the array element type");
  if (elem == static_cast<uint32_t>(GgufType::ARRAY))
    fail("GGUF '", path, "': key '", key, "' is an array of arrays; nested arrays are not supported");
  if (!is_known_gguf_type(elem))
    fail("GGUF '", path, "': key '", key, "' is an array of unknown value type ", elem, " (expected 0..12)");
  v.elem_type = static_cast<GgufType>(elem);
  uint64_t at = c.pos();
  uint64_t count = c.read<uint64_t>("the array length");
  uint64_t min_each = min_value_bytes(v.elem_type);
  if (count > c.remaining() / min_each)
    fail("GGUF '", path, "': key '", key, "' at offset ", at, " claims ", count, " elements of type ",
         gguf_type_name(v.elem_type), ", but only ", c.remaining(), " bytes remain in the file");
  GgufValue::Array arr;
  arr.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) arr.push_back(read_scalar(c, v.elem_type, path));
  v.value = std::move(arr);
  return v;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace

std::string gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "uint8";
    case GgufType::INT8: return "int8";
    case GgufType::UINT16: return "uint16";
    case GgufType::INT16: return "int16";
    case GgufType::UINT32: return "uint32";
    case GgufType::INT32: return "int32";
    case GgufType::FLOAT32: return "float32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::UINT64: return "uint64";
    case GgufType::INT64: return "int64";
    case GgufType::FLOAT64: return "float64";
  }
  return "type " + std::to_string(static_cast<uint32_t>(t));
}

std::string ggml_type_name(uint32_t t) {
  constexpr size_t n = sizeof(kGgmlTypeNames) / sizeof(kGgmlTypeNames[0]);
  return t < n ? kGgmlTypeNames[t] : "";
}

std::optional<uint32_t> ggml_type_id(DType t) {
  constexpr uint32_t n = sizeof(kGgmlTypeNames) / sizeof(kGgmlTypeNames[0]);
  for (uint32_t id = 0; id < n; ++id)
    if (dtype_from_ggml(id) == t) return id;
  return std::nullopt;
}

namespace {

struct GgufData {
  std::shared_ptr<MappedFile> file;
  uint32_t version = 0;
  uint64_t alignment = kDefaultAlignment;
  uint64_t data_offset = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensorInfo> tensors;
  std::unordered_map<std::string, size_t> index;

  const std::string& path() const { return file->path(); }
  [[noreturn]] void key_error(const std::string& key, const std::string& msg) const {
    fail("GGUF '", path(), "': key '", key, "' ", msg);
  }
  std::string describe(const GgufValue& v) const {
    if (v.type == GgufType::ARRAY) return "an array of " + gguf_type_name(v.elem_type);
    return "type " + gguf_type_name(v.type);
  }
};

void parse(GgufData& im) {
  const std::string& path = im.path();
  const uint8_t* data = im.file->data();
  const uint64_t size = im.file->size();
  Cursor c(path, data, size);

  if (size < 4 || std::memcmp(data, "GGUF", 4) != 0) {
    std::string got;
    for (uint64_t i = 0; i < std::min<uint64_t>(size, 4); ++i) {
      char ch = static_cast<char>(data[i]);
      if (ch >= 0x20 && ch < 0x7f) {
        got += ch;
      } else {
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", data[i]);
        got += hex;
      }
    }
    fail("GGUF '", path, "': not a GGUF file (expected magic \"GGUF\" at offset 0, found \"", got, "\"",
         size < 4 ? ", file too short" : "", ")");
  }
  c.read<uint32_t>("the magic");
  im.version = c.read<uint32_t>("the version");
  if (im.version == 1)
    fail("GGUF '", path, "': GGUF version 1 is not supported (expected version 2 or 3; re-convert the model)");
  if (im.version != 2 && im.version != 3)
    fail("GGUF '", path, "': unsupported GGUF version ", im.version, " (expected 2 or 3)");
  uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  uint64_t n_kv = c.read<uint64_t>("the metadata key/value count");
  uint64_t body = size - kHeaderBytes;
  if (n_tensors > body / kMinTensorInfoBytes || n_kv > body / kMinKvBytes ||
      n_tensors * kMinTensorInfoBytes + n_kv * kMinKvBytes > body)
    fail("GGUF '", path, "': header claims ", n_tensors, " tensors and ", n_kv,
         " metadata keys, which cannot fit in a file of ", size, " bytes");

  // Metadata.
  for (uint64_t i = 0; i < n_kv; ++i) {
    c.set_context("metadata entry #" + std::to_string(i));
    std::string key = c.read_string("the key");
    c.set_context("key '" + key + "'");
    uint32_t type = c.read<uint32_t>("the value type");
    GgufValue v = read_value(c, type, key, path);
    if (!im.metadata.emplace(key, std::move(v)).second)
      fail("GGUF '", path, "': metadata key '", key, "' appears more than once");
  }

  if (auto it = im.metadata.find("general.alignment"); it != im.metadata.end()) {
    const GgufValue& v = it->second;
    uint64_t a = 0;
    if (const auto* u = std::get_if<uint64_t>(&v.value)) a = *u;
    else if (const auto* s = std::get_if<int64_t>(&v.value); s && *s > 0) a = static_cast<uint64_t>(*s);
    else if (!std::holds_alternative<int64_t>(v.value))
      im.key_error("general.alignment", "has " + im.describe(v) + ", expected an unsigned integer (uint32)");
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30))
      fail("GGUF '", path, "': key 'general.alignment' must be a power of two between 1 and 2^30, got ",
           std::holds_alternative<int64_t>(v.value) ? std::to_string(std::get<int64_t>(v.value)) : std::to_string(a));
    im.alignment = a;
  }

  // Tensor directory.
  im.tensors.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.set_context("tensor info #" + std::to_string(i));
    GgufTensorInfo t;
    t.name = c.read_string("the tensor name");
    if (t.name.empty()) fail("GGUF '", path, "': tensor info #", i, " has an empty name");
    c.set_context("tensor '" + t.name + "'");
    uint32_t n_dims = c.read<uint32_t>("the dimension count");
    if (n_dims > kMaxDims)
      fail("GGUF '", path, "': tensor '", t.name, "' has ", n_dims, " dimensions (at most ", kMaxDims, " supported)");
    std::vector<uint64_t> ne(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) ne[d] = c.read<uint64_t>("a dimension");
    t.ggml_type = c.read<uint32_t>("the tensor type");
    t.offset = c.read<uint64_t>("the data offset");

    std::optional<DType> dt = dtype_from_ggml(t.ggml_type);
    if (!dt) {
      std::string name = ggml_type_name(t.ggml_type);
      if (name.empty())
        fail("GGUF '", path, "': tensor '", t.name, "' has unknown GGML type id ", t.ggml_type,
             " (supported: ", kSupportedTypes, ")");
      fail("GGUF '", path, "': tensor '", t.name, "' has type ", name, ", which graft does not support (supported: ",
           kSupportedTypes, ")");
    }
    t.dtype = *dt;

    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (ne[d] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) || !checked_mul(numel, ne[d], &numel) ||
          numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail("GGUF '", path, "': tensor '", t.name, "' has an impossibly large shape (element count overflows)");
    }
    const uint64_t block = static_cast<uint64_t>(dtype_block_elems(t.dtype));
    if (block > 1 && n_dims > 0 && ne[0] % block != 0)
      fail("GGUF '", path, "': tensor '", t.name, "' of type ", dtype_name(t.dtype), " has innermost dimension ", ne[0],
           ", which is not a multiple of the block size ", block);
    if (block > 1 && n_dims == 0)
      fail("GGUF '", path, "': tensor '", t.name, "' of type ", dtype_name(t.dtype),
           " is a scalar, but block-quantized tensors need an innermost dimension that is a multiple of ", block);
    if (!checked_mul(numel / block, static_cast<uint64_t>(dtype_block_bytes(t.dtype)), &t.nbytes))
      fail("GGUF '", path, "': tensor '", t.name, "' has an impossibly large byte size");
    for (uint32_t d = n_dims; d-- > 0;) t.shape.push_back(static_cast<int64_t>(ne[d]));

    if (!im.index.emplace(t.name, im.tensors.size()).second)
      fail("GGUF '", path, "': tensor name '", t.name, "' appears more than once");
    im.tensors.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment after the directory.
  uint64_t end_of_info = c.pos();
  im.data_offset = (end_of_info + im.alignment - 1) / im.alignment * im.alignment;
  if (im.tensors.empty()) return;
  if (im.data_offset > size)
    fail("GGUF '", path, "': file truncated: the data section should start at offset ", im.data_offset,
         " (after the tensor directory, aligned to ", im.alignment, "), but the file is ", size, " bytes");
  const uint64_t data_size = size - im.data_offset;
  for (const GgufTensorInfo& t : im.tensors) {
    if (t.offset % im.alignment != 0)
      fail("GGUF '", path, "': tensor '", t.name, "' data offset ", t.offset,
           " is not a multiple of the alignment ", im.alignment);
    if ((im.data_offset + t.offset) % natural_alignment(t.dtype) != 0)
      fail("GGUF '", path, "': tensor '", t.name, "' of type ", dtype_name(t.dtype), " starts at file offset ",
           im.data_offset + t.offset, ", which is not aligned to ", natural_alignment(t.dtype), " bytes");
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail("GGUF '", path, "': tensor '", t.name, "' data [", t.offset, ", ", t.offset + t.nbytes,
           ") (", dtype_name(t.dtype), " ", shape_str(t.shape), ", ", t.nbytes, " bytes) lies outside the data section of ",
           data_size, " bytes (data starts at file offset ", im.data_offset, "; file truncated?)");
  }
  std::vector<const GgufTensorInfo*> order;
  order.reserve(im.tensors.size());
  for (const GgufTensorInfo& t : im.tensors)
    if (t.nbytes > 0) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensorInfo* a = order[i - 1];
    const GgufTensorInfo* b = order[i];
    if (a->offset + a->nbytes > b->offset)
      fail("GGUF '", path, "': tensors '", a->name, "' [", a->offset, ", ", a->offset + a->nbytes, ") and '", b->name,
           "' [", b->offset, ", ", b->offset + b->nbytes, ") overlap in the data section");
  }
}

}  // namespace

struct GgufFile::Impl : GgufData {};

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto im = std::make_shared<Impl>();
  im->file = std::make_shared<MappedFile>(path);
  parse(*im);
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->impl_ = std::move(im);
  return f;
}

const std::string& GgufFile::path() const { return impl_->path(); }
uint32_t GgufFile::version() const { return impl_->version; }
const std::map<std::string, GgufValue>& GgufFile::metadata() const { return impl_->metadata; }
const std::vector<GgufTensorInfo>& GgufFile::tensors() const { return impl_->tensors; }
uint64_t GgufFile::alignment() const { return impl_->alignment; }
uint64_t GgufFile::data_offset() const { return impl_->data_offset; }
uint64_t GgufFile::file_size() const { return impl_->file->size(); }

bool GgufFile::has(const std::string& key) const { return impl_->metadata.count(key) != 0; }

namespace {

const GgufValue* lookup(const GgufData& im, const std::string& key) {
  auto it = im.metadata.find(key);
  return it == im.metadata.end() ? nullptr : &it->second;
}

std::optional<int64_t> to_int(const Scalar& s) {
  if (const auto* i = std::get_if<int64_t>(&s)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&s)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  return std::nullopt;
}

bool is_int_type(GgufType t) {
  switch (t) {
    case GgufType::UINT8: case GgufType::INT8: case GgufType::UINT16: case GgufType::INT16:
    case GgufType::UINT32: case GgufType::INT32: case GgufType::UINT64: case GgufType::INT64: return true;
    default: return false;
  }
}
bool is_float_type(GgufType t) { return t == GgufType::FLOAT32 || t == GgufType::FLOAT64; }

Scalar as_scalar(const GgufValue& v) {
  return std::visit(
      [](const auto& x) -> Scalar {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, GgufValue::Array>) return int64_t{0};
        else return x;
      },
      v.value);
}

}  // namespace

std::optional<std::string> GgufFile::optional_string(const std::string& key) const {
  const GgufValue* v = lookup(*impl_, key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::STRING) impl_->key_error(key, "has " + impl_->describe(*v) + ", expected a string");
  return std::get<std::string>(v->value);
}

std::string GgufFile::require_string(const std::string& key) const {
  auto s = optional_string(key);
  if (!s) impl_->key_error(key, "is missing (expected a string)");
  return *s;
}

std::optional<int64_t> GgufFile::optional_int(const std::string& key) const {
  const GgufValue* v = lookup(*impl_, key);
  if (!v) return std::nullopt;
  if (!is_int_type(v->type)) impl_->key_error(key, "has " + impl_->describe(*v) + ", expected an integer");
  auto i = to_int(as_scalar(*v));
  if (!i) impl_->key_error(key, "has value " + std::to_string(std::get<uint64_t>(v->value)) + ", which does not fit in int64");
  return i;
}

int64_t GgufFile::require_int(const std::string& key) const {
  auto i = optional_int(key);
  if (!i) impl_->key_error(key, "is missing (expected an integer)");
  return *i;
}

std::optional<double> GgufFile::optional_float(const std::string& key) const {
  const GgufValue* v = lookup(*impl_, key);
  if (!v) return std::nullopt;
  if (is_float_type(v->type)) return std::get<double>(v->value);
  if (const auto* i = std::get_if<int64_t>(&v->value)) return static_cast<double>(*i);
  if (const auto* u = std::get_if<uint64_t>(&v->value)) return static_cast<double>(*u);
  impl_->key_error(key, "has " + impl_->describe(*v) + ", expected a number");
}

std::optional<bool> GgufFile::optional_bool(const std::string& key) const {
  const GgufValue* v = lookup(*impl_, key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::BOOL) impl_->key_error(key, "has " + impl_->describe(*v) + ", expected a bool");
  return std::get<bool>(v->value);
}

std::optional<std::vector<std::string>> GgufFile::optional_string_array(const std::string& key) const {
  const GgufValue* v = lookup(*impl_, key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY || v->elem_type != GgufType::STRING)
    impl_->key_error(key, "has " + impl_->describe(*v) + ", expected an array of strings");
  const auto& arr = std::get<GgufValue::Array>(v->value);
  std::vector<std::string> out;
  out.reserve(arr.size());
  for (const auto& e : arr) out.push_back(std::get<std::string>(e));
  return out;
}

std::vector<std::string> GgufFile::require_string_array(const std::string& key) const {
  auto a = optional_string_array(key);
  if (!a) impl_->key_error(key, "is missing (expected an array of strings)");
  return std::move(*a);
}

std::optional<std::vector<double>> GgufFile::optional_float_array(const std::string& key) const {
  const GgufValue* v = lookup(*impl_, key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY || !(is_float_type(v->elem_type) || is_int_type(v->elem_type)))
    impl_->key_error(key, "has " + impl_->describe(*v) + ", expected an array of numbers");
  const auto& arr = std::get<GgufValue::Array>(v->value);
  std::vector<double> out;
  out.reserve(arr.size());
  for (const auto& e : arr) {
    if (const auto* d = std::get_if<double>(&e)) out.push_back(*d);
    else if (const auto* i = std::get_if<int64_t>(&e)) out.push_back(static_cast<double>(*i));
    else out.push_back(static_cast<double>(std::get<uint64_t>(e)));
  }
  return out;
}

std::optional<std::vector<int64_t>> GgufFile::optional_int_array(const std::string& key) const {
  const GgufValue* v = lookup(*impl_, key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY || !is_int_type(v->elem_type))
    impl_->key_error(key, "has " + impl_->describe(*v) + ", expected an array of integers");
  const auto& arr = std::get<GgufValue::Array>(v->value);
  std::vector<int64_t> out;
  out.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    auto x = to_int(arr[i]);
    if (!x) impl_->key_error(key, "element " + std::to_string(i) + " does not fit in int64");
    out.push_back(*x);
  }
  return out;
}

const GgufTensorInfo* GgufFile::find(const std::string& name) const {
  auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->tensors[it->second];
}

Tensor GgufFile::tensor(const std::string& name) const {
  const GgufTensorInfo* info = find(name);
  if (!info) fail("GGUF '", path(), "': no tensor named '", name, "' (the file has ", impl_->tensors.size(), " tensors)");
  Tensor t;
  t.dtype = info->dtype;
  t.shape = info->shape;
  t.data = impl_->file->data() + impl_->data_offset + info->offset;
  t.owner = std::shared_ptr<const void>(impl_->file, impl_->file->data());
  return t;
}

}  // namespace graft::io
