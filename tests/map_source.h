// A TensorSource over an in-memory map of tensors, for tests of loading and binding. Counts reads,
// so a test can assert that validation read no weights.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "graft/io/tensor_source.h"

namespace graft::test {

class MapSource : public io::TensorSource {
 public:
  std::map<std::string, Tensor> t;
  mutable int reads = 0;

  std::vector<std::string> names() const override {
    std::vector<std::string> n;
    for (const auto& [k, v] : t) n.push_back(k);
    return n;
  }
  std::optional<io::TensorInfo> info(const std::string& n) const override {
    auto it = t.find(n);
    if (it == t.end()) return std::nullopt;
    return io::TensorInfo{it->second.dtype, it->second.shape};
  }
  Tensor read(const std::string& n) const override {
    ++reads;
    return t.at(n);
  }
  std::string describe() const override { return "in-memory test source"; }
};

}  // namespace graft::test
