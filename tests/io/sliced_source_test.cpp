// io/sliced_source.h on an in-memory source: the shapes and bytes of row-range and stacked-entry
// slices, the stored tensors hidden, and release passed on once the last slice is released.
#include "graft/io/sliced_source.h"

#include <gtest/gtest.h>

#include <numeric>

#include "graft/core/error.h"
#include "../map_source.h"

namespace graft::io {
namespace {

class ReleaseLog : public test::MapSource {
 public:
  mutable std::vector<std::string> released;
  void release(const std::string& name) const override { released.push_back(name); }
};

Tensor iota_f32(const Shape& shape) {
  Tensor t = Tensor::zeros_f32(shape);
  std::iota(t.mutable_as<float>(), t.mutable_as<float>() + t.numel(), 0.0f);
  return t;
}

TEST(SlicedSource, RowRangesAndStackedEntriesAreViewsOfTheStoredBytes) {
  auto base = std::make_shared<ReleaseLog>();
  base->t["fused"] = iota_f32({5, 2});
  base->t["stacked"] = iota_f32({3, 2, 2});
  base->t["other"] = iota_f32({1});
  auto s = make_sliced_source(base,
                              {{"a", TensorSlice::rows("fused", 0, 2)},
                               {"b", TensorSlice::rows("fused", 2, 3)},
                               {"e1", TensorSlice::entry("stacked", 1)}},
                              "read through its parts");
  EXPECT_EQ(s->names(), (std::vector<std::string>{"other", "a", "b", "e1"}));
  EXPECT_EQ(s->info("b")->shape, (Shape{3, 2}));
  EXPECT_EQ(s->info("e1")->shape, (Shape{2, 2}));
  EXPECT_FALSE(s->has("fused"));
  EXPECT_TRUE(s->has("other"));
  const Tensor b = s->read("b"), e1 = s->read("e1");
  EXPECT_EQ(b.shape, (Shape{3, 2}));
  EXPECT_EQ(b.data, base->t["fused"].as<float>() + 4);  // zero-copy
  EXPECT_EQ(e1.as<float>()[0], 4.0f);
  try {
    s->read("fused");
    ADD_FAILURE() << "a sliced tensor was readable";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor 'fused' (read through its parts)"), std::string::npos) << e.what();
  }
  s->release("a");
  EXPECT_TRUE(base->released.empty());  // b still views the fused tensor's pages
  s->release("b");
  s->release("e1");
  s->release("other");
  EXPECT_EQ(base->released, (std::vector<std::string>{"fused", "stacked", "other"}));
}

}  // namespace
}  // namespace graft::io
