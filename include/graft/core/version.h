// graft's version: what `graft --version`, /props' build_info and GET /version report (the Python
// package's is in pyproject.toml).
#pragma once

namespace graft {

inline constexpr const char* kVersion = "0.1.0";

}  // namespace graft
