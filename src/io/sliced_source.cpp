#include "graft/io/sliced_source.h"

#include "graft/core/error.h"

namespace graft::io {

namespace {

Shape slice_shape(const Shape& stored, const TensorSlice& s) {
  Shape out = stored;
  if (s.squeeze)
    out.erase(out.begin());
  else
    out[0] = s.count;
  return out;
}

class SlicedSource : public TensorSource {
 public:
  SlicedSource(std::shared_ptr<TensorSource> base, std::map<std::string, TensorSlice> slices, std::string hidden_note)
      : base_(std::move(base)), slices_(std::move(slices)), hidden_note_(std::move(hidden_note)) {
    for (const auto& [name, s] : slices_) ++slices_of_[s.stored];
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (auto& n : base_->names())
      if (!slices_of_.count(n)) out.push_back(n);
    for (const auto& [n, s] : slices_) out.push_back(n);
    return out;
  }
  std::optional<TensorInfo> info(const std::string& name) const override {
    if (auto it = slices_.find(name); it != slices_.end()) {
      auto si = base_->info(it->second.stored);
      return TensorInfo{si->dtype, slice_shape(si->shape, it->second)};
    }
    if (slices_of_.count(name)) return std::nullopt;
    return base_->info(name);
  }
  // The slice's entries are whole runs of the leading dimension: one contiguous span of bytes.
  Tensor read(const std::string& name) const override {
    auto it = slices_.find(name);
    if (it == slices_.end()) {
      if (slices_of_.count(name)) fail(base_->describe(), ": no tensor '", name, "' (", hidden_note_, ")");
      return base_->read(name);
    }
    const TensorSlice& s = it->second;
    const Tensor t = base_->read(s.stored);
    Tensor out = t;
    const int64_t entry_bytes = t.nbytes() / t.shape[0];
    out.data = static_cast<const uint8_t*>(t.data) + s.first * entry_bytes;
    out.shape = slice_shape(t.shape, s);
    return out;
  }
  std::string describe() const override { return base_->describe(); }
  void release(const std::string& name) const override {
    auto it = slices_.find(name);
    if (it == slices_.end()) return base_->release(name);
    const std::string& stored = it->second.stored;
    if (++released_[stored] == slices_of_.at(stored)) base_->release(stored);
  }

 private:
  std::shared_ptr<TensorSource> base_;
  std::map<std::string, TensorSlice> slices_;
  std::string hidden_note_;
  std::map<std::string, size_t> slices_of_;  // stored tensor -> how many slices view it
  mutable std::map<std::string, size_t> released_;
};

}  // namespace

std::shared_ptr<TensorSource> make_sliced_source(std::shared_ptr<TensorSource> base,
                                                 std::map<std::string, TensorSlice> slices, std::string hidden_note) {
  return std::make_shared<SlicedSource>(std::move(base), std::move(slices), std::move(hidden_note));
}

}  // namespace graft::io
