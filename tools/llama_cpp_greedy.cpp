// llama.cpp's greedy decode through its C API (llama.h), for tools/gen_gguf_lora_fixtures.py: feeds
// the given prompt token ids exactly (no tokenization), optionally with one GGUF LoRA adapter at
// scale 1, and prints n argmax token ids (EOS not special) as one JSON array on stdout; with --detail
// first, a JSON object {"greedy": [...], "top2_gap": [...], "top_ids": [[...]], "top_logits": [[...]]}:
// at each step the argmax's logit minus the runner-up's, and the 8 highest logits with their ids. Built by the tools/ scripts against the libllama of the llama-cpp-python sdist; not
// part of graft.
//   llama_cpp_greedy [--detail] MODEL.gguf ADAPTER.gguf|- N ID [ID...]
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <string_view>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  const bool gaps = argc > 1 && std::string_view(argv[1]) == "--detail";
  if (gaps) {
    --argc;
    ++argv;
  }
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
  std::vector<llama_token> greedy;
  std::vector<float> gap;
  std::vector<std::vector<llama_token>> top_ids;
  std::vector<std::vector<float>> top_logits;
  for (int step = 0; step < n; ++step) {
    if (llama_decode(ctx, llama_batch_get_one(ids.data(), static_cast<int32_t>(ids.size())))) return 1;
    const float* logits = llama_get_logits_ith(ctx, -1);
    llama_token best = 0;
    for (llama_token t = 1; t < n_vocab; ++t)
      if (logits[t] > logits[best]) best = t;
    float second = -1e30f;
    for (llama_token t = 0; t < n_vocab; ++t)
      if (t != best && logits[t] > second) second = logits[t];
    greedy.push_back(best);
    gap.push_back(logits[best] - second);
    std::vector<llama_token> order(static_cast<size_t>(n_vocab));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 8, order.end(),
                      [&](llama_token a, llama_token b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    order.resize(8);
    top_ids.push_back(order);
    top_logits.emplace_back();
    for (llama_token t : order) top_logits.back().push_back(logits[t]);
    ids.assign(1, best);
  }
  std::printf(gaps ? "{\"greedy\": [" : "[");
  for (size_t i = 0; i < greedy.size(); ++i) std::printf("%s%d", i ? ", " : "", greedy[i]);
  if (gaps) {
    std::printf("], \"top2_gap\": [");
    for (size_t i = 0; i < gap.size(); ++i) std::printf("%s%.6g", i ? ", " : "", gap[i]);
    std::printf("], \"top_ids\": [");
    for (size_t i = 0; i < top_ids.size(); ++i) {
      std::printf("%s[", i ? ", " : "");
      for (size_t j = 0; j < top_ids[i].size(); ++j) std::printf("%s%d", j ? ", " : "", top_ids[i][j]);
      std::printf("]");
    }
    std::printf("], \"top_logits\": [");
    for (size_t i = 0; i < top_logits.size(); ++i) {
      std::printf("%s[", i ? ", " : "");
      for (size_t j = 0; j < top_logits[i].size(); ++j) std::printf("%s%.6g", j ? ", " : "", top_logits[i][j]);
      std::printf("]");
    }
    std::printf("]}");
  } else {
    std::printf("]");
  }
  std::printf("\n");
  if (lora) llama_adapter_lora_free(lora);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
