// GGUF reader tests: a fixture written by the reference Python writer (tools/gen_gguf_fixtures.py)
// checks metadata, shapes, bytes and dequantized values; files built byte by byte here check that
// every malformed input is refused with a graft::Error naming the file and what is wrong.
#include "graft/io/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "graft/core/error.h"
#include "gguf_test_writer.h"
#include "test_paths.h"

namespace graft::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- helpers ------------------------------------------------------------------------------------

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  return std::string(std::istreambuf_iterator<char>(f), {});
}

using graft::test::Bytes;
using graft::test::GgufBuilder;
using namespace graft::test::gguf_ids;

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("graft_gguf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string write(const std::string& name, const std::string& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  // Opening `bytes` must throw a graft::Error whose message names the file and contains every
  // part of `expected`. Returns the message.
  std::string expect_error(const std::string& bytes, std::initializer_list<std::string_view> expected,
                           const std::string& name = "bad.gguf") {
    std::string path = write(name, bytes);
    try {
      GgufFile::open(path);
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
      for (std::string_view part : expected)
        EXPECT_NE(msg.find(part), std::string::npos) << "expected '" << part << "' in: " << msg;
      return msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw a non-graft exception: " << e.what();
      return "";
    }
    ADD_FAILURE() << "opened without error; expected an error containing '" << *expected.begin() << "'";
    return "";
  }

  std::shared_ptr<GgufFile> open_bytes(const std::string& bytes, const std::string& name = "ok.gguf") {
    return GgufFile::open(write(name, bytes));
  }

  fs::path dir_;
};

std::string fixture_path() { return graft::test::fixture("gguf/small.gguf"); }
json fixture_json() { return json::parse(read_file(graft::test::fixture("gguf/small.json"))); }

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// ---- the reference fixture ----------------------------------------------------------------------

TEST_F(GgufTest, FixtureHeader) {
  auto f = GgufFile::open(fixture_path());
  json j = fixture_json();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->data_offset(), j["data_offset"].get<uint64_t>());
  EXPECT_EQ(f->path(), fixture_path());
  EXPECT_EQ(f->metadata().size(), j["metadata"].size());
  EXPECT_EQ(f->tensors().size(), j["tensors"].size());
}

