#!/usr/bin/env python3
"""Generates the tokenizer test fixtures under tests/fixtures/tokenizers/.

Run by developers (not CI) when the fixtures need regenerating:

    python3 tools/gen_tokenizer_fixtures.py

Needs the HF `tokenizers` package (pip install tokenizers). Training is deterministic for a fixed
corpus and settings, so the output is reproducible.

What it writes, per tokenizer directory:
  tokenizer.json          the tokenizer (HF format)
  tokenizer_config.json   bos/eos/add_bos_token (main fixtures only)
  reference.json          ids and decoded strings produced by `tokenizers` for SAMPLES

Fixtures:
  tiny_bpe        byte-level BPE, Llama-3-style Split regex + ByteLevel(use_regex=false),
                  specials <|endoftext|>, <|im_start|>, <|im_end|>
  tiny_spm        SentencePiece-style BPE with byte_fallback, Llama-2 normalizer/decoder layout,
                  <unk>=0, <s>=1, </s>=2, <0x00>..<0xFF>, TemplateProcessing "<s> $A"
  tiny_bpe_gpt2   tiny_bpe's model with the GPT-2 pre-tokenizer (ByteLevel use_regex=true), an
                  lstrip/rstrip special token and a non-special added token
  tiny_bpe_smollm tiny_bpe's model with Digits(individual) + ByteLevel (SmolLM2 / StarCoder)
  tiny_bpe_qwen2  tiny_bpe's model with the NFC normalizer, the Qwen2 Split regex, ignore_merges, a
                  TemplateProcessing post-processor that prepends <|endoftext|>
  tiny_bpe_punct  tiny_bpe's model with WhitespaceSplit + Punctuation(contiguous) + Digits +
                  ByteLevel(add_prefix_space=true)
  tiny_spm_metaspace  tiny_spm's model with the legacy Metaspace pre-tokenizer/decoder layout
"""
import json
import os
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers
import fixturelib  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "tokenizers")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
                 r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "She said: \"It's a lovely day, isn't it?\" and they'll agree, we've seen it.",
    "Tokenizers split text into tokens; the model then reads the token ids.",
    "In the beginning there was the word, and the word was split into pieces.",
    "Hello world! Hello there, how are you doing today? I'm fine, thanks.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
    "for (int i = 0; i < n; ++i) {\n    total += values[i];\n}\n",
    "import os\nimport sys\n\nclass Reader:\n    def __init__(self, path):\n        self.path = path\n",
    "if x == 10 and y != 20:\n\tprint(\"ok\")\nelse:\n\tpass\n",
    "Café, naïve, résumé, façade, jalapeño, über, déjà vu, crème brûlée.",
    "Voilà une phrase en français avec des accents: élève, être, où, garçon.",
    "Numbers like 12345, 3.14159 and 2024-06-01 appear in text too.",
    "the the the and and of of to to in in is is it it that that with with",
    "When the tokenizer sees spaces    and tabs\t\tit keeps them.",
    "return value; return result; return None; return self.value",
]


def corpus_iter():
    rng = random.Random(1234)
    lines = list(CORPUS)
    for _ in range(20):
        rng.shuffle(lines)
        for line in lines:
            yield line


SAMPLES = [
    "",
    "Hello world",
    "Hello world!",
    " Hello world",
    "  leading spaces and trailing   ",
    "The quick brown fox jumps over the lazy dog.",
    "It's, I'm, they'll, we've, you'd, she's, IT'S, WE'LL",
    "def add(a, b):\n    return a + b\n",
    "for (int i = 0; i < n; ++i) {\n\ttotal += values[i];\n}",
    "Café naïve résumé façade jalapeño über déjà vu",
    "emoji: 😀🎉👍🏽 and flags 🇫🇷",
    "日本語のテキスト、中文文本。한국어",
    "mixed 中文 and English 😀 in one line",
    "whitespace   runs\t\t\tand\n\n\nnewlines\r\nwindows",
    "\n\n",
    "    ",
    "digits 0123456789 and 1234567 and 3.14159 and ١٢٣",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "<s>Hello</s> <unk> world",
    "a <|im_end|>b<|im_end|> c",
    "partial <|im_start tag and <| odd |> brackets",
    "Ωmega λambda → ∞ ≠ ∑ ≤ ≥",
    "zero\u200bwidth and nbsp\u00a0here",
    "tab\tseparated\tvalues\t1\t2",
    "x" * 50 + " " + "ab" * 30,
    "ŀ ſ ǅ ﬁ",
    "🙂",
    "a\u0301 e\u0300 combining marks",
    "<mask> masked <mask>   words hello world",
    "hello world hello worldly",
    "NFC: e\u0301 A\u030a \u212b \u1100\u1161\u11a8 e\u0302\u0323 \u0344 \u0958 \uac00\u11a8",
]


FUZZ_FRAGMENTS = [
    "the", "The", "quick", "café", "naïve", "return", "def", "self", "hello world", "world",
    "'s", "'S", "'ll", "'LL", "'re", "n't", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r",
    "\u00a0", "\u3000", "\u2028", "\u0085", "\u200b", "0", "7", "42", "1234", "3.14", "١٢",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_", "|>", "<s>", "</s>", "<unk>",
    "<mask>", "<0x41>", "▁", "▁▁x", "Ġ", "!", "?!", "...", "(", ")", "{}", "[];", "==", "->", "#",
    "😀", "👍🏽", "🇫🇷", "日本", "中文", "한국어", "Ωλ", "Привет", "e\u0301", "ﬁ", "ǅ", "ſ",
]


