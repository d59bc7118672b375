// Where tests find committed fixtures and downloaded models.
#pragma once
#include <cstdlib>
#include <string>

namespace graft::test {

inline std::string source_dir() { return GRAFT_SOURCE_DIR; }
inline std::string fixture(const std::string& rel) { return source_dir() + "/tests/fixtures/" + rel; }
// The SmolLM2 GGUF fetched by `make models` (tests that need it skip with a message if absent;
// `make test` always fetches it first, so in CI they run).
inline std::string smollm2_gguf() { return source_dir() + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

}  // namespace graft::test