TEST_F(GgufTest, FixtureMetadataTypesAndValues) {
  auto f = GgufFile::open(fixture_path());
  json j = fixture_json();
  for (const auto& [key, want] : j["metadata"].items()) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(f->has(key));
    const GgufValue& v = f->metadata().at(key);
    EXPECT_EQ(gguf_type_name(v.type), want["type"].get<std::string>());
    if (want["type"] == "array") {
      EXPECT_EQ(gguf_type_name(v.elem_type), want["elem_type"].get<std::string>());
    }
  }
  EXPECT_EQ(f->require_string("general.architecture"), "graft-test");
  EXPECT_EQ(f->require_int("test.u8"), 200);
  EXPECT_EQ(f->require_int("test.i8"), -100);
  EXPECT_EQ(f->require_int("test.u16"), 60000);
  EXPECT_EQ(f->require_int("test.i16"), -30000);
  EXPECT_EQ(f->require_int("test.u32"), 4000000000LL);
  EXPECT_EQ(f->require_int("test.i32"), -2000000000LL);
  EXPECT_EQ(f->require_int("test.i64"), -9000000000000000000LL);
  // 1.8e19 does not fit in int64: the raw value is there, the int getter refuses it by name.
  EXPECT_EQ(std::get<uint64_t>(f->metadata().at("test.u64").value), 18000000000000000000ULL);
  try {
    f->require_int("test.u64");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("test.u64"), std::string::npos) << e.what();
  }
  EXPECT_EQ(f->optional_float("test.f32"), 0.15625);
  EXPECT_DOUBLE_EQ(*f->optional_float("test.f64"), 2.718281828459045);
  EXPECT_EQ(f->optional_float("test.u8"), 200.0);  // integers are numbers too
  EXPECT_EQ(f->optional_bool("test.bool_true"), true);
  EXPECT_EQ(f->optional_bool("test.bool_false"), false);
  EXPECT_EQ(f->require_string("test.string"), "héllo, wörld ✓ 你好");
  EXPECT_EQ(f->require_string("test.empty_string"), "");
  EXPECT_EQ(f->optional_int_array("test.arr_i32"), (std::vector<int64_t>{1, -2, 3, -4}));
  EXPECT_EQ(f->optional_int_array("test.arr_u8"), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(f->optional_float_array("test.arr_f32"), (std::vector<double>{0.5, -1.25, 3.0}));
  EXPECT_EQ(f->optional_float_array("test.arr_i32"), (std::vector<double>{1, -2, 3, -4}));
  EXPECT_EQ(f->require_string_array("test.arr_str"), (std::vector<std::string>{"a", "", "Ġb c", "<|im_start|>"}));
  const auto& bools = std::get<GgufValue::Array>(f->metadata().at("test.arr_bool").value);
  ASSERT_EQ(bools.size(), 3u);
  EXPECT_EQ(std::get<bool>(bools[0]), true);
  EXPECT_EQ(std::get<bool>(bools[1]), false);

  // Absent keys: optional -> nullopt, require -> error naming the key.
  EXPECT_FALSE(f->has("nope"));
  EXPECT_EQ(f->optional_string("nope"), std::nullopt);
  EXPECT_EQ(f->optional_int("nope"), std::nullopt);
  EXPECT_EQ(f->optional_float("nope"), std::nullopt);
  EXPECT_EQ(f->optional_bool("nope"), std::nullopt);
  EXPECT_EQ(f->optional_int_array("nope"), std::nullopt);
  EXPECT_EQ(f->optional_float_array("nope"), std::nullopt);
  EXPECT_EQ(f->optional_string_array("nope"), std::nullopt);
  auto expect_key_error = [&](auto fn, std::string_view key, std::string_view what) {
    try {
      fn();
      ADD_FAILURE() << "expected an error for " << key;
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(f->path()), std::string::npos) << msg;
      EXPECT_NE(msg.find("'" + std::string(key) + "'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << msg;
    }
  };
  expect_key_error([&] { f->require_string("nope"); }, "nope", "missing");
  expect_key_error([&] { f->require_int("nope"); }, "nope", "missing");
  expect_key_error([&] { f->require_string_array("nope"); }, "nope", "missing");
  // Wrong types: error naming the key, the stored type and the expected one.
  expect_key_error([&] { f->require_string("test.u32"); }, "test.u32", "has type uint32, expected a string");
  expect_key_error([&] { f->optional_int("test.string"); }, "test.string", "expected an integer");
  expect_key_error([&] { f->optional_int("test.f32"); }, "test.f32", "has type float32, expected an integer");
  expect_key_error([&] { f->optional_float("test.bool_true"); }, "test.bool_true", "expected a number");
  expect_key_error([&] { f->optional_bool("test.u8"); }, "test.u8", "expected a bool");
  expect_key_error([&] { f->require_string_array("test.arr_i32"); }, "test.arr_i32",
                   "has an array of int32, expected an array of strings");
  expect_key_error([&] { f->optional_int_array("test.arr_f32"); }, "test.arr_f32", "expected an array of integers");
  expect_key_error([&] { f->optional_float_array("test.arr_str"); }, "test.arr_str", "expected an array of numbers");
  expect_key_error([&] { f->optional_int_array("test.u8"); }, "test.u8", "expected an array of integers");
}

TEST_F(GgufTest, FixtureTensorsMatchReference) {
  auto f = GgufFile::open(fixture_path());
  json j = fixture_json();
  for (const auto& want : j["tensors"]) {
    std::string name = want["name"];
    SCOPED_TRACE(name);
    const GgufTensorInfo* info = f->find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(std::string(dtype_name(info->dtype)), want["type"].get<std::string>());
    EXPECT_EQ(ggml_type_name(info->ggml_type), want["type"].get<std::string>());
    EXPECT_EQ(info->shape, want["shape"].get<Shape>());  // outermost first, like numpy
    EXPECT_EQ(info->offset, want["offset"].get<uint64_t>());

    Tensor t = f->tensor(name);
    EXPECT_EQ(t.dtype, info->dtype);
    EXPECT_EQ(t.shape, info->shape);
    EXPECT_NE(t.owner, nullptr);
    std::string bytes = from_hex(want["bytes_hex"]);
    ASSERT_EQ(static_cast<uint64_t>(t.nbytes()), bytes.size());
    EXPECT_EQ(info->nbytes, bytes.size());
    EXPECT_EQ(std::memcmp(t.data, bytes.data(), bytes.size()), 0) << "tensor bytes differ";

    if (t.dtype == DType::I32) {
      std::vector<int64_t> ints = want["values"];
      ASSERT_EQ(static_cast<size_t>(t.numel()), ints.size());
      for (size_t i = 0; i < ints.size(); ++i) EXPECT_EQ(t.as<int32_t>()[i], ints[i]);
      continue;
    }
    std::vector<double> expected = want["values"];
    ASSERT_EQ(static_cast<size_t>(t.numel()), expected.size());
    std::vector<float> got(expected.size());
    convert_to_f32(t.dtype, t.data, got.data(), t.numel());
    for (size_t i = 0; i < expected.size(); ++i) {
      float e = static_cast<float>(expected[i]);
      if (dtype_is_quantized(t.dtype)) {
        // gguf.quants computes d*q (+ m) in float32; the C++ build may fuse d*q+m into an FMA,
        // which can differ in the last bit.
        EXPECT_NEAR(got[i], e, 1e-6f * std::max(1.0f, std::fabs(e))) << "element " << i;
      } else {
        EXPECT_EQ(got[i], e) << "element " << i;
      }
    }
  }
  // Unknown tensor names are an error naming the tensor and the file.
  try {
    f->tensor("missing.weight");
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'missing.weight'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fixture_path()), std::string::npos) << e.what();
  }
  EXPECT_EQ(f->find("missing.weight"), nullptr);
}

