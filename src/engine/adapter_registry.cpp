#include "graft/engine/adapter_registry.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>

#include "graft/core/error.h"

namespace graft::engine {

// One registered adapter. `info`'s mutable fields, `terms`, `building` and `last_used` are guarded
// by the registry's mutex; the rest is fixed at registration. Picks hold the entry, so a removed or
// replaced entry can still be built for the requests admitted with it.
struct AdapterEntry {
  AdapterInfo info;
  std::shared_ptr<const adapter::WeightAdapter> source;  // the mapped files (unfused registries)
  std::shared_ptr<const runtime::LoraAdapter> terms;     // the registry's reference while resident
  std::shared_future<std::shared_ptr<const runtime::LoraAdapter>> building;
  int64_t last_used = 0;
  bool registered = true;  // false once removed or replaced in place
};

namespace {

Digest pairs_digest(const std::vector<std::pair<Digest, float>>& pairs) {
  io::Hasher h;
  for (const auto& [d, s] : pairs) {
    uint32_t bits;
    std::memcpy(&bits, &s, sizeof bits);
    h.update(d.data(), d.size());
    h.update(&bits, sizeof bits);
  }
  return io::finish_sha256(h);
}

void measure(const runtime::LoraAdapter& a, AdapterInfo& info) {
  int64_t bytes = 0, rank = 0;
  auto add = [&](const runtime::LoraTerm& t) {
    bytes += t.factor_bytes();
    if (t.kron) rank = std::max({rank, t.kron->r1, t.kron->r2});
    else if (!t.a.shape.empty()) rank = std::max(rank, t.a.shape[0]);
  };
  for (const auto& [role, site] : a.terms)
    for (const auto& t : site) add(t);
  info.bytes = bytes;
  info.rank = rank;
  info.terms = a.term_count;
}

void check_name(const std::string& name) {
  if (name.empty()) fail_as(ErrorKind::kBadRequest, "an adapter name must not be empty");
  if (name.size() > 256) fail_as(ErrorKind::kBadRequest, "adapter name '", name.substr(0, 64), "...' is over 256 bytes");
  for (unsigned char c : name)
    // Commas separate names in vllm:lora_requests_info; control characters have no place in a label.
    if (c == ',' || c < 0x20 || c == 0x7f)
      fail_as(ErrorKind::kBadRequest, "adapter name '", name, "' contains a comma or a control character");
}

void refuse_if_fused(bool fused) {
  if (fused)
    fail_as(ErrorKind::kUnsupported,
            "adapters cannot be added under --lora-fuse: the startup adapters are baked into the weights; restart "
            "without --lora-fuse to load adapters at run time");
}

}  // namespace

void read_adapter_labels(const adapter::WeightAdapter& a, AdapterInfo& info) {
  const auto first = [&](std::initializer_list<const char*> keys) {
    for (const char* k : keys)
      if (auto it = a.metadata.find(k); it != a.metadata.end()) return it->second;
    return std::string();
  };
  info.task_name = first({"task_name", "adapter.lora.task_name"});
  info.prompt_prefix = first({"prompt_prefix", "adapter.lora.prompt_prefix"});
}

bool Selection::ready() const {
  return std::all_of(picks.begin(), picks.end(), [](const AdapterPick& p) { return p.terms != nullptr; });
}

std::vector<std::string> Selection::names() const {
  std::vector<std::string> out;
  for (const auto& p : picks) out.push_back(p.name);
  return out;
}

std::vector<runtime::ScaledAdapter> Selection::adapters() const {
  std::vector<runtime::ScaledAdapter> out;
  for (const auto& p : picks) out.push_back({p.terms, p.scale, p.id});
  return out;
}

AdapterRegistry::AdapterRegistry(Builder builder, ResidencyLimits limits)
    : builder_(std::move(builder)), limits_(limits) {}

AdapterRegistry::AdapterRegistry(std::vector<AdapterInfo> fused) : fused_(true) {
  for (size_t i = 0; i < fused.size(); ++i) {
    auto e = std::make_shared<AdapterEntry>();
    e->info = std::move(fused[i]);
    e->info.id = static_cast<int64_t>(i);
    fused_scales_.push_back(e->info.scale);
    entries_[e->info.id] = std::move(e);
  }
  next_id_ = static_cast<int64_t>(fused_scales_.size());
}

AdapterRegistry::~AdapterRegistry() = default;

size_t AdapterRegistry::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::shared_ptr<AdapterEntry> AdapterRegistry::entry(int64_t id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : it->second;
}

std::vector<AdapterInfo> AdapterRegistry::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<AdapterInfo> out;
  for (const auto& [id, e] : entries_) {
    AdapterInfo a = e->info;
    a.resident = fused_ || e->terms != nullptr;
    a.pinned = a.scale != 0.0f;
    out.push_back(std::move(a));
  }
  return out;
}

