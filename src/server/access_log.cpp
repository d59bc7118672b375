#include "server/access_log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "graft/core/error.h"

namespace graft::server {

namespace {

using Clock = std::chrono::steady_clock;

struct ThreadNote {
  AccessNote note;
  Clock::time_point start = Clock::now();
};
thread_local ThreadNote current;

// UTC, to the millisecond: "2026-12-06T22:10:01.123Z".
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[40];
  std::snprintf(b, sizeof b, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return b;
}

}  // namespace

LogFormat parse_log_format(const std::string& name) {
  if (name == "text") return LogFormat::Text;
  if (name == "json") return LogFormat::Json;
  if (name == "none") return LogFormat::None;
  fail_as(ErrorKind::kBadRequest, "--log-format '", name, "': expected text, json or none");
}

AccessNote& access_note() { return current.note; }

void start_access_note() { current = ThreadNote{}; }

void write_access_line(const httplib::Request& q, const httplib::Response& r, LogFormat format) {
  if (format == LogFormat::None) return;
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - current.start).count();
  const AccessNote& n = current.note;
  std::string line;
  if (format == LogFormat::Json) {
    nlohmann::ordered_json j{{"time", utc_now()}, {"method", q.method}, {"path", q.path}, {"status", r.status}};
    if (n.prompt_tokens >= 0) {
      j["adapters"] = n.adapters;
      j["prompt_tokens"] = n.prompt_tokens;
      j["generated_tokens"] = n.generated_tokens;
    }
    j["ms"] = static_cast<int64_t>(ms + 0.5);
    line = j.dump();
  } else {
    line = utc_now() + " " + q.method + " " + q.path + " " + std::to_string(r.status);
    if (n.prompt_tokens >= 0)
      line += " adapters=" + (n.adapters.empty() ? std::string("-") : n.adapters) +
              " prompt=" + std::to_string(n.prompt_tokens) + " generated=" + std::to_string(n.generated_tokens);
    line += " ms=" + std::to_string(static_cast<int64_t>(ms + 0.5));
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace graft::server
