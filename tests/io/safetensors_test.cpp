#include "graft/io/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "graft/core/error.h"
#include "graft/io/tensor_source.h"

namespace graft::io {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("graft_st_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes a raw file: 8-byte length, header text, then `data`.
  std::string write_raw(const std::string& name, const std::string& header, const std::string& data,
                        int64_t length_override = -1) {
    const std::string p = (dir_ / name).string();
    std::ofstream out(p, std::ios::binary);
    uint64_t n = length_override >= 0 ? static_cast<uint64_t>(length_override) : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << data;
    return p;
  }

  void expect_error(const std::string& path, const std::string& fragment) {
    try {
      SafetensorsFile::open(path);
      FAIL() << "expected an error containing '" << fragment << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << "error must name the file: " << e.what();
    }
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  Tensor a = Tensor::zeros_f32({2, 3});
  for (int i = 0; i < 6; ++i) a.mutable_as<float>()[i] = static_cast<float>(i) * 0.5f;
  std::vector<uint8_t> bf(8);
  Tensor b = Tensor::owned(DType::BF16, {4}, bf);
  const std::string p = (dir_ / "x.safetensors").string();
  write_safetensors(p, {{"a", a}, {"b", b}}, {{"format", "pt"}});
  auto f = SafetensorsFile::open(p);
  ASSERT_EQ(f->entries().size(), 2u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  Tensor r = f->tensor("a");
  EXPECT_EQ(r.shape, (Shape{2, 3}));
  EXPECT_EQ(r.dtype, DType::F32);
  EXPECT_FLOAT_EQ(r.as<float>()[5], 2.5f);
  EXPECT_EQ(f->tensor("b").dtype, DType::BF16);
  EXPECT_THROW(f->tensor("missing"), Error);
}

TEST_F(SafetensorsTest, RefusesHeaderLongerThanFile) {
  expect_error(write_raw("long.safetensors", "{}", "", 1000), "exceeds the file");
}

TEST_F(SafetensorsTest, RefusesTruncatedLength) {
  const std::string p = (dir_ / "tiny.safetensors").string();
  std::ofstream(p) << "abc";
  expect_error(p, "too short");
}

TEST_F(SafetensorsTest, RefusesInvalidJson) { expect_error(write_raw("bad.safetensors", "{not json", ""), "not valid JSON"); }

TEST_F(SafetensorsTest, RefusesUnknownDtype) {
  expect_error(write_raw("dt.safetensors", R"({"w":{"dtype":"F8_E9","shape":[1],"data_offsets":[0,1]}})", "x"),
               "unknown or unsupported dtype 'F8_E9'");
}

TEST_F(SafetensorsTest, RefusesOffsetsOutOfRange) {
  expect_error(write_raw("oor.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "12345678"),
               "out of range");
}

TEST_F(SafetensorsTest, RefusesSizeDisagreeingWithShape) {
  expect_error(write_raw("sz.safetensors", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678"),
               "expected 12");
}

TEST_F(SafetensorsTest, RefusesOverlappingTensors) {
  expect_error(write_raw("ov.safetensors",
                         R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                         "123456789012"),
               "overlapping");
}

TEST_F(SafetensorsTest, RefusesNegativeDimension) {
  expect_error(write_raw("neg.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "1234"),
               "non-integer or negative");
}

TEST_F(SafetensorsTest, MissingFileNamesPath) {
  EXPECT_THROW(SafetensorsFile::open((dir_ / "nope.safetensors").string()), Error);
}

TEST_F(SafetensorsTest, ShardedCheckpointFollowsIndex) {
  Tensor a = Tensor::zeros_f32({2});
  Tensor b = Tensor::zeros_f32({3});
  write_safetensors((dir_ / "model-00001-of-00002.safetensors").string(), {{"a", a}});
  write_safetensors((dir_ / "model-00002-of-00002.safetensors").string(), {{"b", b}});
  std::ofstream((dir_ / "model.safetensors.index.json").string())
      << R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  auto src = open_safetensors_checkpoint(dir_.string());
  EXPECT_EQ(src->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(src->info("b")->shape, (Shape{3}));
  EXPECT_FALSE(src->has("c"));
}

TEST_F(SafetensorsTest, ShardedCheckpointRefusesTensorMissingFromIndex) {
  write_safetensors((dir_ / "s1.safetensors").string(), {{"a", Tensor::zeros_f32({2})}, {"extra", Tensor::zeros_f32({1})}});
  std::ofstream((dir_ / "model.safetensors.index.json").string()) << R"({"weight_map":{"a":"s1.safetensors"}})";
  try {
    open_safetensors_checkpoint(dir_.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'extra'"), std::string::npos) << e.what();
  }
}

TEST_F(SafetensorsTest, ShardedCheckpointRefusesWrongAssignment) {
  write_safetensors((dir_ / "s1.safetensors").string(), {{"a", Tensor::zeros_f32({2})}});
  std::ofstream((dir_ / "model.safetensors.index.json").string()) << R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}})";
  EXPECT_THROW(open_safetensors_checkpoint(dir_.string()), Error);
}

}  // namespace
}  // namespace graft::io
