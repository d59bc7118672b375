// Adapter layouts from one fuzz input: parts are [adapter_config.json, weights.safetensors].
#pragma once
#include "fuzz_util.h"
#include "graft/adapter/describe.h"
#include "graft/adapter/weight_adapter.h"

namespace graft::fuzz {

// Writes the input as an adapter of `layout` ("peft", "mlx" or "single") and returns its path.
inline std::string write_adapter(const ScratchDir& dir, const uint8_t* data, size_t size, const std::string& layout) {
  auto parts = split_parts(data, size, 2);
  if (layout == "single") return dir.write("adapter.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  dir.write("adapter_config.json", parts[0]);
  dir.write(layout == "mlx" ? "adapters.safetensors" : "adapter_model.safetensors", parts[1]);
  return dir.path();
}

}  // namespace graft::fuzz