def fuzz_samples(n=80, seed=20240601):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 12)
        parts = []
        for _ in range(k):
            r = rng.random()
            if r < 0.75:
                parts.append(rng.choice(FUZZ_FRAGMENTS))
            elif r < 0.9:
                parts.append(chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x24F),
                                             rng.randint(0x370, 0x4FF), rng.randint(0x3040, 0x30FF),
                                             rng.randint(0x4E00, 0x9FFF), rng.randint(0x1F300, 0x1FAFF)])))
            else:
                parts.append(" " * rng.randint(1, 6))
        out.append("".join(parts))
    return out


def reference(tok, add_special_ok=True):
    cases = []
    for text in SAMPLES + fuzz_samples():
        tok.encode_special_tokens = False
        enc = tok.encode(text, add_special_tokens=True).ids
        enc_nospecial_added = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        enc_plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        cases.append({
            "text": text,
            "ids": enc,                              # parse_special, add_bos per post-processor
            "ids_no_bos": enc_nospecial_added,       # parse_special, no post-processor tokens
            "ids_no_special": enc_plain,             # special tokens encoded as text, no bos
            "decoded": tok.decode(enc, skip_special_tokens=False),
            "decoded_skip_special": tok.decode(enc, skip_special_tokens=True),
            "decoded_no_special": tok.decode(enc_plain, skip_special_tokens=False),
        })
    return {"generator": "tools/gen_tokenizer_fixtures.py", "vocab_size": tok.get_vocab_size(True),
            "cases": cases}


def save(name, tok, config=None):
    d = os.path.join(ROOT, name)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"), pretty=True)
    # Round-trip through the file so the references come from exactly what was written.
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    if config is not None:
        fixturelib.write_json(os.path.join(d, "tokenizer_config.json"), config, ensure_ascii=False)
    fixturelib.write_json(os.path.join(d, "reference.json"), reference(tok), ensure_ascii=False)
    print(f"{name}: vocab {tok.get_vocab_size(True)}")
    return tok


# --------------------------------------------------------------------------------------------
# Byte-level BPE (Llama-3-style pre-tokenizer)


def byte_level_pretok(pattern):
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])


def train_tiny_bpe():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = byte_level_pretok(LLAMA3_PATTERN)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=384, min_frequency=2, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus_iter(), trainer=trainer)
    return tok


def bpe_variant(base_json, pre_tokenizer, mutate=None):
    j = json.loads(base_json)
    j["pre_tokenizer"] = json.loads(pre_tokenizer.__getstate__())
    if mutate:
        mutate(j)
    return Tokenizer.from_str(json.dumps(j))


# --------------------------------------------------------------------------------------------
# SentencePiece-style BPE with byte fallback (Llama-2 layout)


def train_tiny_spm():
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    # Training only: split into "▁word" pieces, as sentencepiece does; the saved tokenizer has no
    # pre-tokenizer (Llama-2 layout), so BPE runs on the whole normalized text.
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=190, min_frequency=2, limit_alphabet=56,  # a cut between count tiers: no ties, reproducible
                                  special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tok.train_from_iterator(corpus_iter(), trainer=trainer)

    j = json.loads(tok.to_str())
    trained = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for t, _ in trained:
        if t not in vocab:
            vocab[t] = len(vocab)
    j["model"]["vocab"] = vocab
    j["pre_tokenizer"] = None
    j["decoder"] = json.loads(decoders.Sequence([
        decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
        decoders.Strip(" ", 1, 0)]).__getstate__())
    j["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]).__getstate__())
    for a in j["added_tokens"]:
        a["id"] = vocab[a["content"]]
    return Tokenizer.from_str(json.dumps(j))


def main():
    bpe = train_tiny_bpe()
    bpe_json = bpe.to_str()
    save("tiny_bpe", bpe, {
        "add_bos_token": False, "add_eos_token": False,
        "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "unk_token": None, "model_max_length": 2048,
        "tokenizer_class": "PreTrainedTokenizerFast",
    })

    spm = train_tiny_spm()
    save("tiny_spm", spm, {
        "add_bos_token": True, "add_eos_token": False,
        "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": False,
                      "normalized": False, "rstrip": False, "single_word": False},
        "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": False,
                      "normalized": False, "rstrip": False, "single_word": False},
        "unk_token": "<unk>", "pad_token": None, "legacy": True,
        "tokenizer_class": "LlamaTokenizer",
    })

    # Variants: the same trained model under other pre-tokenizer configurations.
    gpt2 = bpe_variant(bpe_json, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    gpt2.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False,
                                        special=True)])
    gpt2.add_tokens([AddedToken("hello world", lstrip=False, rstrip=True, normalized=True,
                                special=False)])
    save("tiny_bpe_gpt2", gpt2)

    smollm = bpe_variant(bpe_json, pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)]))
    save("tiny_bpe_smollm", smollm)

    punct = bpe_variant(bpe_json, pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(),
        pre_tokenizers.Punctuation(behavior="contiguous"),
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)]))
    save("tiny_bpe_punct", punct)

    def qwen_mutate(j):
        j["normalizer"] = {"type": "NFC"}
        j["model"]["ignore_merges"] = True
        j["post_processor"] = {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            json.loads(processors.TemplateProcessing(
                single="<|endoftext|> $A", pair="<|endoftext|> $A $B:1",
                special_tokens=[("<|endoftext|>", 0)]).__getstate__())]}
    save("tiny_bpe_qwen2", bpe_variant(bpe_json, byte_level_pretok(QWEN2_PATTERN), qwen_mutate))

    j = json.loads(spm.to_str())
    j["normalizer"] = None
    j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first",
                          "split": False}
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": False},
        {"type": "ByteFallback"}, {"type": "Fuse"}]}
    save("tiny_spm_metaspace", Tokenizer.from_str(json.dumps(j)))


if __name__ == "__main__":
    main()
