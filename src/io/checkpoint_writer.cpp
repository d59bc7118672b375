#include "graft/io/checkpoint_writer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "graft/core/convert.h"
#include "graft/core/error.h"
#include "graft/core/interrupt.h"
#include "graft/io/staged_dir.h"
#include "graft/io/safetensors.h"

namespace graft::io {

namespace fs = std::filesystem;

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

}  // namespace

CheckpointWriteResult write_checkpoint(const TensorSource& source, const std::string& out_dir,
                                       const CheckpointWriteOptions& options) {
  if (options.dtype && !is_float(*options.dtype))
    fail("checkpoint output dtype must be F32, F16 or BF16, not ", dtype_name(*options.dtype));
  fs::create_directories(out_dir);

  // Plan the shards from the declared infos: greedy, in name order, each under the limit.
  std::vector<std::vector<SafetensorsWriter::Declared>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const auto& name : source.names()) {
    TensorInfo info = *source.info(name);
    // GGUF block tensors (a GGUF base) have no safetensors dtype: they are written dequantized.
    const DType dt = options.dtype && is_float(info.dtype) ? *options.dtype
                     : dtype_is_quantized(info.dtype)     ? options.dtype.value_or(DType::F32)
                                                          : info.dtype;
    const uint64_t nb = static_cast<uint64_t>(dtype_bytes(dt, shape_numel(info.shape)));
    if (!shards.back().empty() && shard_bytes + nb > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back({name, dt, info.shape});
    shard_bytes += nb;
    total += nb;
  }
  const int64_t n_tensors = static_cast<int64_t>(source.names().size());
  const size_t n = shards.size();
  auto shard_name = [&](size_t i) {
    if (n == 1) return std::string("model.safetensors");
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
    return std::string(buf);
  };

  CheckpointWriteResult res;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < n; ++i) {
    SafetensorsWriter w((fs::path(out_dir) / shard_name(i)).string(), shards[i], options.metadata);
    for (const auto& d : shards[i]) {
      throw_if_interrupted();  // between tensors: the caller's staging directory is then removed
      Tensor t = convert_tensor(source.read(d.name), d.dtype);
      w.write(t);
      weight_map[d.name] = shard_name(i);
      res.bytes += static_cast<uint64_t>(t.nbytes());
      ++res.tensors;
      if (options.progress) options.progress(res.tensors, n_tensors);
    }
    w.finish();
  }
  res.shards = static_cast<int64_t>(n);
  if (n > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_checked((fs::path(out_dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  }
  return res;
}

}  // namespace graft::io
