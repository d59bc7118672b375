// Format detection (read_weight_adapter) and the helpers every importer shares.
#include "import_common.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "graft/core/ascii.h"
#include "graft/io/json_file.h"

#include <new>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace graft::adapter {

const char* format_name(AdapterFormat f) {
  switch (f) {
    case AdapterFormat::MlxLm: return "mlx-lm";
    case AdapterFormat::Peft: return "peft";
    case AdapterFormat::Kohya: return "kohya";
    case AdapterFormat::Lycoris: return "lycoris";
    case AdapterFormat::Gguf: return "gguf";
  }
  return "?";
}

const char* update_kind(const Update& u) {
  switch (u.index()) {
    case 0: return "lora";
    case 1: return "lokr";
    case 2: return "diff";
    case 3: return "replace";
    case 4: return "loha";
    default: return "dora";
  }
}

namespace detail {

namespace fs = std::filesystem;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool file_exists(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}
bool dir_exists(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}
std::string join_path(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

Json read_json_object(const std::string& path) {
  Json j = io::read_json_file<Json>(path, io::kMaxConfigBytes, "adapter config");
  if (!j.is_object()) fail("'", path, "': expected a JSON object at the top level");
  return j;
}

bool json_unset(const Json& v) {
  if (v.is_null()) return true;
  if (v.is_boolean()) return !v.get<bool>();
  if (v.is_string()) return v.get<std::string>().empty();
  if (v.is_array() || v.is_object()) return v.empty();
  return false;
}

std::string json_brief(const Json& v) { return io::json_excerpt(v, 80); }

std::string num_str(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

double json_number(const Json& v, const std::string& file, const std::string& field) {
  if (!v.is_number()) fail("'", file, "': field '", field, "' is ", json_brief(v), "; expected a number");
  double d = v.get<double>();
  if (!std::isfinite(d)) fail("'", file, "': field '", field, "' is not finite");
  return d;
}

int64_t json_positive_int(const Json& v, const std::string& file, const std::string& field) {
  double d = v.is_number() ? v.get<double>() : NAN;
  if (!(d >= 1) || d != std::floor(d) || d > 1e12)
    fail("'", file, "': field '", field, "' is ", json_brief(v), "; expected a positive integer");
  return static_cast<int64_t>(d);
}

Tensor read_checked(const io::SafetensorsFile& f, const std::string& key) {
  Tensor t = f.tensor(key);
  if (t.dtype != DType::F32 && t.dtype != DType::F16 && t.dtype != DType::BF16)
    fail_as(ErrorKind::kUnsupported, "'", f.path(), "': tensor '", key, "' has dtype ", dtype_name(t.dtype),
         "; expected F32, F16 or BF16 (quantized and integer adapter tensors are not read)");
  constexpr int64_t kChunk = 1 << 16;
  std::vector<float> buf(static_cast<size_t>(std::min<int64_t>(kChunk, std::max<int64_t>(t.numel(), 1))));
  const int64_t n = t.numel();
  const int64_t esize = dtype_bytes(t.dtype, 1);
  for (int64_t i = 0; i < n; i += kChunk) {
    int64_t m = std::min(kChunk, n - i);
    convert_to_f32(t.dtype, static_cast<const uint8_t*>(t.data) + i * esize, buf.data(), m);
    for (int64_t j = 0; j < m; ++j)
      if (!std::isfinite(buf[static_cast<size_t>(j)]))
        fail("'", f.path(), "': tensor '", key, "' holds a non-finite value (", buf[static_cast<size_t>(j)],
             " at element ", i + j, "); expected finite values");
  }
  return t;
}

double read_scalar(const io::SafetensorsFile& f, const std::string& key) {
  Tensor t = read_checked(f, key);
  if (t.numel() != 1 || t.shape.size() > 1)
    fail("'", f.path(), "': tensor '", key, "' has shape ", shape_str(t.shape), "; expected a scalar (shape [])");
  float v = 0;
  convert_to_f32(t.dtype, t.data, &v, 1);
  return v;
}

SplitKey split_key(const std::string& key, const std::vector<std::string_view>& suffixes) {
  SplitKey best;
  size_t best_len = 0;
  for (size_t i = 0; i < suffixes.size(); ++i) {
    const auto& s = suffixes[i];
    if (s.size() > best_len && key.size() > s.size() && ends_with(key, s)) {
      best.suffix = static_cast<int>(i);
      best.module = key.substr(0, key.size() - s.size());
      best_len = s.size();
    }
  }
  return best;
}

// Keys are Python regular expressions written by strangers: PCRE2 (the closest engine to Python's
// re) runs them with bounded work, so `(.*)*(.*)*x` or a 100 kB key is an error, never a hang or a
// stack overflow (std::regex recursed per character).
namespace {
constexpr uint32_t kPatternMatchLimit = 1'000'000;  // backtracking steps per match
constexpr uint32_t kPatternDepthLimit = 10'000;     // nested backtracking frames per match
constexpr uint32_t kPatternHeapLimitKiB = 16 * 1024;

std::string pcre2_message(int rc) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(rc, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}
}  // namespace

struct PatternTable::Entry {
  std::string key;
  pcre2_code* code = nullptr;
  double value = 0;
  bool used = false;
  ~Entry() { pcre2_code_free(code); }
};

PatternTable::PatternTable(const Json& dict, const std::string& file, const std::string& field)
    : field_(field), file_(file) {
  if (dict.is_null()) return;
  if (!dict.is_object()) fail("'", file, "': field '", field, "' is ", json_brief(dict), "; expected an object");
  for (auto it = dict.begin(); it != dict.end(); ++it) {
    auto e = std::make_shared<Entry>();
    e->key = it.key();
    e->value = json_number(it.value(), file, field + "." + io::excerpt(it.key()));
    // PEFT: re.match(rf"(.*\.)?({key})$", name); matching is anchored at the start below.
    const std::string pattern = "(.*\\.)?(" + e->key + ")$";
    int err = 0;
    PCRE2_SIZE off = 0;
    e->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                            &off, nullptr);
    if (!e->code)
      fail("'", file, "': field '", field, "' key '", io::excerpt(e->key),
           "' is not a regular expression graft can compile (", pcre2_message(err), ")");
    entries_.push_back(std::move(e));
  }
}

std::optional<double> PatternTable::resolve(const std::string& name) {
  // re.match + `$`: the whole name must match (module names hold no newline). Every matching key
  // is marked used; the first in dict order decides.
  struct Context {
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    ~Context() { pcre2_match_context_free(ctx); }
  } mc;
  if (!mc.ctx) throw std::bad_alloc();
  pcre2_set_match_limit(mc.ctx, kPatternMatchLimit);
  pcre2_set_depth_limit(mc.ctx, kPatternDepthLimit);
  pcre2_set_heap_limit(mc.ctx, kPatternHeapLimitKiB);
  std::optional<double> first;
  for (auto& e : entries_) {
    struct Data {
      pcre2_match_data* md;
      ~Data() { pcre2_match_data_free(md); }
    } data{pcre2_match_data_create_from_pattern(e->code, nullptr)};
    if (!data.md) throw std::bad_alloc();
    const int rc = pcre2_match(e->code, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, PCRE2_ANCHORED,
                               data.md, mc.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) continue;
    if (rc < 0)
      fail_as(rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_HEAPLIMIT
                  ? ErrorKind::kLimit
                  : ErrorKind::kBadInput,
              "'", file_, "': field '", field_, "' key '", io::excerpt(e->key), "' against module '", io::excerpt(name),
              "': ", pcre2_message(rc), " (the pattern backtracks too much; graft bounds the work per match)");
    e->used = true;
    if (!first) first = e->value;
  }
  return first;
}

bool regex_full_match(const std::string& pattern, const std::string& name, const std::string& file,
                      const std::string& field) {
  int err = 0;
  PCRE2_SIZE off = 0;
  struct Code {
    pcre2_code* c;
    ~Code() { pcre2_code_free(c); }
  } code{pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                       PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &err, &off, nullptr)};
  if (!code.c)
    fail("'", file, "': field '", field, "' is \"", io::excerpt(pattern),
         "\", which is not a regular expression graft can compile (", pcre2_message(err), ")");
  struct Context {
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    pcre2_match_data* md = nullptr;
    ~Context() {
      pcre2_match_data_free(md);
      pcre2_match_context_free(ctx);
    }
  } mc;
  mc.md = pcre2_match_data_create_from_pattern(code.c, nullptr);
  if (!mc.ctx || !mc.md) throw std::bad_alloc();
  pcre2_set_match_limit(mc.ctx, kPatternMatchLimit);
  pcre2_set_depth_limit(mc.ctx, kPatternDepthLimit);
  pcre2_set_heap_limit(mc.ctx, kPatternHeapLimitKiB);
  const int rc = pcre2_match(code.c, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, 0, mc.md, mc.ctx);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0)
    fail_as(ErrorKind::kLimit, "'", file, "': field '", field, "' against module '", io::excerpt(name), "': ",
            pcre2_message(rc), " (the pattern backtracks too much; graft bounds the work per match)");
  return true;
}

