// Helpers for the adapter importer tests: a temp directory per test, synthetic tensors with
// distinct values, JSON writers, and an error matcher.
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/error.h"
#include "graft/io/safetensors.h"

namespace graft::test {

using TensorList = std::vector<std::pair<std::string, Tensor>>;

// Element i holds base + 0.01·(i+1): distinct, finite, exactly comparable after a transpose.
inline Tensor make_tensor(const Shape& shape, float base = 0.0f, DType dt = DType::F32) {
  const int64_t n = shape_numel(shape);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = base + 0.01f * static_cast<float>(i + 1);
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(dt, n)));
  convert_from_f32(v.data(), dt, bytes.data(), n);
  return Tensor::owned(dt, shape, std::move(bytes));
}

inline Tensor scalar(float v, DType dt = DType::F32) {
  std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(dt, 1)));
  convert_from_f32(&v, dt, bytes.data(), 1);
  return Tensor::owned(dt, {}, std::move(bytes));
}

inline Tensor with_value(Tensor t, int64_t index, float value) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  convert_to_f32(t.dtype, t.data, v.data(), t.numel());
  v[static_cast<size_t>(index)] = value;
  std::vector<uint8_t> bytes(static_cast<size_t>(t.nbytes()));
  convert_from_f32(v.data(), t.dtype, bytes.data(), t.numel());
  return Tensor::owned(t.dtype, t.shape, std::move(bytes));
}

inline float at(const Tensor& t, int64_t i) {
  float v = 0;
  convert_to_f32(t.dtype, static_cast<const uint8_t*>(t.data) + dtype_bytes(t.dtype, i), &v, 1);
  return v;
}
inline float at2(const Tensor& t, int64_t r, int64_t c) { return at(t, r * t.shape[1] + c); }

// True when u[r, c] == t[c, r] for all elements.
inline bool is_transpose_of(const Tensor& u, const Tensor& t) {
  if (u.shape.size() != 2 || t.shape.size() != 2 || u.shape[0] != t.shape[1] || u.shape[1] != t.shape[0]) return false;
  for (int64_t r = 0; r < u.shape[0]; ++r)
    for (int64_t c = 0; c < u.shape[1]; ++c)
      if (at2(u, r, c) != at2(t, c, r)) return false;
  return true;
}
inline bool same_values(const Tensor& u, const Tensor& t) {
  if (u.shape != t.shape) return false;
  for (int64_t i = 0; i < u.numel(); ++i)
    if (at(u, i) != at(t, i)) return false;
  return true;
}

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = (std::filesystem::temp_directory_path() /
             ("graft_import_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
                .string();
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string write_json(const std::string& name, const std::string& text) const {
    std::ofstream(file(name)) << text;
    return file(name);
  }
  std::string write_tensors(const std::string& name, const TensorList& tensors) const {
    io::write_safetensors(file(name), tensors);
    return file(name);
  }
  std::string subdir(const std::string& name) const {
    std::filesystem::create_directories(file(name));
    return file(name);
  }

 private:
  std::string path_;
};

// Runs fn, expects a graft::Error whose message contains every part.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    return;
  }
  ADD_FAILURE() << "expected graft::Error";
}

inline const adapter::AdapterTarget* find_target(const adapter::WeightAdapter& a, const std::string& module,
                                                 const std::string& param = "weight") {
  for (const auto& t : a.targets)
    if (t.module == module && t.param == param) return &t;
  return nullptr;
}

inline const adapter::LowRankUpdate& lowrank(const adapter::AdapterTarget* t) {
  EXPECT_NE(t, nullptr);
  return std::get<adapter::LowRankUpdate>(t->update);
}

}  // namespace graft::test
