// config.json: bounded JSON parse, every field range-checked, RoPE frequencies computed.
#include "fuzz_util.h"
#include "graft/io/json_file.h"
#include "graft/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  graft::fuzz::expect_graft_errors_only([&] {
    auto j = graft::io::parse_json_text(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    graft::model::ModelConfig c = graft::model::parse_hf_config(j, "config.json");
    (void)graft::model::rope_inv_freq(c);
  });
  return 0;
}