void PatternTable::require_all_used(const std::string& file) const {
  for (const auto& e : entries_)
    if (!e->used)
      fail("'", file, "': field '", field_, "' key '", io::excerpt(e->key),
           "' matches no module of the adapter (PEFT ignores such keys silently; anchored or prefix-qualified keys "
           "never match); expected a key matching `(.*\\.)?(<key>)$` against a module name");
}

std::optional<double> update_scale(const Update& u) {
  return std::visit(
      [](const auto& x) -> std::optional<double> {
        if constexpr (requires { x.scale; }) return static_cast<double>(x.scale);
        return std::nullopt;
      },
      u);
}

void finalize_targets(WeightAdapter& out, const std::string& file) {
  for (const auto& t : out.targets)
    for (const Update* u : {&t.update, t.transposed ? &*t.transposed : nullptr})
      if (u)
        if (auto s = update_scale(*u); s && !std::isfinite(*s))
          fail("'", file, "': module '", io::excerpt(t.module), "' resolves to scale ", *s,
               " (alpha / rank or the configured scale overflows a float); expected a finite scale");
  std::stable_sort(out.targets.begin(), out.targets.end(), [](const AdapterTarget& x, const AdapterTarget& y) {
    return std::tie(x.module, x.param) < std::tie(y.module, y.param);
  });
  for (size_t i = 1; i < out.targets.size(); ++i) {
    const auto& p = out.targets[i - 1];
    const auto& q = out.targets[i];
    if (p.module == q.module && p.param == q.param) {
      std::string keys;
      for (const auto* t : {&p, &q})
        for (const auto& k : t->keys) keys += (keys.empty() ? "'" : ", '") + k + "'";
      fail("'", file, "': module '", p.module, "' (", p.param, ") has two updates (", update_kind(p.update), " and ",
           update_kind(q.update), ", tensors ", keys, "); expected at most one update per parameter");
    }
  }
}

}  // namespace detail