TEST_F(GgufTest, TensorViewOutlivesFile) {
  Tensor t;
  {
    auto f = GgufFile::open(fixture_path());
    t = f->tensor("f32_4d");
  }
  // The mapping is kept alive by the view.
  ASSERT_EQ(t.numel(), 120);
  EXPECT_EQ(t.as<float>()[119], 119.0f);
}

TEST_F(GgufTest, Version2Accepted) {
  std::string bytes = read_file(fixture_path());
  bytes[4] = 2;
  auto f = open_bytes(bytes);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->tensors().size(), 8u);
  EXPECT_EQ(f->require_string("general.architecture"), "graft-test");
}

TEST_F(GgufTest, Version1AndFutureVersionsRefused) {
  std::string bytes = read_file(fixture_path());
  bytes[4] = 1;
  expect_error(bytes, {"version 1 is not supported", "expected version 2 or 3"});
  bytes[4] = 4;
  expect_error(bytes, {"unsupported GGUF version 4", "expected 2 or 3"});
  bytes[4] = 0;
  expect_error(bytes, {"unsupported GGUF version 0"});
}

TEST_F(GgufTest, BadMagic) {
  std::string bytes = read_file(fixture_path());
  bytes[0] = 'X';
  expect_error(bytes, {"not a GGUF file", "expected magic \"GGUF\"", "XGUF"});
  expect_error("", {"not a GGUF file", "file too short"});
  expect_error("GGU", {"not a GGUF file"});
  expect_error(std::string("\x00\x01\x02\x03\x04\x05\x06\x07", 8), {"not a GGUF file", "\\x00\\x01"});
}

