// GGUF: the reader (header, metadata, tensor directory), the model view (config from metadata,
// q/k un-permutation, dequantization), the GGUF tokenizer and its chat template.
#include "fuzz_util.h"
#include "graft/core/convert.h"
#include "graft/io/gguf.h"
#include "graft/model/loader.h"
#include "graft/text/gguf_tokenizer.h"
#include "graft/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  graft::fuzz::MemFile f(data, size);
  graft::fuzz::expect_graft_errors_only([&] {
    auto g = graft::io::GgufFile::open(f.path());
    for (const auto& t : g->tensors())  // each on its own: a refused dtype must not hide the rest
      if (t.shape.size() <= 2 && graft::shape_numel(t.shape) <= (1 << 16))
        graft::fuzz::expect_graft_errors_only([&] { (void)graft::to_f32(g->tensor(t.name)); });
    graft::fuzz::expect_graft_errors_only([&] {
      auto tok = graft::text::Tokenizer::from_spec(graft::text::tokenizer_spec_from_gguf(*g));
      auto ids = tok.encode("Hello world! 123 <|im_start|>user\n héllo", true);
      (void)tok.decode(ids);
    });
    graft::fuzz::expect_graft_errors_only([&] { (void)graft::text::chat_template_from_gguf(*g); });
    graft::model::ModelSource src = graft::model::open_model_source(f.path());
    for (const auto& name : src.source->names()) {
      auto info = src.source->info(name);
      if (info && graft::shape_numel(info->shape) <= (1 << 16)) (void)src.source->read(name);
    }
  });
  return 0;
}
