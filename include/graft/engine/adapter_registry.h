// The adapters an engine knows, under stable ids, with their live default scales, and the rules that
// turn a request's adapter choice into what its forward passes run.
//
// Unfused (graft generate, graft serve): adapters are added and removed at run time (add/remove),
// each an entry with its files memory-mapped (the WeightAdapter) and its terms built only while
// resident; the startup adapters are its first entries (ids = positions). A request's choice
// becomes a Selection (select): the entries it uses at non-zero scales, each holding its terms alive
// (shared_ptr) for as long as the request runs, so removing or evicting an adapter never breaks a
// generation and frees its memory when the last user ends. Its (adapter, scale) pairs are what a
// sequence carries to the forward pass. A residency budget (max adapters and/or bytes of built
// terms) drops the least recently used idle adapters' terms; make_resident rebuilds them (one build
// per adapter at a time, however many requests wait for it).
// Fused (--lora-fuse): the startup adapters were baked into the weights at their scales; the
// registry lists them and refuses any other configuration.
// Identity is content: an entry's digest is SHA-256 of its files, and a selection's digest (the
// prompt-cache key) is SHA-256 of its (adapter digest, scale) pairs, so a reload under the same name
// with other files can never reuse KV computed under the old weights, and a crafted collision would
// have to break SHA-256.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graft/adapter/weight_adapter.h"
#include "graft/io/hash.h"
#include "graft/runtime/lora.h"

namespace graft::engine {

using Digest = io::Sha256Digest;
std::string digest_hex(const Digest& d);

// SHA-256 over the bytes of a file, or over every regular file of a directory in name order (each
// name, a NUL, its length as 8 bytes, its bytes). Throws kIo naming the file that cannot be read.
Digest content_digest(const std::string& path);

struct AdapterInfo {
  int64_t id = 0;
  std::string name;              // unique among the registered adapters (the OpenAI `model` name)
  std::string path;
  float scale = 0.0f;            // the live default scale
  std::string task_name;         // GGUF adapter metadata (empty for other formats)
  std::string prompt_prefix;
  Digest content_digest{};       // of the adapter's files' bytes: identity by content, not path
  int64_t generation = 1;        // 1, then +1 at each in-place reload under the same name
  int64_t rank = 0;              // largest rank of its terms
  int64_t terms = 0;             // unfused terms (known once built)
  int64_t bytes = 0;             // bytes of its built terms (known once built)
  bool resident = false;         // terms built (fused registries: always)
  bool pinned = false;           // never evicted now: a non-zero default scale
};

// Copies the labels llama-server reports per adapter (task_name, prompt_prefix: GGUF adapter
// metadata, under either spelling) from `adapter` into `info`.
void read_adapter_labels(const adapter::WeightAdapter& adapter, AdapterInfo& info);

struct ScaleEntry {
  int64_t id = 0;
  double scale = 0.0;
};

// The residency budget of a dynamic registry (0: no limit).
struct ResidencyLimits {
  int64_t max_adapters = 0;  // --max-loras-resident
  int64_t max_bytes = 0;     // --lora-memory
};

// Counters for /metrics.
struct RegistryStats {
  int64_t loads = 0;       // term builds (registration, and each rebuild after an eviction)
  int64_t evictions = 0;   // resident adapters dropped to mapped-only by the budget
  int64_t resident_bytes = 0;  // derived by stats() from the resident entries
  // Build durations as a histogram: builds of at most kLoadBuckets[i] seconds (and more than the
  // bucket before) in load_buckets[i]; the last slot holds the longer ones.
  static constexpr std::array<double, 13> kLoadBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                          0.25,  0.5,    1,     2.5,  5,     10};
  std::array<int64_t, 14> load_buckets{};
  double load_seconds_sum = 0;
  int64_t load_count = 0;
};

struct AdapterEntry;  // adapter_registry.cpp

// One adapter a request runs with: which entry, at what scale, and its terms (null until resident).
struct AdapterPick {
  std::shared_ptr<AdapterEntry> entry;
  int64_t id = 0;
  std::string name;
  float scale = 0.0f;
  Digest digest{};
  std::shared_ptr<const runtime::LoraAdapter> terms;
};

