// Building the tokenizer pipeline from a normalized TokenizerSpec (what the GGUF loader fills from
// metadata), mirroring the layout of the equivalent HF tokenizer.json / llama.cpp tokenizers.
#include "graft/core/error.h"
#include "text/tokenizer_internal.h"

namespace graft::text::detail {

namespace {

const char kMeta[] = "\xE2\x96\x81";  // "▁"

PreStep split_step(const char* pattern) {
  PreStep st;
  st.kind = PreStep::Split;
  st.re = std::make_shared<Regex>(pattern);
  st.behavior = SplitBehavior::Isolated;
  return st;
}

DecStep dec(DecStep::Kind kind) {
  DecStep d;
  d.kind = kind;
  return d;
}

NormStep norm(NormStep::Kind kind, std::string text, std::string content) {
  NormStep n;
  n.kind = kind;
  n.text = std::move(text);
  n.content = std::move(content);
  return n;
}

PreStep byte_level_step(bool use_regex) {
  PreStep st;
  st.kind = PreStep::ByteLevel;
  st.add_prefix_space = false;
  st.use_regex = use_regex;
  return st;
}

}  // namespace

void load_spec(TokenizerImpl& im, TokenizerSpec spec) {
  im.source = "tokenizer spec";
  const size_t n = spec.vocab.size();
  if (n == 0) fail("tokenizer spec: empty vocabulary");
  if (n >= (size_t{1} << 31)) fail("tokenizer spec: vocabulary too large");
  im.kind = spec.kind;
  im.id_to_token = std::move(spec.vocab);
  im.id_added.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    im.model.vocab.insert_or_assign(im.id_to_token[i], static_cast<int32_t>(i));  // last wins
  }
  for (size_t r = 0; r < spec.merges.size(); ++r) {
    const auto& [a, b] = spec.merges[r];
    if (!im.model.add_merge(a, b, static_cast<int32_t>(r))) {
      fail("tokenizer spec: merges[", r, "] '", a, " ", b,
           "': a part or the merged token is not in the vocabulary");
    }
  }
  auto check = [&](const std::optional<int32_t>& id, const char* what) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n)) {
      fail("tokenizer spec: ", what, " ", *id, " is out of range [0, ", n, ")");
    }
  };
  check(spec.bos_id, "bos_id");
  check(spec.eos_id, "eos_id");
  check(spec.unk_id, "unk_id");
  check(spec.pad_id, "pad_id");
  im.bos = spec.bos_id;
  im.eos = spec.eos_id;
  im.unk = spec.unk_id;
  im.pad = spec.pad_id;
  im.model.unk_id = spec.unk_id;
  im.add_bos = spec.add_bos;
  im.add_eos = spec.add_eos;
  if (spec.add_bos && !spec.bos_id) fail("tokenizer spec: add_bos is set but bos_id is not");
  if (spec.add_eos) {
    if (!spec.eos_id) fail("tokenizer spec: add_eos is set but eos_id is not");
    im.eos_suffix = {*spec.eos_id};
  }

  for (size_t i = 0; i < spec.added.size(); ++i) {
    const AddedToken& a = spec.added[i];
    if (a.id < 0 || static_cast<size_t>(a.id) >= n) {
      fail("tokenizer spec: added[", i, "] id ", a.id, " is out of range [0, ", n, ")");
    }
    im.added.push_back({a.id, a.content, a.special, a.lstrip, a.rstrip, false, false});
  }

  if (spec.kind == TokenizerKind::ByteLevelBPE) {
    switch (spec.pre) {
      case PreTokenizer::Gpt2:
        im.pre.push_back(byte_level_step(true));
        break;
      case PreTokenizer::Llama3:
        im.pre.push_back(split_step(kLlama3Pattern));
        im.pre.push_back(byte_level_step(false));
        break;
      case PreTokenizer::Qwen2:
        im.pre.push_back(split_step(kQwen2Pattern));
        im.pre.push_back(byte_level_step(false));
        break;
      case PreTokenizer::SmolLM: {
        PreStep digits;
        digits.kind = PreStep::Digits;
        digits.individual_digits = true;
        im.pre.push_back(digits);
        im.pre.push_back(byte_level_step(true));
        break;
      }
      case PreTokenizer::None:
        im.pre.push_back(byte_level_step(false));
        break;
    }
    im.model.ignore_merges = spec.ignore_merges || spec.pre == PreTokenizer::Llama3;
    im.decoders.push_back(dec(DecStep::ByteLevel));
  } else {
    // SentencePiece (Llama-2 layout): normalizer Prepend("▁") + Replace(" ", "▁"), no
    // pre-tokenizer (the whole text is one BPE word), byte fallback, and the decoder
    // Replace("▁", " ") + ByteFallback + Fuse + Strip(" ", 1, 0).
    if (spec.add_space_prefix) {
      im.normalizers.push_back(norm(NormStep::Prepend, kMeta, ""));
    }
    im.normalizers.push_back(norm(NormStep::Replace, " ", kMeta));
    im.model.byte_fallback = true;
    im.model.ignore_merges = spec.ignore_merges;
    if (spec.merges.empty()) {
      if (spec.scores.size() != n) {
        fail("tokenizer spec: SentencePiece vocabulary without merges needs one score per token (",
             spec.scores.size(), " scores for ", n, " tokens)");
      }
      im.model.use_scores = true;
      im.model.scores = std::move(spec.scores);
    }
    DecStep rep = dec(DecStep::Replace);
    rep.pattern = kMeta;
    rep.content = " ";
    im.decoders.push_back(rep);
    im.decoders.push_back(dec(DecStep::ByteFallback));
    im.decoders.push_back(dec(DecStep::Fuse));
    if (spec.add_space_prefix) {
      DecStep strip = dec(DecStep::Strip);
      strip.content = " ";
      strip.start = 1;
      im.decoders.push_back(strip);
    }
  }
  im.finish();
}

}  // namespace graft::text::detail
