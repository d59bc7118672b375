#include "graft/engine/adapter_registry.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "graft/core/error.h"

namespace graft::engine {

namespace {

constexpr uint64_t kFnvOffset = 1469598103934665603ull, kFnvPrime = 1099511628211ull;

void fnv(uint64_t& h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnvPrime;
}

void digest_file(uint64_t& h, const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail_as(ErrorKind::kIo, "cannot read adapter file '", p.string(), "'");
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    fnv(h, buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) fail_as(ErrorKind::kIo, "error reading adapter file '", p.string(), "'");
}

}  // namespace

uint64_t content_digest(const std::string& path) {
  namespace fs = std::filesystem;
  uint64_t h = kFnvOffset;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    if (ec) fail_as(ErrorKind::kIo, "cannot list adapter directory '", path, "': ", ec.message());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string name = f.filename().string();
      fnv(h, name.data(), name.size() + 1);
      digest_file(h, f);
    }
  } else {
    digest_file(h, path);
  }
  return h;
}

AdapterRegistry::AdapterRegistry(std::vector<AdapterInfo> infos, std::shared_ptr<const runtime::LoraSet> set,
                                 bool fused)
    : infos_(std::move(infos)), set_(set ? std::move(set) : std::make_shared<const runtime::LoraSet>()), fused_(fused) {
  if (!fused_ && set_->size() != infos_.size())
    fail_as(ErrorKind::kInternal, "adapter registry: ", infos_.size(), " adapters but ", set_->size(), " unfused sets");
  for (size_t i = 0; i < infos_.size(); ++i) infos_[i].id = static_cast<int64_t>(i);
  if (fused_)
    for (const auto& a : infos_) fused_scales_.push_back(a.scale);
}

std::vector<AdapterInfo> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  return infos_;
}

std::vector<float> AdapterRegistry::defaults() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<float> out;
  for (const auto& a : infos_) out.push_back(a.scale);
  return out;
}

std::vector<float> AdapterRegistry::checked(const std::vector<ScaleEntry>& entries) const {
  std::vector<float> out(infos_.size(), 0.0f);
  std::vector<bool> seen(infos_.size(), false);
  for (const auto& e : entries) {
    if (e.id < 0 || e.id >= static_cast<int64_t>(infos_.size()))
      fail_as(ErrorKind::kBadRequest, "lora: unknown adapter id ", e.id,
              infos_.empty() ? std::string(" (no adapters are loaded)")
                             : " (loaded ids: 0.." + std::to_string(infos_.size() - 1) + ")");
    if (seen[static_cast<size_t>(e.id)]) fail_as(ErrorKind::kBadRequest, "lora: adapter id ", e.id, " is listed twice");
    // Range first: converting a double beyond float's range is undefined behaviour.
    if (!std::isfinite(e.scale) || std::fabs(e.scale) > std::numeric_limits<float>::max())
      fail_as(ErrorKind::kBadRequest, "lora: scale of adapter id ", e.id, " is not a finite number");
    const float s = static_cast<float>(e.scale);
    seen[static_cast<size_t>(e.id)] = true;
    out[static_cast<size_t>(e.id)] = s;
  }
  if (fused_ && out != fused_scales_) {
    std::string cfg;
    for (size_t i = 0; i < fused_scales_.size(); ++i)
      cfg += (i ? ", " : "") + std::to_string(i) + ": " + std::to_string(fused_scales_[i]);
    fail_as(ErrorKind::kUnsupported,
            "adapter scales cannot change under --lora-fuse: the adapters are baked into the weights at {", cfg,
            "}; restart without --lora-fuse for live scales, or with other --lora-scaled values");
  }
  return out;
}

void AdapterRegistry::set_defaults(const std::vector<ScaleEntry>& entries) {
  const std::vector<float> s = checked(entries);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < infos_.size(); ++i) infos_[i].scale = s[i];
}

std::vector<float> AdapterRegistry::resolve(const std::optional<std::vector<ScaleEntry>>& request) const {
  if (request) return checked(*request);
  return defaults();
}

std::vector<float> AdapterRegistry::forward_scales(const std::vector<float>& resolved) const {
  if (fused_) return {};
  return resolved;
}

uint64_t AdapterRegistry::digest(const std::vector<float>& resolved) const {
  uint64_t h = kFnvOffset;
  for (size_t i = 0; i < resolved.size() && i < infos_.size(); ++i) {
    if (resolved[i] == 0.0f) continue;
    uint32_t bits;
    std::memcpy(&bits, &resolved[i], sizeof bits);
    fnv(h, &infos_[i].content_digest, sizeof(uint64_t));
    fnv(h, &bits, sizeof bits);
  }
  return h;
}

}  // namespace graft::engine
