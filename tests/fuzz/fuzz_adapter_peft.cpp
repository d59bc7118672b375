// Adapter importer (peft layout): format detection, config fields, key classification, factor
// shapes and values, scale resolution; then the adapter's description (as inspect prints it).
#include "fuzz_adapter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  graft::fuzz::ScratchDir dir;
  const std::string path = graft::fuzz::write_adapter(dir, data, size, "peft");
  graft::fuzz::expect_graft_errors_only([&] {
    graft::adapter::WeightAdapter a = graft::adapter::read_weight_adapter(path);
    (void)graft::adapter::describe_adapter(a);
  });
  return 0;
}
