// Chat templates: lex, parse and render with a small conversation (budgets must stop any program).
#include "fuzz_util.h"
#include "graft/text/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  graft::fuzz::expect_graft_errors_only([&] {
    graft::text::ChatTemplate t(std::string(reinterpret_cast<const char*>(data), size));
    graft::text::ChatTemplateOptions o;
    o.add_generation_prompt = true;
    o.bos_token = "<s>";
    o.eos_token = "</s>";
    (void)t.render({{"system", "Be brief."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "What is 2+2?"}}, o);
  });
  return 0;
}
