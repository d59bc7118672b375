"""A Hugging Face tokenizer directory from a GGUF file's metadata, for Dynamo's frontend.

Dynamo's frontend templates and tokenizes every request itself, and reads the model's tokenizer only
from a Hugging Face layout (tokenizer.json, tokenizer_config.json, config.json): its model card has
no GGUF reader. transformers can build one from a GGUF, but its GGUF reader imports torch. This
writes the same files from the GGUF metadata alone (standard library only), mirroring what graft's
own tokenizer builds from that metadata (src/text/gguf_tokenizer.cpp, tokenizer_spec.cpp), so the
token ids the frontend sends are the ones graft would have made from the same text.

Supported: byte-level BPE (tokenizer.ggml.model "gpt2") with the pre-tokenizers graft implements
(default / gpt-2, smollm, llama-bpe / llama3 / llama-v3, qwen2 / deepseek-r1-qwen). Anything else
fails with the reason; give the worker the model's own Hugging Face files (--hf-dir) instead.

  python gguf_hf.py MODEL.gguf OUT_DIR
"""
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
          r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2 = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
         r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
PRE = {"default": "gpt2", "gpt-2": "gpt2", "smollm": "smollm", "llama-bpe": "llama3", "llama3": "llama3",
       "llama-v3": "llama3", "qwen2": "qwen2", "deepseek-r1-qwen": "qwen2"}
CONTROL, USER_DEFINED = 3, 4  # llama.cpp's tokenizer.ggml.token_type values

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_metadata(path):
    """The GGUF key/value metadata (every key, arrays as lists); tensors are not read."""
    with open(path, "rb") as f:
        def take(fmt):
            return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]

        def string():
            return f.read(take("<Q")).decode("utf-8", errors="replace")

        def value(t):
            if t in _SCALARS:
                return take(_SCALARS[t])
            if t == 8:
                return string()
            if t == 9:
                inner, count = take("<I"), take("<Q")
                if inner in _SCALARS:  # one read for a numeric array
                    fmt = _SCALARS[inner]
                    size = struct.calcsize(fmt)
                    return list(struct.unpack("<" + fmt[1] * count, f.read(size * count)))
                return [value(inner) for _ in range(count)]
            raise ValueError(f"{path}: unknown GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version, _tensors, n_kv = take("<I"), take("<Q"), take("<Q")
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        meta = {}
        for _ in range(n_kv):
            key = string()
            meta[key] = value(take("<I"))
        return meta


def pre_tokenizer(kind):
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if kind == "gpt2":
        return byte_level
    if kind == "smollm":  # HF SmolLM2 / StarCoder: single digits, then GPT-2's ByteLevel regex
        return {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level]}
    pattern = LLAMA3 if kind == "llama3" else QWEN2
    return {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        dict(byte_level, use_regex=False)]}


def export(gguf_path, out_dir):
    """Writes tokenizer.json, tokenizer_config.json, config.json and generation_config.json for
    gguf_path into out_dir; returns out_dir."""
    m = read_metadata(gguf_path)
    model = m.get("tokenizer.ggml.model")
    pre_name = m.get("tokenizer.ggml.pre", "default")
    if model != "gpt2" or pre_name not in PRE:
        raise ValueError(f"{gguf_path}: tokenizer {model!r} / pre-tokenizer {pre_name!r} cannot be exported "
                         f"(supported: gpt2 with {sorted(PRE)}); pass the model's Hugging Face files with --hf-dir")
    tokens = m["tokenizer.ggml.tokens"]
    types = m.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [mg.split(" ", 1) for mg in m.get("tokenizer.ggml.merges", [])]
    kind = PRE[pre_name]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": ty == CONTROL}
             for i, (t, ty) in enumerate(zip(tokens, types)) if ty in (CONTROL, USER_DEFINED)]
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": pre_tokenizer(kind),
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": kind == "llama3",
                  "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }
    arch = m.get("general.architecture", "llama")

    def tok(key):
        i = m.get(f"tokenizer.ggml.{key}")
        return tokens[i] if i is not None else None

    bos_id, eos_id = m.get("tokenizer.ggml.bos_token_id"), m.get("tokenizer.ggml.eos_token_id")
    eot_id = m.get("tokenizer.ggml.eot_token_id")
    eos_ids = [i for i in dict.fromkeys([eos_id, eot_id]) if i is not None]
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": m.get(f"{arch}.context_length", 2048),
        "add_bos_token": bool(m.get("tokenizer.ggml.add_bos_token", False)),
        "add_eos_token": bool(m.get("tokenizer.ggml.add_eos_token", False)),
        "bos_token": tok("bos_token_id"), "eos_token": tok("eos_token_id"), "unk_token": tok("unknown_token_id"),
        "pad_token": tok("padding_token_id"), "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
    }
    if "tokenizer.chat_template" in m:
        tokenizer_config["chat_template"] = m["tokenizer.chat_template"]
    config = {  # what Dynamo's model card reads: architecture, context length, special ids, vocabulary size
        "architectures": ["LlamaForCausalLM"], "model_type": arch,
        "max_position_embeddings": m.get(f"{arch}.context_length", 2048), "vocab_size": len(tokens),
        "num_hidden_layers": m.get(f"{arch}.block_count"), "hidden_size": m.get(f"{arch}.embedding_length"),
        "num_attention_heads": m.get(f"{arch}.attention.head_count"),
        "num_key_value_heads": m.get(f"{arch}.attention.head_count_kv"),
        "bos_token_id": bos_id, "eos_token_id": eos_ids[0] if len(eos_ids) == 1 else eos_ids,
    }
    os.makedirs(out_dir, exist_ok=True)
    files = {"tokenizer.json": tokenizer, "tokenizer_config.json": tokenizer_config, "config.json": config,
             "generation_config.json": {"bos_token_id": bos_id, "eos_token_id": eos_ids}}
    for name, obj in files.items():
        tmp = os.path.join(out_dir, name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, ensure_ascii=False)
        os.replace(tmp, os.path.join(out_dir, name))
    return out_dir


def cached_export(gguf_path, cache_root=None):
    """export() into a directory named by the file's path, size and mtime, reused when present."""
    st = os.stat(gguf_path)
    key = hashlib.sha256(f"{os.path.abspath(gguf_path)}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:16]
    root = cache_root or os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "graft-dynamo")
    out = os.path.join(root, f"{os.path.basename(gguf_path).removesuffix('.gguf')}-{key}")
    if not os.path.exists(out):  # written aside, then renamed: workers starting together may race
        os.makedirs(root, exist_ok=True)
        tmp = tempfile.mkdtemp(dir=root, prefix=".export-")
        export(gguf_path, tmp)
        try:
            os.rename(tmp, out)
        except OSError:  # another process got there first
            shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(export(sys.argv[1], sys.argv[2]))
