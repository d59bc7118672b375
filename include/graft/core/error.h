// Errors: graft's library code throws graft::Error with a message that names the file, tensor or
// field at fault and what was expected, and a kind, so that edges map errors without parsing text
// (the CLI to exit codes, the server to HTTP statuses). Edges translate it; nothing aborts.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace graft {

// What went wrong, as an edge needs to know it. Every kind is a refusal: nothing was changed.
enum class ErrorKind {
  kBadInput,     // a file (model, config, tokenizer, adapter) is malformed or inconsistent
  kBadRequest,   // a caller's argument or request field is wrong (CLI option, JSON body)
  kUnsupported,  // well-formed but not implemented (an adapter type, a quantization, a flag combination)
  kLimit,        // a resource budget would be exceeded (context, queue, size, steps, depth)
  kIo,           // the operating system refused (open, read, write, rename, disk full)
  kInternal,     // a bug or an unexpected foreign exception
};

// A stable lowercase name for logs and tests ("bad_input", "bad_request", ...).
const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, ErrorKind kind = ErrorKind::kBadInput)
      : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Builds a message from streamable parts: fail("file '", path, "': expected ", n, " bytes").
// The kind is kBadInput: most of graft's checks are about the files it reads.
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

// The same with an explicit kind: fail_as(ErrorKind::kBadRequest, "--ctx-size: ...").
template <typename... Parts>
[[noreturn]] void fail_as(ErrorKind kind, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str(), kind);
}

}  // namespace graft
