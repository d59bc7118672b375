// tokenizer.json (+ tokenizer_config.json as a second part): load, then encode and decode a few
// texts (ASCII, Unicode, specials, invalid UTF-8).
#include "fuzz_util.h"
#include "graft/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto parts = graft::fuzz::split_parts(data, size, 2);
  graft::fuzz::ScratchDir dir;
  const std::string tj = dir.write("tokenizer.json", parts[0]);
  const std::string tc = parts[1].empty() ? "" : dir.write("tokenizer_config.json", parts[1]);
  graft::fuzz::expect_graft_errors_only([&] {
    auto tok = graft::text::Tokenizer::from_files(tj, tc);
    for (std::string_view text : {std::string_view("Hello world! 12345 don't"), std::string_view("  héllo\n\twörld 日本語 🙂"),
                                  std::string_view("<|im_start|>user<|im_end|></s><s>"), std::string_view("\xff\xfe bad \xc3")}) {
      auto ids = tok.encode(text, true);
      (void)tok.decode(ids);
      (void)tok.encode(text, false);
    }
  });
  return 0;
}
