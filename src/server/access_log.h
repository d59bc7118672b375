// One access-log line per HTTP request on stderr (--log-format text|json), for a person tailing the
// server or a log pipeline: time, method and path, status, the adapters a completion ran with,
// prompt and generated tokens, and the milliseconds from the request's headers to its last byte.
// The route handlers note what only they know (adapters, token counts) in the connection thread's
// note; cpp-httplib's logger writes the line once the response is done (a streamed response's
// provider runs on the same connection thread, so its counts are noted before the line).
#pragma once
#include <httplib.h>

#include <cstdint>
#include <string>

namespace graft::server {

enum class LogFormat { Text, Json, None };
LogFormat parse_log_format(const std::string& name);  // "text" | "json" | "none"; kBadRequest otherwise

struct AccessNote {
  std::string adapters;  // "pirate:1,mlx:0.5"; empty: the base model
  int64_t prompt_tokens = -1, generated_tokens = -1;  // -1: not a completion
};

// The note of the request this thread is serving (reset by start_access_note).
AccessNote& access_note();
// At the start of each request (the pre-routing handler): a fresh note, the clock started.
void start_access_note();
// The line for a finished request (the server's logger).
void write_access_line(const httplib::Request& q, const httplib::Response& r, LogFormat format);

}  // namespace graft::server
