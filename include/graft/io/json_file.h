// Reading files from strangers: regular files only (a FIFO or device never blocks the reader),
// a size limit before anything is read, a nesting limit before JSON is parsed, and excerpts (never
// whole values) in error messages. Every JSON file graft reads goes through here.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "graft/core/error.h"

namespace graft::io {

constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;     // config.json, adapter_config.json, indexes
constexpr uint64_t kMaxTokenizerBytes = uint64_t{256} << 20;  // tokenizer.json (the largest are ~30 MiB)
constexpr int kMaxJsonDepth = 256;                             // real files nest < 20 levels

// The whole content of `path`, which must be a regular file of at most `max_bytes` bytes.
// `what` names the file's role in errors ("config", "tokenizer file"). OS failures are kIo, a
// file over the limit is kLimit.
std::string read_regular_file(const std::string& path, uint64_t max_bytes, const std::string& what);

// Refuses JSON text nested deeper than kMaxJsonDepth (a kLimit error naming `where`), before a
// parser or a printer recurses into it.
void check_json_nesting(std::string_view text, const std::string& where);

// A value rendered for an error message: at most `max_chars` characters, then "...".
std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 80);
std::string json_excerpt(const nlohmann::ordered_json& v, size_t max_chars = 80);
// Text for an error message: at most `max_chars` bytes, then "...".
std::string excerpt(std::string_view s, size_t max_chars = 80);

// Parses JSON text (nesting checked first); errors name `where` (a file, usually).
template <typename Json = nlohmann::json>
Json parse_json_text(std::string_view text, const std::string& where) {
  check_json_nesting(text, where);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    fail("'", where, "' is not valid JSON (", e.what(), ")");
  }
}

// read_regular_file + parse_json_text.
template <typename Json = nlohmann::json>
Json read_json_file(const std::string& path, uint64_t max_bytes = kMaxConfigBytes, const std::string& what = "file") {
  return parse_json_text<Json>(read_regular_file(path, max_bytes, what), path);
}

}  // namespace graft::io
