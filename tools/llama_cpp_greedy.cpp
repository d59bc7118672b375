// llama.cpp's greedy decode through its C API (llama.h), for tools/gen_gguf_lora_fixtures.py: feeds
// the given prompt token ids exactly (no tokenization), optionally with one GGUF LoRA adapter at
// scale 1, and prints n argmax token ids (EOS not special) as one JSON array on stdout.
// Built by the script against the libllama of the llama-cpp-python sdist; not part of graft.
//   llama_cpp_greedy MODEL.gguf ADAPTER.gguf|- N ID [ID...]
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL ADAPTER|- N ID...\n", argv[0]);
    return 2;
  }
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 512;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  llama_adapter_lora* lora = nullptr;
  if (std::string_view(argv[2]) != "-") {
    lora = llama_adapter_lora_init(model, argv[2]);
    if (!lora) return 1;
    float scale = 1.0f;
    if (llama_set_adapters_lora(ctx, &lora, 1, &scale) != 0) return 1;
  }
  const int n = std::atoi(argv[3]);
  std::vector<llama_token> ids;
  for (int i = 4; i < argc; ++i) ids.push_back(std::atoi(argv[i]));
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::printf("[");
  for (int step = 0; step < n; ++step) {
    if (llama_decode(ctx, llama_batch_get_one(ids.data(), static_cast<int32_t>(ids.size())))) return 1;
    const float* logits = llama_get_logits_ith(ctx, -1);
    llama_token best = 0;
    for (llama_token t = 1; t < n_vocab; ++t)
      if (logits[t] > logits[best]) best = t;
    std::printf("%s%d", step ? ", " : "", best);
    ids.assign(1, best);
  }
  std::printf("]\n");
  if (lora) llama_adapter_lora_free(lora);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