// A request's adapters, resolved at admission (its snapshot): the picks at non-zero scales in id
// order, and the cache key of what they compute.
struct Selection {
  std::vector<AdapterPick> picks;
  Digest digest{};
  bool ready() const;                       // every pick's terms present
  std::vector<std::string> names() const;
  // The (adapter, scale) pairs a sequence runs with, in id order (after make_resident).
  std::vector<runtime::ScaledAdapter> adapters() const;
};

class AdapterRegistry {
 public:
  // What a registry uses to build an adapter's terms against the engine's model (binding and every
  // check included): it throws what the build refuses.
  using Builder = std::function<std::shared_ptr<const runtime::LoraAdapter>(std::shared_ptr<const adapter::WeightAdapter>)>;

  // Unfused, empty: add() registers adapters.
  AdapterRegistry(Builder builder, ResidencyLimits limits);
  // Fused: these adapters are in the weights at their scales (ids = positions), which stay fixed.
  explicit AdapterRegistry(std::vector<AdapterInfo> fused);
  ~AdapterRegistry();

  size_t size() const;  // registered adapters
  bool fused() const { return fused_; }
  const ResidencyLimits& limits() const { return limits_; }

  // The adapters in id order with their live default scales (GET /lora-adapters).
  std::vector<AdapterInfo> list() const;
  std::optional<int64_t> find(const std::string& name) const;

  // Reads, binds and builds the adapter at `path` (every check before it becomes visible; a
  // refusal registers nothing), then registers it under `name` with default scale `scale`. An
  // existing name is kBadRequest ("already loaded") unless `inplace`: then the entry is replaced
  // (same id, generation + 1; requests admitted before keep the old weights). Returns its id.
  // May drop other adapters' terms to stay within the budget.
  int64_t add(const std::string& name, const std::string& path, float scale, bool inplace = false);
  // The same for an adapter already read (startup adapters).
  int64_t add(const std::string& name, std::shared_ptr<const adapter::WeightAdapter> adapter, float scale,
              bool inplace = false);
  // Unregisters; false if no adapter has that name. Requests using it keep it until they end.
  bool remove(const std::string& name);
  bool contains(int64_t id) const;  // registered now (ids are never reused after a remove)
  // A request's adapters (under fusion: the configuration in force, with no terms): `model_adapter` (an id, from the OpenAI `model` name) at scale 1, with the
  // request's own `lora` list overriding scales (including the named adapter's); without a model
  // adapter the `lora` list alone (unlisted ids 0), else the defaults. Unknown or repeated ids and
  // non-finite scales are kBadRequest. Marks the chosen adapters used now (LRU).
  Selection select(std::optional<int64_t> model_adapter, const std::optional<std::vector<ScaleEntry>>& lora);
  // Builds the terms of every pick that has none (waiting for a build already under way instead of
  // starting another), then enforces the budget. Throws what a build throws.
  void make_resident(Selection& selection);
  // Enforces the budget now (after requests end, their adapters may have become idle).
  void trim();
  RegistryStats stats() const;

  // Listed ids take their scale, unlisted ids become 0 (POST /lora-adapters). Everything is
  // checked first; a refusal changes nothing: an unknown or repeated id or a non-finite scale is
  // kBadRequest, and under fusion anything but the configuration in force is kUnsupported.
  void set_defaults(const std::vector<ScaleEntry>& entries);

 private:
  std::vector<float> checked(const std::vector<ScaleEntry>& entries) const;  // needs mu_
  std::shared_ptr<AdapterEntry> entry(int64_t id) const;                      // needs mu_
  void enforce_budget();                                                      // needs mu_
  std::shared_ptr<const runtime::LoraAdapter> build(const std::shared_ptr<AdapterEntry>& e);

  std::map<int64_t, std::shared_ptr<AdapterEntry>> entries_;  // by id
  int64_t next_id_ = 0;
  int64_t clock_ = 0;  // LRU time
  bool fused_ = false;
  std::vector<float> fused_scales_;  // the configuration baked in (fused only)
  Builder builder_;
  ResidencyLimits limits_;
  RegistryStats stats_;
  mutable std::mutex mu_;
};

}  // namespace graft::engine