std::optional<int64_t> AdapterRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : entries_)
    if (e->info.name == name) return id;
  return std::nullopt;
}

std::vector<float> AdapterRegistry::checked(const std::vector<ScaleEntry>& entries) const {
  std::vector<float> out(static_cast<size_t>(next_id_), 0.0f);
  std::vector<bool> seen(static_cast<size_t>(next_id_), false);
  for (const auto& e : entries) {
    if (!entries_.count(e.id)) {
      std::string ids;
      int shown = 0;
      for (const auto& [id, _] : entries_) {
        if (shown++ == 16) {
          ids += ", ...";
          break;
        }
        ids += (ids.empty() ? "" : ", ") + std::to_string(id);
      }
      fail_as(ErrorKind::kBadRequest, "lora: unknown adapter id ", e.id,
              entries_.empty() ? std::string(" (no adapters are loaded)") : " (loaded ids: " + ids + ")");
    }
    if (seen[static_cast<size_t>(e.id)]) fail_as(ErrorKind::kBadRequest, "lora: adapter id ", e.id, " is listed twice");
    // Range first: converting a double beyond float's range is undefined behaviour.
    if (!std::isfinite(e.scale) || std::fabs(e.scale) > std::numeric_limits<float>::max())
      fail_as(ErrorKind::kBadRequest, "lora: scale of adapter id ", e.id, " is not a finite number");
    seen[static_cast<size_t>(e.id)] = true;
    out[static_cast<size_t>(e.id)] = static_cast<float>(e.scale);
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
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<float> s = checked(entries);
  for (auto& [id, e] : entries_) e->info.scale = s[static_cast<size_t>(id)];
}

std::shared_ptr<const runtime::LoraAdapter> AdapterRegistry::build(const std::shared_ptr<AdapterEntry>& e) {
  const auto t0 = std::chrono::steady_clock::now();
  auto terms = builder_(e->source);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.loads;
  size_t b = 0;
  while (b < RegistryStats::kLoadBuckets.size() && s > RegistryStats::kLoadBuckets[b]) ++b;
  ++stats_.load_buckets[b];
  stats_.load_seconds_sum += s;
  ++stats_.load_count;
  return terms;
}

int64_t AdapterRegistry::add(const std::string& name, const std::string& path, float scale, bool inplace) {
  refuse_if_fused(fused_);
  check_name(name);
  if (!inplace && find(name))
    fail_as(ErrorKind::kBadRequest, "The lora adapter '", name, "' has already been loaded (load_inplace replaces it)");
  return add(name, std::make_shared<const adapter::WeightAdapter>(adapter::read_weight_adapter(path)), scale, inplace);
}

int64_t AdapterRegistry::add(const std::string& name, std::shared_ptr<const adapter::WeightAdapter> adapter,
                             float scale, bool inplace) {
  refuse_if_fused(fused_);
  check_name(name);
  auto e = std::make_shared<AdapterEntry>();
  e->source = std::move(adapter);
  e->info.name = name;
  e->info.path = e->source->path;
  e->info.scale = scale;
  read_adapter_labels(*e->source, e->info);
  // Everything that can refuse runs before the entry becomes visible.
  e->info.content_digest = content_digest(e->info.path);
  auto terms = build(e);
  measure(*terms, e->info);

  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<AdapterEntry> old;
  for (const auto& [id, x] : entries_)
    if (x->info.name == name) old = x;
  if (old && !inplace)
    fail_as(ErrorKind::kBadRequest, "The lora adapter '", name, "' has already been loaded (load_inplace replaces it)");
  if (old) {
    e->info.id = old->info.id;
    e->info.generation = old->info.generation + 1;
    old->registered = false;
  } else {
    e->info.id = next_id_++;
  }
  e->terms = std::move(terms);
  e->last_used = ++clock_;
  entries_[e->info.id] = e;
  enforce_budget();
  return e->info.id;
}

bool AdapterRegistry::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->second->info.name == name) {
      it->second->registered = false;
      it->second->terms.reset();  // the running requests' references keep them until they end
      entries_.erase(it);
      return true;
    }
  return false;
}

