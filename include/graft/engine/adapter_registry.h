// The adapters a server (or generate) was started with, under stable ids (their position in the
// command line), with the live default scales, and the rules that turn a request's `lora` list
// into the scale vector it runs with. The unfused terms themselves (runtime::LoraSet) are owned
// here and passed to every forward pass; a scale is a number read at the next pass, so changing
// the defaults costs no reload.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graft/runtime/lora.h"

namespace graft::engine {

struct AdapterInfo {
  int64_t id = 0;
  std::string path;
  float scale = 0.0f;            // the live default scale
  std::string task_name;         // GGUF adapter metadata (empty for other formats)
  std::string prompt_prefix;
  uint64_t content_digest = 0;   // of the adapter's files' bytes: identity by content, not path
};

struct ScaleEntry {
  int64_t id = 0;
  double scale = 0.0;
};

class AdapterRegistry {
 public:
  AdapterRegistry() : set_(std::make_shared<const runtime::LoraSet>()) {}
  // `set` holds the unfused terms (empty when fused): adapter i of `set` is infos[i]. With
  // `fused`, the adapters were baked into the weights at the infos' scales, which stay fixed.
  AdapterRegistry(std::vector<AdapterInfo> infos, std::shared_ptr<const runtime::LoraSet> set, bool fused);

  size_t size() const { return infos_.size(); }
  bool fused() const { return fused_; }
  const runtime::LoraSet& set() const { return *set_; }
  std::shared_ptr<const runtime::LoraSet> shared_set() const { return set_; }

  // The adapters with their live default scales (GET /lora-adapters).
  std::vector<AdapterInfo> list() const;
  // The default scale vector now.
  std::vector<float> defaults() const;

  // Listed ids take their scale, unlisted ids become 0 (POST /lora-adapters). Everything is
  // checked first; a refusal changes nothing: an unknown or repeated id or a non-finite scale is
  // kBadRequest, and under fusion anything but the configuration in force is kUnsupported.
  void set_defaults(const std::vector<ScaleEntry>& entries);

  // A request's scale vector, resolved once at admission: its own list (an empty list means every
  // adapter at 0), else the defaults at this instant. Same checks as set_defaults.
  std::vector<float> resolve(const std::optional<std::vector<ScaleEntry>>& request) const;

  // The scales a forward pass takes for a resolved vector (none when fused: they are in the weights).
  std::vector<float> forward_scales(const std::vector<float>& resolved) const;

  // Identity of what a resolved vector computes: the content digests of the adapters with a
  // non-zero scale and those scales' bits. Equal digests give equal KV; scale 0 is the base model.
  uint64_t digest(const std::vector<float>& resolved) const;

 private:
  std::vector<float> checked(const std::vector<ScaleEntry>& entries) const;

  std::vector<AdapterInfo> infos_;
  std::shared_ptr<const runtime::LoraSet> set_;
  bool fused_ = false;
  std::vector<float> fused_scales_;  // the configuration baked in (fused only)
  mutable std::mutex mu_;            // guards the infos' scales
};

// FNV-1a 64 over the bytes of a file, or of every regular file of a directory in name order
// (names included). Throws kIo naming the file that cannot be read.
uint64_t content_digest(const std::string& path);

}  // namespace graft::engine
