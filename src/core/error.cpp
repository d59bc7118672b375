#include "graft/core/error.h"

namespace graft {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadInput: return "bad_input";
    case ErrorKind::kBadRequest: return "bad_request";
    case ErrorKind::kUnsupported: return "unsupported";
    case ErrorKind::kLimit: return "limit";
    case ErrorKind::kIo: return "io";
    case ErrorKind::kInternal: return "internal";
  }
  return "internal";
}

}  // namespace graft
