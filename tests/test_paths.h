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
// A fixture file's name as a test parameter's name: "llama_f32_lora.q8_0.gguf" -> "llama_f32_lora_q8_0"
// (the five-character extension dropped, dots made underscores).
inline std::string param_name_of_file(std::string file) {
  file = file.substr(0, file.size() - 5);
  for (char& ch : file)
    if (ch == '.') ch = '_';
  return file;
}

}  // namespace graft::test