bool AdapterRegistry::contains(int64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(id) != 0;
}

Selection AdapterRegistry::select(std::optional<int64_t> model_adapter,
                                  const std::optional<std::vector<ScaleEntry>>& lora) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<float> scales;
  if (model_adapter) {
    if (!entries_.count(*model_adapter))
      fail_as(ErrorKind::kBadRequest, "model: adapter id ", *model_adapter, " is not loaded");
    std::vector<ScaleEntry> list = lora ? *lora : std::vector<ScaleEntry>{};
    const bool listed = std::any_of(list.begin(), list.end(), [&](const ScaleEntry& s) { return s.id == *model_adapter; });
    if (!listed) list.push_back({*model_adapter, 1.0});
    scales = checked(list);
  } else if (lora) {
    scales = checked(*lora);
  } else {
    scales.assign(static_cast<size_t>(next_id_), 0.0f);
    for (const auto& [id, e] : entries_) scales[static_cast<size_t>(id)] = e->info.scale;
  }
  Selection sel;
  std::vector<std::pair<Digest, float>> pairs;
  if (fused_) {
    // The scales are in the weights (checked() refused any other configuration).
    for (const auto& [id, e] : entries_)
      if (scales[static_cast<size_t>(id)] != 0.0f) pairs.emplace_back(e->info.content_digest, scales[static_cast<size_t>(id)]);
    sel.digest = pairs_digest(pairs);
    return sel;
  }
  const int64_t now = ++clock_;
  for (const auto& [id, e] : entries_) {
    const float s = scales[static_cast<size_t>(id)];
    if (s == 0.0f) continue;
    e->last_used = now;
    sel.picks.push_back({e, id, e->info.name, s, e->info.content_digest, e->terms});
    pairs.emplace_back(e->info.content_digest, s);
  }
  sel.digest = pairs_digest(pairs);
  return sel;
}

void AdapterRegistry::make_resident(Selection& sel) {
  for (AdapterPick& p : sel.picks) {
    if (p.terms) continue;
    std::unique_lock<std::mutex> lock(mu_);
    AdapterEntry& e = *p.entry;
    if (e.terms) {
      p.terms = e.terms;
      continue;
    }
    if (e.building.valid()) {  // another request's build of the same adapter: wait for it
      auto f = e.building;
      lock.unlock();
      p.terms = f.get();
      continue;
    }
    if (!builder_) fail_as(ErrorKind::kInternal, "adapter '", e.info.name, "' has no terms and no builder");
    std::promise<std::shared_ptr<const runtime::LoraAdapter>> promise;
    e.building = promise.get_future().share();
    lock.unlock();
    std::shared_ptr<const runtime::LoraAdapter> terms;
    try {
      terms = build(p.entry);
    } catch (...) {
      lock.lock();
      e.building = {};
      promise.set_exception(std::current_exception());
      throw;
    }
    lock.lock();
    if (e.registered) {
      e.terms = terms;
      e.last_used = ++clock_;
    }
    e.building = {};
    promise.set_value(terms);
    p.terms = std::move(terms);
    enforce_budget();
  }
}

void AdapterRegistry::enforce_budget() {
  const auto over = [&] {
    int64_t n = 0, bytes = 0;
    for (const auto& [id, e] : entries_)
      if (e->terms) {
        ++n;
        bytes += e->info.bytes;
      }
    return (limits_.max_adapters > 0 && n > limits_.max_adapters) || (limits_.max_bytes > 0 && bytes > limits_.max_bytes);
  };
  while (over()) {
    // The least recently used idle adapter: built, held by nothing but this registry (no running or
    // queued request: those hold the terms too, and only select() under this mutex hands out new
    // references), and not applied by default.
    std::shared_ptr<AdapterEntry> victim;
    for (const auto& [id, e] : entries_)
      if (e->terms && e->terms.use_count() == 1 && e->info.scale == 0.0f &&
          (!victim || e->last_used < victim->last_used))
        victim = e;
    if (!victim) break;  // everything resident is in use: over budget until requests end
    victim->terms.reset();
    ++stats_.evictions;
  }
}

void AdapterRegistry::trim() {
  std::lock_guard<std::mutex> lock(mu_);
  enforce_budget();
}

RegistryStats AdapterRegistry::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  RegistryStats s = stats_;
  s.resident_bytes = 0;
  for (const auto& [id, e] : entries_)
    if (e->terms) s.resident_bytes += e->info.bytes;
  return s;
}

}  // namespace graft::engine
