#!/usr/bin/env python3
"""Seed corpora for the fuzz harnesses: tiny complete GGUF models (a llama with a byte-level BPE
tokenizer and chat template, and one with a SentencePiece-style vocabulary), and, for the harnesses whose input packs several files (tests/fuzz/fuzz_util.h:
parts joined by the marker b"\\0GRAFT-PART\\0"): each committed adapter fixture directory becomes
one seed [adapter_config.json, weights]. Harnesses that read one file take the fixtures directly
(CMakeLists.txt lists them). Python standard library only.

Usage: gen_fuzz_seeds.py SOURCE_DIR   (rewrites tests/fuzz/corpus/{gguf,adapter_peft,adapter_mlx}/)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_hostile_inputs import ARRAY, F32, I32, STRING, U32, write_gguf  # noqa: E402

MARKER = b"\0GRAFT-PART\0"


def gguf_seeds(out):
    """Tiny llama GGUFs that pass every check, so mutations start deep in the model and tokenizer."""
    os.makedirs(out, exist_ok=True)
    hidden, ff, vocab, layers = 8, 16, 16, 1
    tensors = [("token_embd.weight", [hidden, vocab], hidden * vocab), ("output_norm.weight", [hidden], hidden)]
    for i in range(layers):
        b = f"blk.{i}."
        tensors += [(b + "attn_norm.weight", [hidden], hidden), (b + "ffn_norm.weight", [hidden], hidden)]
        tensors += [(b + n, [hidden, hidden], hidden * hidden) for n in ("attn_q.weight", "attn_k.weight",
                                                                         "attn_v.weight", "attn_output.weight")]
        tensors += [(b + "ffn_gate.weight", [hidden, ff], hidden * ff), (b + "ffn_up.weight", [hidden, ff], hidden * ff),
                    (b + "ffn_down.weight", [ff, hidden], hidden * ff)]
    base = [("general.architecture", STRING, "llama"), ("llama.embedding_length", U32, hidden),
            ("llama.feed_forward_length", U32, ff), ("llama.block_count", U32, layers),
            ("llama.attention.head_count", U32, 2), ("llama.attention.head_count_kv", U32, 1),
            ("llama.context_length", U32, 64), ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
            ("llama.rope.freq_base", F32, 10000.0)]
    bpe_tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "c", "\u0120", "H", "e", "l", "o", "ab",
                  "\u0120a", "ll", "He", "lo"]
    bpe = base + [("tokenizer.ggml.model", STRING, "gpt2"), ("tokenizer.ggml.pre", STRING, "smollm"),
                  ("tokenizer.ggml.tokens", ARRAY, (STRING, bpe_tokens)),
                  ("tokenizer.ggml.token_type", ARRAY, (I32, [3, 3, 3] + [1] * 13)),
                  ("tokenizer.ggml.merges", ARRAY, (STRING, ["a b", "\u0120 a", "l l", "H e", "l o"])),
                  ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2),
                  ("tokenizer.chat_template", STRING,
                   "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")]
    write_gguf(os.path.join(out, "llama_bpe.gguf"), bpe, tensors)
    spm_tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(8)] + ["\u2581", "\u2581a", "a", "b", "ab"]
    spm = base + [("tokenizer.ggml.model", STRING, "llama"), ("tokenizer.ggml.tokens", ARRAY, (STRING, spm_tokens)),
                  ("tokenizer.ggml.scores", ARRAY, (F32, [0.0] * 11 + [-1.0, -2.0, -3.0, -4.0, -5.0])),
                  ("tokenizer.ggml.token_type", ARRAY, (I32, [2, 3, 3] + [6] * 8 + [1] * 5)),
                  ("tokenizer.ggml.bos_token_id", U32, 1), ("tokenizer.ggml.eos_token_id", U32, 2)]
    write_gguf(os.path.join(out, "llama_spm.gguf"), spm, tensors)
    print(f"gguf: {sorted(os.listdir(out))}")


def main(src):
    gguf_seeds(os.path.join(src, "tests/fuzz/corpus/gguf"))
    fixtures = os.path.join(src, "tests/fixtures/adapters")
    for layout, weights in (("peft", "adapter_model.safetensors"), ("mlx", "adapters.safetensors")):
        out = os.path.join(src, "tests/fuzz/corpus", "adapter_" + layout)
        os.makedirs(out, exist_ok=True)
        for old in os.listdir(out):
            os.remove(os.path.join(out, old))
        for name in sorted(os.listdir(fixtures)):
            d = os.path.join(fixtures, name)
            cfg, w = os.path.join(d, "adapter_config.json"), os.path.join(d, weights)
            if not (os.path.isfile(cfg) and os.path.isfile(w)):
                continue
            with open(cfg, "rb") as f, open(w, "rb") as g:
                data = f.read() + MARKER + g.read()
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            print(f"{layout}: {name} ({len(data)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
