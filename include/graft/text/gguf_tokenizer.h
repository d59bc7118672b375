// Tokenizer and chat template from GGUF metadata (the tokenizer.ggml.* and tokenizer.chat_template
// keys llama.cpp's converters write).
#pragma once
#include <optional>
#include <string>

#include "graft/io/gguf.h"
#include "graft/text/tokenizer.h"

namespace graft::text {

// Builds a TokenizerSpec from tokenizer.ggml.{model, pre, tokens, token_type, merges, scores,
// bos/eos/unknown/padding_token_id, add_bos_token, add_space_prefix}.
//   model "gpt2"  -> ByteLevelBPE, merges required, pre-tokenizer from tokenizer.ggml.pre
//                    ("default"/"gpt-2" -> Gpt2, "llama-bpe"/"llama3" -> Llama3, "qwen2" -> Qwen2,
//                     "smollm" -> SmolLM; absent -> Gpt2, as llama.cpp does; others are an error)
//   model "llama" -> SentencePieceBPE, scores required, merges used if present
// Token types CONTROL (3) and UNKNOWN (2) become special added tokens, USER_DEFINED (4) non-special
// added tokens. Throws graft::Error naming the file and key on missing or inconsistent metadata;
// a file without tokenizer.ggml.model gives "GGUF '<file>' has no tokenizer (tokenizer.ggml.model
// missing)".
TokenizerSpec tokenizer_spec_from_gguf(const graft::io::GgufFile& gguf);

// tokenizer.chat_template, if present (nullopt otherwise).
std::optional<std::string> chat_template_from_gguf(const graft::io::GgufFile& gguf);

}  // namespace graft::text
