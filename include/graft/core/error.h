// Errors: graft's library code throws graft::Error with a message that names the file, tensor or
// field at fault and what was expected. Edges (CLI, server) translate it; nothing aborts.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace graft {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Builds a message from streamable parts: fail("file '", path, "': expected ", n, " bytes").
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

}  // namespace graft
