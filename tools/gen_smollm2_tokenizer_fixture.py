#!/usr/bin/env python3
"""Reference fixtures for the SmolLM2 GGUF (models/SmolLM2-135M-Instruct.Q4_1.gguf).

Writes
  tests/fixtures/smollm2/tokenizer_reference.json
      token ids of a varied text sample, from the Hugging Face tokenizer that transformers builds
      from the GGUF (AutoTokenizer.from_pretrained(dir, gguf_file=name)), used by
      tests/text/gguf_tokenizer_test.cpp.
  tests/fixtures/smollm2/gguf_summary.json
      what the reference reader (gguf-py) sees in the file: key metadata, every metadata key's
      type, every tensor's name / GGML type / shape (outermost first) / offset / size, and a few
      dequantized values of quantized tensors (gguf.quants.dequantize). Used by tests/io/gguf_test.cpp
      and by whoever maps the model.

About the reference ids: transformers' GGUF converter ignores tokenizer.ggml.pre and gives every
"gpt2" GGUF a plain ByteLevel(use_regex) pre-tokenizer. SmolLM2's own tokenizer.json (and
llama.cpp's "smollm" pre-tokenizer) first isolates every digit:
Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False, use_regex=True)].
The two differ where whitespace precedes a digit ("a  1": [a, ĠĠ, 1] vs [a, Ġ, Ġ, 1]). The "ids"
recorded here come from the transformers-built tokenizer with that pre-tokenizer restored, i.e. the
real SmolLM2 pipeline; "ids_transformers_gguf" is recorded as well where it differs.

Needs: pip install transformers tokenizers gguf numpy (torch is not needed).
"""
import collections
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(ROOT, "models")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "smollm2")

TEXTS = [
    "",
    " ",
    "\n",
    "Hello, world!",
    "Hello world",
    " Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I'm, you're, they'll, it's, we've, I'd, DON'T, She'S",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "for (int i = 0; i < 10; ++i) { x[i] = y[i] * 2.5f; }  // comment",
    "Café naïve façade résumé — Ångström, señor, Zürich, crème brûlée",
    "I love 🦀 and 🐍! 👍🏽 👨‍👩‍👧‍👦 🇫🇷",
    "你好，世界！日本語のテキスト。한국어 텍스트",
    "Привет мир; مرحبا بالعالم; नमस्ते दुनिया; Γειά σου Κόσμε",
    "a  b   c\t\td \n\n\n  e     ",
    "    four leading spaces and trailing four    ",
    "\t\ttabs\tand\ttext\t",
    "3.14159 1234567890 2024-01-01 x1y22z333 $1,000,000 1e-5 0x1F",
    "a  1  22   333\t4\n5",
    "line1\nline2\r\nline3\n\nline5\n\n\n",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "x<|im_end|>y <|endoftext|> <repo_name>foo<file_sep>bar<filename>baz.py",
    "<|im_start <|im_end| <|im_start|<|im_end|>>",
    "Hello!!! ??? ... --- *** @user #tag https://example.com/path?q=1&r=2 user@mail.org",
    "Mixed: The price is €12.50 (≈ $13.60), +5% vs. last year; ratio 3:2 → 1.5×.",
    "ÀÉÎÕÜ àéîõü ÇçÑñ ß ẞ ﬁ ﬂ Ⅻ ① ²³",
    "\u00a0non-breaking\u00a0space and zero\u200bwidth\u200dand\ufeffbom",
    "Long paragraph: Large language models (LLMs) are trained on vast amounts of text. "
    "They learn statistical patterns; inference then predicts one token at a time.\n"
    "Tokens are sub-word units — e.g. \"tokenization\" → [\"token\", \"ization\"].",
]