// Cutting the fixture anywhere before the end of the last tensor's data must give a clean
// graft::Error (never a crash or an out-of-bounds read: run this under ASan); cutting only the
// trailing padding after it is fine.
TEST_F(GgufTest, TruncatedAtEveryByte) {
  std::string bytes = read_file(fixture_path());
  auto full = GgufFile::open(fixture_path());
  uint64_t needed = 0;
  for (const auto& t : full->tensors()) needed = std::max(needed, full->data_offset() + t.offset + t.nbytes);
  ASSERT_LE(needed, bytes.size());
  std::string path = write("trunc.gguf", bytes);
  int errors = 0;
  // Shrink one file from the end (rewriting a file in place is slow on ext4).
  for (size_t n = bytes.size(); n-- > 0;) {
    fs::resize_file(path, n);
    try {
      GgufFile::open(path);
      EXPECT_GE(n, needed) << "a file cut at " << n << " bytes opened without error";
    } catch (const Error& e) {
      ++errors;
      EXPECT_LT(n, needed) << "cut at " << n << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(errors, static_cast<int>(needed));
}

// Every byte of the header and directory set to a few values: the reader either accepts the file
// (and then every tensor view lies inside it) or throws graft::Error; never anything else.
TEST_F(GgufTest, CorruptedBytesNeverCrash) {
  std::string bytes = read_file(fixture_path());
  auto full = GgufFile::open(fixture_path());
  std::string path = write("corrupt.gguf", bytes);
  int accepted = 0, refused = 0;
  for (size_t pos = 0; pos < full->data_offset(); ++pos) {
    for (uint8_t value : {uint8_t{0x00}, uint8_t{0xff}, uint8_t{0x80}, static_cast<uint8_t>(bytes[pos] + 1)}) {
      if (static_cast<char>(value) == bytes[pos]) continue;
      {  // patch in place (same size: no truncation, which is slow on ext4)
        std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(static_cast<std::streamoff>(pos));
        f.put(static_cast<char>(value));
      }
      try {
        auto g = GgufFile::open(path);
        ++accepted;
        for (const auto& t : g->tensors()) {
          ASSERT_LE(g->data_offset() + t.offset + t.nbytes, bytes.size()) << t.name;
          Tensor v = g->tensor(t.name);
          ASSERT_EQ(static_cast<uint64_t>(v.nbytes()), t.nbytes);
        }
      } catch (const Error& e) {
        ++refused;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << pos << " = " << int(value) << ": non-graft exception: " << e.what();
      }
      {
        std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
        f.seekp(static_cast<std::streamoff>(pos));
        f.put(bytes[pos]);
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);  // e.g. bytes inside string values
}

TEST_F(GgufTest, TruncationMessagesSayWhere) {
  std::string bytes = read_file(fixture_path());
  auto full = GgufFile::open(fixture_path());
  expect_error(bytes.substr(0, 6), {"file truncated", "the version"});
  expect_error(bytes.substr(0, 20), {"file truncated", "metadata key/value count"});
  // Cuts early in the fixture are caught by the plausibility check on the counts.
  expect_error(bytes.substr(0, 100), {"header claims 8 tensors and 20 metadata keys", "cannot fit in a file of 100 bytes"});
  // Inside a key's string value (a small file, so that the counts are plausible).
  GgufBuilder b;
  b.kv_string("general.architecture", "graft-test").kv_u32("x", 1);
  std::string small = b.build();
  size_t at = small.find("graft-test");
  ASSERT_NE(at, std::string::npos);
  expect_error(small.substr(0, at + 3), {"key 'general.architecture'", "has length 10", "only 3 bytes remain"});
  expect_error(small.substr(0, at - 10), {"file truncated", "reading the value type of key 'general.architecture'"});
  // Inside the tensor directory.
  at = bytes.find("q4_1");
  ASSERT_NE(at, std::string::npos);
  expect_error(bytes.substr(0, at + 4 + 2), {"file truncated", "tensor 'q4_1'", "dimension count"});
  // Inside the data of the last tensor.
  const GgufTensorInfo* q41 = full->find("q4_1");
  expect_error(bytes.substr(0, full->data_offset() + q41->offset + 7),
               {"tensor 'q4_1'", "lies outside the data section", "truncated"});
  // Before the data section even starts.
  expect_error(bytes.substr(0, full->data_offset() - 1), {"data section should start at offset"});
}

// ---- files built here ---------------------------------------------------------------------------

GgufBuilder valid_builder() {
  GgufBuilder b;
  b.kv_string("general.architecture", "llama").kv_u32("llama.block_count", 1);
  b.f32_tensor("token_embd.weight", {4, 3});
  b.f32_tensor("output_norm.weight", {4});
  return b;
}

TEST_F(GgufTest, BuilderBaselineIsValid) {
  auto f = open_bytes(valid_builder().build());
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].shape, (Shape{3, 4}));
  EXPECT_EQ(f->tensors()[1].shape, (Shape{4}));
  EXPECT_EQ(f->tensor("token_embd.weight").as<float>()[11], 11.0f);
  EXPECT_EQ(f->require_int("llama.block_count"), 1);
}

TEST_F(GgufTest, NoTensorsNoMetadata) {
  GgufBuilder b;
  auto f = open_bytes(b.build());
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_TRUE(f->metadata().empty());
}

TEST_F(GgufTest, EmptyArrayAndAllScalarTypes) {
  GgufBuilder b;
  b.kv("empty", kArray, Bytes().u32(kI32).u64(0));
  b.kv("i8", kI8, Bytes().put<int8_t>(-5));
  b.kv("u64", kU64, Bytes().u64(7));
  b.kv("i64", kI64, Bytes().put<int64_t>(-7));
  b.kv("f64", kF64, Bytes().put<double>(0.25));
  b.kv("strs", kArray, Bytes().u32(kString).u64(2).str("x").str("yz"));
  auto f = open_bytes(b.build());
  EXPECT_EQ(f->optional_int_array("empty"), std::vector<int64_t>{});
  EXPECT_EQ(f->require_int("i8"), -5);
  EXPECT_EQ(f->require_int("u64"), 7);
  EXPECT_EQ(f->require_int("i64"), -7);
  EXPECT_EQ(f->optional_float("f64"), 0.25);
  EXPECT_EQ(f->require_string_array("strs"), (std::vector<std::string>{"x", "yz"}));
}

TEST_F(GgufTest, CustomAlignment) {
  GgufBuilder b;
  b.alignment = 64;
  b.kv_u32("general.alignment", 64);
  b.f32_tensor("a", {3});
  b.f32_tensor("b", {5});
  auto f = open_bytes(b.build());
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find("b")->offset, 64u);
  EXPECT_EQ(f->tensor("b").as<float>()[4], 4.0f);

  // With general.alignment = 64, an offset of 32 is misaligned.
  GgufBuilder c = b;
  c.tensors[1].offset = 32;
  expect_error(c.build(), {"tensor 'b'", "data offset 32", "not a multiple of the alignment 64"});
}

TEST_F(GgufTest, BadAlignmentValues) {
  for (uint32_t a : {0u, 3u, 48u}) {
    GgufBuilder b = valid_builder();
    b.kv_u32("general.alignment", a);
    expect_error(b.build(), {"general.alignment", "power of two", "got " + std::to_string(a)});
  }
  GgufBuilder b = valid_builder();
  b.kv_string("general.alignment", "32");
  expect_error(b.build(), {"general.alignment", "has type string", "expected an unsigned integer"});
}

TEST_F(GgufTest, UnsupportedTensorTypeNamed) {
  GgufBuilder b = valid_builder();
  b.tensor("blk.0.attn_q.weight", {256, 2}, kGgmlIQ2_XXS, std::string(132, '\0'));
  expect_error(b.build(), {"tensor 'blk.0.attn_q.weight' has type IQ2_XXS, which graft does not support",
                           "(supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K"});
  GgufBuilder c = valid_builder();
  c.tensor("x", {4}, kGgmlF64, std::string(32, '\0'));
  expect_error(c.build(), {"tensor 'x' has type F64"});
  GgufBuilder d = valid_builder();
  d.tensor("y", {4}, 99, std::string(32, '\0'));
  expect_error(d.build(), {"tensor 'y' has unknown GGML type id 99"});
}

TEST_F(GgufTest, SupportedPlainTypes) {
  GgufBuilder b;
  b.tensor("f16", {2}, kGgmlF16, Bytes().put<uint16_t>(0x3c00).put<uint16_t>(0xc000).b);
  b.tensor("bf16", {2}, kGgmlBF16, Bytes().put<uint16_t>(0x3f80).put<uint16_t>(0x4040).b);
  b.tensor("i32", {2}, kGgmlI32, Bytes().put<int32_t>(-3).put<int32_t>(9).b);
  auto f = open_bytes(b.build());
  float out[2];
  Tensor t = f->tensor("f16");
  convert_to_f32(t.dtype, t.data, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  t = f->tensor("bf16");
  convert_to_f32(t.dtype, t.data, out, 2);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 3.0f);
  EXPECT_EQ(f->tensor("i32").dtype, DType::I32);
  EXPECT_EQ(f->tensor("i32").as<int32_t>()[1], 9);
}

TEST_F(GgufTest, BlockTypeInnermostDimension) {
  GgufBuilder b;
  b.tensor("q", {48, 2}, kGgmlQ8_0, std::string(34 * 3, '\0'));
  expect_error(b.build(), {"tensor 'q'", "innermost dimension 48", "multiple of the block size 32"});
  GgufBuilder c;
  c.tensor("q", {64, 2}, kGgmlQ4_0, std::string(18 * 4, '\0'));
  auto f = open_bytes(c.build());
  EXPECT_EQ(f->find("q")->shape, (Shape{2, 64}));
  EXPECT_EQ(f->find("q")->nbytes, 72u);
}

TEST_F(GgufTest, TooManyDimensions) {
  GgufBuilder b;
  b.f32_tensor("t5", {1, 1, 1, 1, 2});
  expect_error(b.build(), {"tensor 't5' has 5 dimensions", "at most 4"});
  GgufBuilder c;
  c.f32_tensor("t4", {2, 1, 3, 1});
  EXPECT_EQ(open_bytes(c.build())->find("t4")->shape, (Shape{1, 3, 1, 2}));
}

TEST_F(GgufTest, HugeShapeOverflow) {
  GgufBuilder b;
  b.tensor("big", {1ull << 40, 1ull << 40}, kGgmlF32, "");
  expect_error(b.build(), {"tensor 'big'", "overflows"});
  GgufBuilder c;
  c.tensor("big", {1ull << 62}, kGgmlF32, "");  // numel fits, byte size does not
  expect_error(c.build(), {"tensor 'big'", "large byte size"});
}

TEST_F(GgufTest, OffsetOutOfRange) {
  GgufBuilder b = valid_builder();
  b.tensors[1].offset = 1024;
  expect_error(b.build(), {"tensor 'output_norm.weight'", "lies outside the data section"});
  GgufBuilder c = valid_builder();
  c.tensors[1].offset = ~uint64_t{0} - 31;  // aligned, and offset + nbytes would wrap around
  expect_error(c.build(), {"tensor 'output_norm.weight'", "lies outside the data section"});
}

TEST_F(GgufTest, OverlappingTensors) {
  GgufBuilder b = valid_builder();
  b.f32_tensor("third", {16});
  b.tensors[2].offset = 0;  // on top of token_embd.weight
  expect_error(b.build(), {"tensors 'token_embd.weight'", "'third'", "overlap"});
}

TEST_F(GgufTest, MisalignedOffset) {
  GgufBuilder b = valid_builder();
  b.tensors[1].offset = 48;
  expect_error(b.build(), {"tensor 'output_norm.weight' data offset 48", "not a multiple of the alignment 32"});
  // general.alignment = 1 is legal GGUF, but an F32 tensor must still be 4-byte aligned in memory.
  GgufBuilder c;
  c.alignment = 1;
  c.kv_u32("general.alignment", 1);
  c.kvs.insert(c.kvs.begin(), Bytes().str("kk").u32(kU8).u8(0).b);  // header size: 105 bytes
  c.f32_tensor("f", {2});
  expect_error(c.build(), {"tensor 'f' of type F32", "not aligned to 4 bytes"});
}

TEST_F(GgufTest, DuplicateNames) {
  GgufBuilder b = valid_builder();
  b.f32_tensor("output_norm.weight", {4});
  expect_error(b.build(), {"tensor name 'output_norm.weight' appears more than once"});
  GgufBuilder c = valid_builder();
  c.kv_u32("llama.block_count", 2);
  expect_error(c.build(), {"metadata key 'llama.block_count' appears more than once"});
  GgufBuilder d = valid_builder();
  d.f32_tensor("", {4});
  expect_error(d.build(), {"tensor info #2 has an empty name"});
}

TEST_F(GgufTest, BadStringLengths) {
  // Key length past the end of the file.
  GgufBuilder b = valid_builder();
  b.kvs.insert(b.kvs.begin(), Bytes().u64(1ull << 40).b);
  expect_error(b.build(), {"the key of metadata entry #0", "has length 1099511627776", "bytes remain"});
  // A string value whose length is huge.
  GgufBuilder c = valid_builder();
  c.kv("general.name", kString, Bytes().u64(~uint64_t{0}).raw("abc"));
  expect_error(c.build(), {"key 'general.name'", "has length 18446744073709551615"});
  // A tensor name whose length runs into the data.
  GgufBuilder d = valid_builder();
  std::string bytes = d.build();
  size_t at = bytes.find("output_norm.weight");
  ASSERT_NE(at, std::string::npos);
  uint64_t bad = bytes.size();
  std::memcpy(bytes.data() + at - 8, &bad, 8);
  expect_error(bytes, {"the tensor name of tensor info #1", "has length"});
}

TEST_F(GgufTest, BadMetadataTypes) {
  GgufBuilder b = valid_builder();
  b.kv("weird", 13, Bytes().u32(0));
  expect_error(b.build(), {"key 'weird' has unknown value type 13"});
  GgufBuilder c = valid_builder();
  c.kv("nested", kArray, Bytes().u32(kArray).u64(1).u32(kU8).u64(1).u8(1));
  expect_error(c.build(), {"key 'nested' is an array of arrays"});
  GgufBuilder d = valid_builder();
  d.kv("arr", kArray, Bytes().u32(77).u64(0));
  expect_error(d.build(), {"key 'arr' is an array of unknown value type 77"});
  GgufBuilder e = valid_builder();
  e.kv("flag", kBool, Bytes().u8(2));
  expect_error(e.build(), {"key 'flag'", "bool", "is 2, expected 0 or 1"});
  GgufBuilder f = valid_builder();
  f.kv("arr", kArray, Bytes().u32(kF32).u64(1ull << 50));
  expect_error(f.build(), {"key 'arr'", "claims 1125899906842624 elements of type float32"});
  GgufBuilder g;  // an array one element short, at the end of the file (no padding after it)
  g.kv("strs", kArray, Bytes().u32(kString).u64(3).str(std::string(20, 'a')).str(std::string(20, 'b')));
  expect_error(g.build().substr(0, 24 + g.kvs[0].size()), {"file truncated", "a string value of key 'strs'"});
}

TEST_F(GgufTest, ImplausibleCounts) {
  GgufBuilder b = valid_builder();
  b.n_tensors_override = 1ull << 40;
  expect_error(b.build(), {"header claims 1099511627776 tensors", "cannot fit"});
  GgufBuilder c = valid_builder();
  c.n_kv_override = ~uint64_t{0};
  expect_error(c.build(), {"metadata keys, which cannot fit"});
  // Plausible but wrong: one more key than present reads the tensor directory as a key.
  GgufBuilder d = valid_builder();
  d.n_kv_override = 3;
  expect_error(d.build(), {});
}

TEST_F(GgufTest, MissingFile) {
  std::string path = (dir_ / "does_not_exist.gguf").string();
  try {
    GgufFile::open(path);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// ---- the real SmolLM2 GGUF against the reference reader's view of it ------------------------------

TEST(GgufSmolLM2, MatchesReferenceSummary) {
  const std::string path = graft::test::smollm2_gguf();
  if (!fs::exists(path)) GTEST_SKIP() << path << " is missing (run `make models`)";
  auto f = GgufFile::open(path);
  json j = json::parse(read_file(graft::test::fixture("smollm2/gguf_summary.json")));

  EXPECT_EQ(f->file_size(), j["file_size"].get<uint64_t>());
  EXPECT_EQ(f->version(), j["version"].get<uint32_t>());
  EXPECT_EQ(f->alignment(), j["alignment"].get<uint64_t>());
  EXPECT_EQ(f->data_offset(), j["data_offset"].get<uint64_t>());
  EXPECT_EQ(f->require_string("general.architecture"), j["architecture"].get<std::string>());
  EXPECT_EQ(f->require_int("llama.context_length"), j["context_length"].get<int64_t>());
  EXPECT_EQ(f->require_int("llama.embedding_length"), j["embedding_length"].get<int64_t>());
  EXPECT_EQ(f->require_int("llama.feed_forward_length"), j["feed_forward_length"].get<int64_t>());
  EXPECT_EQ(f->require_int("llama.block_count"), j["block_count"].get<int64_t>());
  EXPECT_EQ(f->require_int("llama.attention.head_count"), j["head_count"].get<int64_t>());
  EXPECT_EQ(f->require_int("llama.attention.head_count_kv"), j["head_count_kv"].get<int64_t>());
  EXPECT_EQ(f->optional_float("llama.rope.freq_base"), j["rope_freq_base"].get<double>());
  EXPECT_EQ(f->optional_float("llama.attention.layer_norm_rms_epsilon"), j["rms_eps"].get<double>());
  EXPECT_EQ(f->require_int("llama.vocab_size"), j["vocab_size"].get<int64_t>());
  EXPECT_EQ(f->require_string_array("tokenizer.ggml.tokens").size(), j["n_tokens"].get<size_t>());
  EXPECT_EQ(f->require_string_array("tokenizer.ggml.merges").size(), j["n_merges"].get<size_t>());
  EXPECT_EQ(f->optional_string("tokenizer.chat_template"), j["chat_template"].get<std::string>());

  ASSERT_EQ(f->metadata().size(), j["metadata_types"].size());
  for (const auto& [key, want] : j["metadata_types"].items()) {
    SCOPED_TRACE(key);
    ASSERT_TRUE(f->has(key));
    const GgufValue& v = f->metadata().at(key);
    EXPECT_EQ(gguf_type_name(v.type), want["type"].get<std::string>());
    if (v.type == GgufType::ARRAY) {
      EXPECT_EQ(gguf_type_name(v.elem_type), want["elem_type"].get<std::string>());
      EXPECT_EQ(std::get<GgufValue::Array>(v.value).size(), want["len"].get<size_t>());
    }
  }

  ASSERT_EQ(f->tensors().size(), j["tensors"].size());
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    const GgufTensorInfo& t = f->tensors()[i];
    const json& want = j["tensors"][i];
    SCOPED_TRACE(want["name"].get<std::string>());
    EXPECT_EQ(t.name, want["name"].get<std::string>());  // file order is kept
    EXPECT_EQ(ggml_type_name(t.ggml_type), want["type"].get<std::string>());
    EXPECT_EQ(std::string(dtype_name(t.dtype)), want["type"].get<std::string>());
    EXPECT_EQ(t.shape, want["shape"].get<Shape>());
    EXPECT_EQ(t.offset, want["offset"].get<uint64_t>());
    EXPECT_EQ(t.nbytes, want["nbytes"].get<uint64_t>());
  }

  for (const json& s : j["dequantized_samples"]) {
    std::string name = s["name"];
    SCOPED_TRACE(name);
    Tensor t = f->tensor(name);
    std::vector<float> v(static_cast<size_t>(t.numel()));
    convert_to_f32(t.dtype, t.data, v.data(), t.numel());
    std::vector<double> first = s["first"], last = s["last"];
    for (size_t i = 0; i < first.size(); ++i) {
      EXPECT_NEAR(v[i], first[i], 1e-6 * std::max(1.0, std::fabs(first[i]))) << "element " << i;
      size_t k = v.size() - last.size() + i;
      EXPECT_NEAR(v[k], last[i], 1e-6 * std::max(1.0, std::fabs(last[i]))) << "element " << k;
    }
    double sum = 0, sum_abs = 0;
    for (float x : v) {
      sum += x;
      sum_abs += std::fabs(x);
    }
    EXPECT_NEAR(sum_abs, s["sum_abs"].get<double>(), 1e-6 * s["sum_abs"].get<double>());
    EXPECT_NEAR(sum, s["sum"].get<double>(), 1e-6 * s["sum_abs"].get<double>());
  }
}

TEST(GgufNames, TypeNames) {
  EXPECT_EQ(ggml_type_name(0), "F32");
  EXPECT_EQ(ggml_type_name(8), "Q8_0");
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(14), "Q6_K");
  EXPECT_EQ(ggml_type_name(30), "BF16");
  EXPECT_EQ(ggml_type_name(1000), "");
  EXPECT_EQ(gguf_type_name(GgufType::FLOAT64), "float64");
}

}  // namespace
}  // namespace graft::io