namespace {

const char* kWhatGraftReads =
    "graft reads: a PEFT directory (adapter_config.json with peft_type LORA or LOKR + adapter_model.safetensors), "
    "an mlx-lm adapter directory (adapter_config.json with fine_tune_type/lora_parameters + adapters.safetensors), "
    "a single ComfyUI/kohya/A1111/LyCORIS .safetensors file (lora_up/lora_down/alpha, diff, diff_b, set_weight, "
    "lokr_*), or a llama.cpp GGUF LoRA adapter (.gguf from convert_lora_to_gguf.py)";

}  // namespace

WeightAdapter read_weight_adapter(const std::string& path) {
  using namespace detail;
  if (dir_exists(path)) {
    const std::string cfg_path = join_path(path, "adapter_config.json");
    if (!file_exists(cfg_path))
      fail("'", path, "': directory has no adapter_config.json; ", kWhatGraftReads,
           " (pass the .safetensors file itself for single-file formats)");
    Json cfg = read_json_object(cfg_path);
    if (cfg.contains("peft_type")) return import_peft(path, cfg_path, cfg);
    if (cfg.contains("fine_tune_type") || cfg.contains("lora_parameters")) return import_mlx(path, cfg_path, cfg);
    fail("'", cfg_path, "': neither 'peft_type' (PEFT) nor 'fine_tune_type'/'lora_parameters' (mlx-lm) is present; ",
         kWhatGraftReads);
  }
  if (!file_exists(path)) fail("'", path, "': no such file or directory; ", kWhatGraftReads);
  const std::string lower = ascii_lower(std::filesystem::path(path).filename().string());
  if (ends_with(lower, ".safetensors")) return import_single_file(path);
  if (ends_with(lower, ".gguf")) return import_gguf(path);
  for (const char* ext : {".bin", ".pt", ".pth", ".ckpt", ".pkl"})
    if (ends_with(lower, ext))
      fail_as(ErrorKind::kUnsupported, "'", path, "': pickle checkpoints are not read; convert to safetensors");
  if (lower == "adapter_config.json")
    fail("'", path, "': pass the adapter directory, not its config file; ", kWhatGraftReads);
  fail("'", path, "': unrecognized adapter file (expected a .safetensors or .gguf file or an adapter directory); ",
       kWhatGraftReads);
}

}  // namespace graft::adapter
