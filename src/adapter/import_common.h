// Shared pieces of the adapter importers (import_*.cpp): config reading, tensor checks, key
// classification, transposes, PEFT pattern resolution and the LoKr factor reader. Internal to
// src/adapter; nothing here is part of the public API.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "graft/adapter/weight_adapter.h"
#include "graft/core/convert.h"  // transpose_2d, used by every importer
#include "graft/core/error.h"
#include "graft/io/safetensors.h"

namespace graft::adapter::detail {

// Insertion-ordered: PEFT's rank_pattern / alpha_pattern resolve by dict order (first match wins).
using Json = nlohmann::ordered_json;

bool ends_with(std::string_view s, std::string_view suffix);
bool starts_with(std::string_view s, std::string_view prefix);
bool file_exists(const std::string& path);
bool dir_exists(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

// Parses a JSON object file; errors name the file.
Json read_json_object(const std::string& path);
// True for null, false, "", [] and {} (a config field that is "not set").
bool json_unset(const Json& v);
// A short rendering of a value for messages (truncated).
std::string json_brief(const Json& v);
// Shortest round-trip rendering of a number ("20", "0.5", "2.8284271247461903").
std::string num_str(double v);
// A finite number; errors name the file and field.
double json_number(const Json& v, const std::string& file, const std::string& field);
// A positive integer (accepts 16 or 16.0); errors name the file and field.
int64_t json_positive_int(const Json& v, const std::string& file, const std::string& field);

// Reads a tensor and checks it: dtype F32/F16/BF16 and every value finite (NaN/Inf refused).
// Errors name the file and the key. The result is a zero-copy view into the mapping.
Tensor read_checked(const io::SafetensorsFile& f, const std::string& key);
// The single value of a 0-d (or one-element) tensor, checked as above.
double read_scalar(const io::SafetensorsFile& f, const std::string& key);

// Key classification by suffix: the longest suffix in `suffixes` that the key ends with (and that
// leaves a non-empty module name). Returns the index into `suffixes` or -1.
struct SplitKey {
  std::string module;
  int suffix = -1;
};
SplitKey split_key(const std::string& key, const std::vector<std::string_view>& suffixes);

// LoKr factors of one module: role → tensor key (roles "lokr_w1", "lokr_w1_a", ..., "alpha").
using RoleKeys = std::map<std::string, std::string>;
bool is_lokr_role(std::string_view role);
// Reads and validates the LoKr factors of one module (2-D factors, complete low-rank pairs, inner
// dimensions agreeing, w1 either full or factored, likewise w2). Scale is left at 1.
KroneckerUpdate read_kronecker(const io::SafetensorsFile& f, const std::string& module, const RoleKeys& roles);
// The low-rank dimension LyCORIS and ComfyUI divide by: rows of w1_b when w1 is factored,
// overwritten by rows of w2_b when w2 is factored; nullopt when both factors are full.
std::optional<int64_t> lycoris_lokr_dim(const KroneckerUpdate& u);
// Reads and validates the LoHa factors of one module (roles "hada_w1_a", "hada_w1_b", "hada_w2_a",
// "hada_w2_b": w1a [out, r1], w1b [r1, in], w2a [out, r2], w2b [r2, in]). Scale is left at 1.
HadamardUpdate read_hadamard(const io::SafetensorsFile& f, const std::string& module, const RoleKeys& roles);
// ΔW shape of a Kronecker update.
Shape kronecker_shape(const KroneckerUpdate& u);

// PEFT get_pattern_key: first key (dict order) whose regex `(.*\.)?(<key>)$` matches `name`.
// Keys are compiled once; an invalid regex is an error naming the field and key.
class PatternTable {
 public:
  PatternTable() = default;
  PatternTable(const Json& dict, const std::string& file, const std::string& field);
  // The value of the first matching key, or nullopt. Records which keys matched.
  std::optional<double> resolve(const std::string& name);
  // Throws naming the first key that matched no module (PEFT ignores such keys silently).
  void require_all_used(const std::string& file) const;
  bool empty() const { return entries_.empty(); }

 private:
  struct Entry;
  std::vector<std::shared_ptr<Entry>> entries_;
  std::string field_, file_;
};

// Python's re.fullmatch(pattern, name) (PEFT's target_modules given as one string), bounded as the
// pattern tables are; an invalid pattern is an error naming the file and field.
bool regex_full_match(const std::string& pattern, const std::string& name, const std::string& file,
                      const std::string& field);

// The resolved scale of an update (nullopt for kinds without one, such as a replacement).
std::optional<double> update_scale(const Update& u);

// Sorts targets by (module, param) and refuses two updates for one parameter, and any update
// whose resolved scale is not finite (lora_alpha 1e308 / r overflows float).
void finalize_targets(WeightAdapter& out, const std::string& file);

// Format importers.
WeightAdapter import_mlx(const std::string& dir, const std::string& config_path, const Json& cfg);
WeightAdapter import_peft(const std::string& dir, const std::string& config_path, const Json& cfg);
WeightAdapter import_single_file(const std::string& path);
WeightAdapter import_gguf(const std::string& path);

}  // namespace graft::adapter::detail
