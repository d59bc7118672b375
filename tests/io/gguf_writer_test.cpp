// write_gguf with metadata as GgufFile reads it: a file rewritten from another reads back with the
// same metadata (every value type, arrays of each element type, the same stored types) and the same
// tensors (dense and block formats, bytes unchanged). Source: tests/fixtures/gguf/small.gguf
// (tools/gen_gguf_fixtures.py, written by gguf-py).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "graft/core/error.h"
#include "graft/io/gguf.h"
#include "graft/io/gguf_writer.h"
#include "test_paths.h"

namespace graft::io {
namespace {

namespace fs = std::filesystem;

TEST(GgufWriter, RewritesEveryValueTypeAndTensorFormat) {
  auto src = GgufFile::open(test::fixture("gguf/small.gguf"));
  std::vector<std::pair<std::string, GgufValue>> metadata(src->metadata().begin(), src->metadata().end());
  std::vector<GgufWriteTensor> tensors;
  for (const auto& t : src->tensors()) tensors.push_back({t.name, src->tensor(t.name)});
  const fs::path path = fs::temp_directory_path() / ("graft_writer_" + std::to_string(::getpid()) + ".gguf");
  write_gguf(path.string(), metadata, tensors);
  auto back = GgufFile::open(path.string());
  fs::remove(path);
  ASSERT_EQ(back->metadata().size(), src->metadata().size());
  int arrays = 0;
  for (const auto& [key, v] : src->metadata()) {
    const GgufValue& w = back->metadata().at(key);
    EXPECT_EQ(w.type, v.type) << key;
    EXPECT_EQ(w.elem_type, v.elem_type) << key;
    EXPECT_TRUE(w.value == v.value) << key;
    arrays += v.type == GgufType::ARRAY;
  }
  EXPECT_GE(arrays, 5);
  ASSERT_EQ(back->tensors().size(), src->tensors().size());
  for (const auto& t : src->tensors()) {
    const Tensor a = src->tensor(t.name), b = back->tensor(t.name);
    EXPECT_EQ(a.dtype, b.dtype) << t.name;
    EXPECT_EQ(a.shape, b.shape) << t.name;
    ASSERT_EQ(a.nbytes(), b.nbytes()) << t.name;
    EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(a.nbytes())), 0) << t.name;
  }
}

TEST(GgufWriter, RefusesADtypeGgufCannotStoreAndWritesNothing) {
  const std::vector<uint8_t> bytes(4);
  const std::vector<GgufWriteTensor> tensors = {{"t", Tensor::owned(DType::U32, {1}, bytes)}};
  const fs::path path = fs::temp_directory_path() / ("graft_writer_refuse_" + std::to_string(::getpid()) + ".gguf");
  try {
    write_gguf(path.string(), std::vector<std::pair<std::string, GgufValue>>{}, tensors);
    ADD_FAILURE() << "a U32 tensor was written";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("'t'"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));
}

TEST(GgufWriter, RefusesMetadataItCannotWriteFaithfully) {
  const fs::path path = fs::temp_directory_path() / ("graft_writer_meta_" + std::to_string(::getpid()) + ".gguf");
  GgufValue mismatched;  // typed float32, holding an integer
  mismatched.type = GgufType::FLOAT32;
  mismatched.value = uint64_t{3};
  GgufValue alignment;  // the writer lays tensors out at 32 bytes
  alignment.type = GgufType::UINT32;
  alignment.value = uint64_t{64};
  for (const auto& [key, value] : {std::pair{std::string("test.scale"), mismatched},
                                   std::pair{std::string("general.alignment"), alignment}}) {
    try {
      write_gguf(path.string(), {{key, value}}, {});
      ADD_FAILURE() << key << " was written";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kBadRequest) << key;
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(path)) << key;
  }
}

}  // namespace
}  // namespace graft::io
