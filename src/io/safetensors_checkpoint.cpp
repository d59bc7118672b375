// Safetensors checkpoints as a TensorSource: one file, or shards listed by an index.
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "graft/core/error.h"
#include "graft/io/json_file.h"
#include "graft/io/safetensors.h"
#include "graft/io/tensor_source.h"

namespace graft::io {

namespace fs = std::filesystem;

namespace {

class SafetensorsSource : public TensorSource {
 public:
  SafetensorsSource(std::string description, std::vector<std::shared_ptr<SafetensorsFile>> files,
                    std::map<std::string, size_t> owner)
      : description_(std::move(description)), files_(std::move(files)), owner_(std::move(owner)) {}

  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, i] : owner_) out.push_back(name);
    return out;
  }
  std::optional<TensorInfo> info(const std::string& name) const override {
    auto it = owner_.find(name);
    if (it == owner_.end()) return std::nullopt;
    const SafetensorsEntry* e = files_[it->second]->find(name);
    return TensorInfo{e->dtype, e->shape};
  }
  Tensor read(const std::string& name) const override {
    auto it = owner_.find(name);
    if (it == owner_.end()) fail(description_, ": no tensor named '", name, "'");
    return files_[it->second]->tensor(name);
  }
  std::string describe() const override { return description_; }
  void release(const std::string& name) const override {
    auto it = owner_.find(name);
    if (it != owner_.end()) files_[it->second]->release(name);
  }

 private:
  std::string description_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> owner_;  // tensor name -> index into files_
};

}  // namespace

std::shared_ptr<TensorSource> open_safetensors_source(const std::string& file) {
  auto f = SafetensorsFile::open(file);
  std::map<std::string, size_t> owner;
  for (const auto& e : f->entries()) owner[e.name] = 0;
  return std::make_shared<SafetensorsSource>("'" + file + "'", std::vector{f}, std::move(owner));
}

std::shared_ptr<TensorSource> open_safetensors_checkpoint(const std::string& dir) {
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) return open_safetensors_source(single.string());
  if (!fs::exists(index))
    fail("model directory '", dir, "' has neither model.safetensors nor model.safetensors.index.json");

  const nlohmann::json j = read_json_file(index.string(), kMaxConfigBytes, "index");
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    fail("'", index.string(), "': missing object field 'weight_map'");
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::map<std::string, size_t> file_index, owner;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string()) fail("'", index.string(), "': weight_map['", it.key(), "'] is not a file name");
    const std::string shard = it->get<std::string>();
    if (shard.find('/') != std::string::npos || shard == "..")
      fail("'", index.string(), "': shard name '", shard, "' must be a file in the same directory");
    auto [fi, inserted] = file_index.emplace(shard, files.size());
    if (inserted) files.push_back(SafetensorsFile::open((fs::path(dir) / shard).string()));
    if (!files[fi->second]->find(it.key()))
      fail("'", index.string(), "' assigns tensor '", it.key(), "' to '", shard, "', which does not contain it");
    owner[it.key()] = fi->second;
  }
  // A tensor present in a shard but missing from the index would silently vanish: refuse it.
  for (size_t i = 0; i < files.size(); ++i)
    for (const auto& e : files[i]->entries())
      if (!owner.count(e.name))
        fail("'", files[i]->path(), "' holds tensor '", e.name, "', which '", index.string(), "' does not list");
  return std::make_shared<SafetensorsSource>("'" + dir + "'", std::move(files), std::move(owner));
}

}  // namespace graft::io