def main() -> int:
    import gguf
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    gguf_path = os.path.join(MODEL_DIR, GGUF_NAME)
    if not os.path.exists(gguf_path):
        print(f"missing {gguf_path} (run `make models`)", file=sys.stderr)
        return 1
    os.makedirs(OUT_DIR, exist_ok=True)

    # ---- tokenizer reference ----
    hf = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=GGUF_NAME)
    plain = hf.backend_tokenizer  # as transformers builds it from the GGUF
    fixed = type(plain).from_str(plain.to_str())
    fixed.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    fixed_nospecial = type(plain).from_str(fixed.to_str())
    fixed_nospecial.encode_special_tokens = True

    cases = []
    n_diff = 0
    for text in TEXTS:
        ids = fixed.encode(text, add_special_tokens=False).ids
        # transformers' own encode (add_special_tokens=True) must agree with the backend: the GGUF
        # says add_bos_token = false and the converted post-processor adds nothing.
        hf_ids = hf.encode(text, add_special_tokens=True)
        plain_ids = plain.encode(text, add_special_tokens=False).ids
        assert hf_ids == plain_ids, (text, hf_ids, plain_ids)
        case = {
            "text": text,
            "ids": ids,
            "ids_no_special": fixed_nospecial.encode(text, add_special_tokens=False).ids,
            "decoded": fixed.decode(ids, skip_special_tokens=False),
        }
        if plain_ids != ids:
            case["ids_transformers_gguf"] = plain_ids
            n_diff += 1
        cases.append(case)

    ref = {
        "generator": "tools/gen_smollm2_tokenizer_fixture.py",
        "gguf": GGUF_NAME,
        "reference": "transformers AutoTokenizer(gguf_file=...) with SmolLM2's pre-tokenizer "
                     "Sequence[Digits(individual_digits), ByteLevel(use_regex)] restored; "
                     "ids: parse special tokens, no BOS (add_bos_token=false); ids_no_special: "
                     "special tokens encoded as plain text",
        "vocab_size": len(hf),
        "bos_id": hf.bos_token_id,
        "eos_id": hf.eos_token_id,
        "cases": cases,
    }
    ref_path = os.path.join(OUT_DIR, "tokenizer_reference.json")
    with open(ref_path, "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {ref_path}: {len(cases)} cases, {n_diff} where transformers' GGUF pre-tokenizer differs")

    # ---- GGUF summary ----
    r = gguf.GGUFReader(gguf_path)

    def field(key):
        f = r.fields.get(key)
        if f is None:
            return None
        v = f.contents()
        return v.item() if isinstance(v, np.generic) else v

    meta_types = {}
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue
        t = f.types[0].name.lower()
        if t == "array":
            meta_types[key] = {"type": "array", "elem_type": f.types[-1].name.lower(), "len": len(f.data)}
        else:
            meta_types[key] = {"type": t}

    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "type": t.tensor_type.name,
            "shape": [int(x) for x in reversed(t.shape.tolist())],  # outermost first
            "offset": int(t.data_offset - r.data_offset),
            "nbytes": int(t.n_bytes),
        })
    samples = []
    for name in ("token_embd.weight", "blk.0.attn_q.weight", "blk.29.ffn_down.weight", "output_norm.weight"):
        t = next(x for x in r.tensors if x.name == name)
        values = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        samples.append({
            "name": name,
            "type": t.tensor_type.name,
            "first": [float(x) for x in values[:16]],
            "last": [float(x) for x in values[-16:]],
            "sum": float(values.astype(np.float64).sum()),
            "sum_abs": float(np.abs(values.astype(np.float64)).sum()),
        })

    tokens = field("tokenizer.ggml.tokens")
    summary = {
        "generator": "tools/gen_smollm2_tokenizer_fixture.py (gguf-py GGUFReader)",
        "file": GGUF_NAME,
        "file_size": os.path.getsize(gguf_path),
        "version": field("GGUF.version"),
        "alignment": r.alignment,
        "data_offset": int(r.data_offset),
        "architecture": field("general.architecture"),
        "name": field("general.name"),
        "file_type": field("general.file_type"),
        "context_length": field("llama.context_length"),
        "embedding_length": field("llama.embedding_length"),
        "feed_forward_length": field("llama.feed_forward_length"),
        "block_count": field("llama.block_count"),
        "head_count": field("llama.attention.head_count"),
        "head_count_kv": field("llama.attention.head_count_kv"),
        "rope_freq_base": field("llama.rope.freq_base"),
        "rope_dimension_count": field("llama.rope.dimension_count"),
        "rms_eps": field("llama.attention.layer_norm_rms_epsilon"),
        "vocab_size": field("llama.vocab_size"),
        "n_tokens": len(tokens),
        "tokenizer_model": field("tokenizer.ggml.model"),
        "tokenizer_pre": field("tokenizer.ggml.pre"),
        "bos_id": field("tokenizer.ggml.bos_token_id"),
        "eos_id": field("tokenizer.ggml.eos_token_id"),
        "unk_id": field("tokenizer.ggml.unknown_token_id"),
        "pad_id": field("tokenizer.ggml.padding_token_id"),
        "add_bos_token": field("tokenizer.ggml.add_bos_token"),
        "add_space_prefix": field("tokenizer.ggml.add_space_prefix"),
        "n_merges": len(r.fields["tokenizer.ggml.merges"].data),
        "chat_template": field("tokenizer.chat_template"),
        "tied_embeddings": not any(t.name == "output.weight" for t in r.tensors),
        "tensor_types": dict(collections.Counter(t.tensor_type.name for t in r.tensors)),
        "n_tensors": len(r.tensors),
        "metadata_types": meta_types,
        "dequantized_samples": samples,
        "tensors": tensors,
    }
    sum_path = os.path.join(OUT_DIR, "gguf_summary.json")
    # One tensor per line keeps the file small and diffable.
    text = json.dumps({k: v for k, v in summary.items() if k != "tensors"}, ensure_ascii=False, indent=1)
    text = text[:-2] + ',\n "tensors": [\n' + ",\n".join(
        "  " + json.dumps(t, ensure_ascii=False) for t in tensors) + "\n ]\n}\n"
    json.loads(text)
    with open(sum_path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {sum_path} ({len(text)} bytes): {summary['architecture']}, {summary['tensor_types']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
