// TokenizerSpec from GGUF metadata, following what llama.cpp's convert_hf_to_gguf.py writes and
// llama-vocab.cpp reads.
#include "graft/text/gguf_tokenizer.h"

#include <string_view>

#include "graft/core/error.h"

namespace graft::text {

namespace {

// llama.cpp's llama_token_type (tokenizer.ggml.token_type values).
enum GgmlTokenType : int64_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

struct PreName {
  std::string_view name;
  PreTokenizer pre;
};
// llama.cpp pre-tokenizer names (tokenizer.ggml.pre) graft implements, with their aliases.
constexpr PreName kPreNames[] = {
    {"default", PreTokenizer::Gpt2},   {"gpt-2", PreTokenizer::Gpt2},
    {"llama-bpe", PreTokenizer::Llama3}, {"llama3", PreTokenizer::Llama3}, {"llama-v3", PreTokenizer::Llama3},
    {"qwen2", PreTokenizer::Qwen2},    {"deepseek-r1-qwen", PreTokenizer::Qwen2},
    {"smollm", PreTokenizer::SmolLM},
};

PreTokenizer pre_from_name(const io::GgufFile& g, const std::string& name) {
  for (const PreName& p : kPreNames)
    if (p.name == name) return p.pre;
  std::string supported;
  for (const PreName& p : kPreNames) supported += (supported.empty() ? "" : ", ") + std::string(p.name);
  fail("GGUF '", g.path(), "': tokenizer.ggml.pre '", name, "' is not a pre-tokenizer graft supports (supported: ",
       supported, ")");
}

std::optional<int32_t> token_id(const io::GgufFile& g, const std::string& key, size_t n_vocab) {
  std::optional<int64_t> id = g.optional_int(key);
  if (!id) return std::nullopt;
  if (*id < 0 || static_cast<uint64_t>(*id) >= n_vocab)
    fail("GGUF '", g.path(), "': key '", key, "' is ", *id, ", outside the vocabulary [0, ", n_vocab, ")");
  return static_cast<int32_t>(*id);
}

}  // namespace

TokenizerSpec tokenizer_spec_from_gguf(const io::GgufFile& g) {
  std::optional<std::string> model = g.optional_string("tokenizer.ggml.model");
  if (!model) fail("GGUF '", g.path(), "' has no tokenizer (tokenizer.ggml.model missing)");

  TokenizerSpec spec;
  if (*model == "gpt2") {
    spec.kind = TokenizerKind::ByteLevelBPE;
    // llama.cpp treats a missing tokenizer.ggml.pre as "default".
    spec.pre = pre_from_name(g, g.optional_string("tokenizer.ggml.pre").value_or("default"));
  } else if (*model == "llama") {
    spec.kind = TokenizerKind::SentencePieceBPE;
    spec.pre = PreTokenizer::None;  // SentencePiece has no regex pre-tokenizer; tokenizer.ggml.pre is unused
  } else {
    fail("GGUF '", g.path(), "': tokenizer.ggml.model '", *model,
         "' is not a tokenizer graft supports (supported: gpt2 (byte-level BPE), llama (SentencePiece BPE))");
  }

  spec.vocab = g.require_string_array("tokenizer.ggml.tokens");
  const size_t n = spec.vocab.size();
  if (n == 0) fail("GGUF '", g.path(), "': key 'tokenizer.ggml.tokens' is empty");
  if (n >= (size_t{1} << 31))
    fail("GGUF '", g.path(), "': key 'tokenizer.ggml.tokens' has ", n, " entries (at most 2^31-1 supported)");

  if (auto types = g.optional_int_array("tokenizer.ggml.token_type")) {
    if (types->size() != n)
      fail("GGUF '", g.path(), "': key 'tokenizer.ggml.token_type' has ", types->size(), " entries, but there are ", n,
           " tokens");
    for (size_t i = 0; i < n; ++i) {
      int64_t t = (*types)[i];
      if (t < kUndefined || t > kByte)
        fail("GGUF '", g.path(), "': key 'tokenizer.ggml.token_type' entry ", i, " (token '", spec.vocab[i], "') is ", t,
             ", expected 0..6");
      if (t == kControl || t == kUnknown || t == kUserDefined) {
        AddedToken a;
        a.id = static_cast<int32_t>(i);
        a.content = spec.vocab[i];
        a.special = t != kUserDefined;
        if (a.content.empty()) continue;  // nothing to match in text
        spec.added.push_back(std::move(a));
      }
    }
  }

  if (auto merges = g.optional_string_array("tokenizer.ggml.merges")) {
    spec.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string& m = (*merges)[i];
      // As llama.cpp: split at the first space after the first character (a part may be " ").
      size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
      if (sp == std::string::npos)
        fail("GGUF '", g.path(), "': key 'tokenizer.ggml.merges' entry ", i, " '", m,
             "' is not a \"left right\" pair");
      spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  }
  if (auto scores = g.optional_float_array("tokenizer.ggml.scores")) {
    if (scores->size() != n)
      fail("GGUF '", g.path(), "': key 'tokenizer.ggml.scores' has ", scores->size(), " entries, but there are ", n,
           " tokens");
    if (spec.kind == TokenizerKind::SentencePieceBPE) spec.scores.assign(scores->begin(), scores->end());
  }
  if (spec.kind == TokenizerKind::ByteLevelBPE && spec.merges.empty())
    fail("GGUF '", g.path(), "': tokenizer.ggml.model is 'gpt2' but key 'tokenizer.ggml.merges' is missing or empty");
  if (spec.kind == TokenizerKind::SentencePieceBPE && spec.merges.empty() && spec.scores.empty())
    fail("GGUF '", g.path(),
         "': tokenizer.ggml.model is 'llama' but neither 'tokenizer.ggml.scores' nor 'tokenizer.ggml.merges' is "
         "present");

  spec.bos_id = token_id(g, "tokenizer.ggml.bos_token_id", n);
  spec.eos_id = token_id(g, "tokenizer.ggml.eos_token_id", n);
  spec.unk_id = token_id(g, "tokenizer.ggml.unknown_token_id", n);
  // Padding is never used to encode or generate: a bogus id (some converters write -1 or the
  // vocab size) is dropped rather than refused.
  if (auto pad = g.optional_int("tokenizer.ggml.padding_token_id"); pad && *pad >= 0 && static_cast<uint64_t>(*pad) < n)
    spec.pad_id = static_cast<int32_t>(*pad);

  // Defaults as llama.cpp: SentencePiece and Llama-3 prepend BOS, other byte-level BPEs do not
  // unless the file says so.
  bool default_bos = spec.kind == TokenizerKind::SentencePieceBPE || spec.pre == PreTokenizer::Llama3;
  std::optional<bool> add_bos = g.optional_bool("tokenizer.ggml.add_bos_token");
  spec.add_bos = add_bos.value_or(default_bos && spec.bos_id.has_value());
  if (spec.add_bos && !spec.bos_id)
    fail("GGUF '", g.path(), "': key 'tokenizer.ggml.add_bos_token' is true but 'tokenizer.ggml.bos_token_id' is missing");
  spec.add_eos = g.optional_bool("tokenizer.ggml.add_eos_token").value_or(false);
  if (spec.add_eos && !spec.eos_id)
    fail("GGUF '", g.path(), "': key 'tokenizer.ggml.add_eos_token' is true but 'tokenizer.ggml.eos_token_id' is missing");
  spec.add_space_prefix = g.optional_bool("tokenizer.ggml.add_space_prefix")
                              .value_or(spec.kind == TokenizerKind::SentencePieceBPE);
  return spec;
}

std::optional<std::string> chat_template_from_gguf(const io::GgufFile& g) {
  return g.optional_string("tokenizer.chat_template");
}

}  // namespace graft::text
