// safetensors reader: header JSON, dtypes, shapes, offsets; then every tensor read and converted.
#include "fuzz_util.h"
#include "graft/core/convert.h"
#include "graft/io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  graft::fuzz::MemFile f(data, size);
  graft::fuzz::expect_graft_errors_only([&] {
    auto st = graft::io::SafetensorsFile::open(f.path());
    for (const auto& e : st->entries()) {
      graft::Tensor t = st->tensor(e.name);
      if (t.numel() <= (1 << 16) && (t.dtype == graft::DType::F32 || t.dtype == graft::DType::F16 || t.dtype == graft::DType::BF16))
        (void)graft::to_f32(t);
    }
  });
  return 0;
}
