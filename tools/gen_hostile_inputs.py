#!/usr/bin/env python3
"""Hostile inputs for graft: files crafted as an attacker would (a model, config, tokenizer, chat
template or adapter from a stranger), each paired with the command that reads it and what graft
must answer: the exit code of its error kind and a fragment of the message naming the file and
field. Python standard library only (it runs in CI at test time and writes into a temp dir).

Usage: gen_hostile_inputs.py OUT_DIR SOURCE_DIR   writes the files and prints the cases.
tests/cli/hostile_test.py imports make_cases() and runs every case through the graft binary.
"""
import json
import os
import shutil
import struct
import sys

# Exit codes by error kind (README "Exit codes").
BAD_INPUT, BAD_REQUEST, UNSUPPORTED, LIMIT, IO = 1, 2, 3, 4, 5


class Case:
    def __init__(self, name, argv, codes, fragment):
        self.name = name
        self.argv = argv  # graft's arguments
        self.codes = codes if isinstance(codes, tuple) else (codes,)  # accepted exit codes
        # must appear in stderr (a tuple: each of them)
        self.fragment = fragment if isinstance(fragment, tuple) else (fragment,)

    def __repr__(self):
        return f"{self.name}: graft {' '.join(self.argv)[:120]} -> exit {self.codes}, '{self.fragment}'"


# --- GGUF writer (v3, little-endian) -------------------------------------------------------------
U32, I32, F32, BOOL, STRING, ARRAY, U64 = 4, 5, 6, 7, 8, 9, 10


def _gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _gguf_value(t, v):
    if t == U32:
        return struct.pack("<I", v)
    if t == I32:
        return struct.pack("<i", v)
    if t == U64:
        return struct.pack("<Q", v)
    if t == F32:
        return struct.pack("<f", v)
    if t == BOOL:
        return struct.pack("<B", v)
    if t == STRING:
        return _gguf_str(v)
    if t == ARRAY:  # v = (element type, [values])
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(_gguf_value(et, x) for x in items)
    raise ValueError(t)


def write_gguf(path, kv, tensors):
    """kv: [(key, type, value)]; tensors: [(name, ne list (innermost first), float count)] as F32."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, t, v in kv:
        out += _gguf_str(key) + struct.pack("<I", t) + _gguf_value(t, v)
    offset, data = 0, b""
    for name, ne, count in tensors:
        out += _gguf_str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        out += struct.pack("<IQ", 0, offset)  # type F32
        blob = struct.pack(f"<{count}f", *([0.01] * count))
        blob += b"\0" * (-len(blob) % 32)
        data += blob
        offset += len(blob)
    out += b"\0" * (-len(out) % 32)
    with open(path, "wb") as f:
        f.write(out + data)


def tiny_llama_gguf(path, **override):
    """A tiny llama GGUF whose metadata reaches the model checks; `override` replaces (key: (type,
    value)) or drops (key: None) metadata, `tensors` replaces the tensor list."""
    hidden, vocab = 8, 16
    kv = {
        "general.architecture": (STRING, "llama"),
        "llama.embedding_length": (U32, hidden),
        "llama.feed_forward_length": (U32, 16),
        "llama.block_count": (U32, 1),
        "llama.attention.head_count": (U32, 2),
        "llama.attention.head_count_kv": (U32, 2),
        "llama.context_length": (U32, 64),
        "llama.attention.layer_norm_rms_epsilon": (F32, 1e-5),
        "llama.rope.freq_base": (F32, 10000.0),
    }
    tensors = override.pop("tensors", [("token_embd.weight", [hidden, vocab], hidden * vocab),
                                       ("output_norm.weight", [hidden], hidden)])
    for k, v in override.items():
        if v is None:
            kv.pop(k, None)
        else:
            kv[k] = v
    write_gguf(path, [(k, t, v) for k, (t, v) in kv.items()], tensors)


# --- Hugging Face model directories --------------------------------------------------------------
def model_dir(out, name, src, config_edit=None, files=None):
    """A copy of the tiny llama fixture (symlinked weights) with config.json edited and extra files."""
    base = os.path.join(src, "tests/fixtures/models/llama_f32")
    d = os.path.join(out, name)
    os.makedirs(d)
    for f in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(base, f), os.path.join(d, f))
    with open(os.path.join(base, "config.json")) as f:
        cfg = json.load(f)
    if config_edit:
        config_edit(cfg)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    for fname, content in (files or {}).items():
        p = os.path.join(d, fname)
        if os.path.lexists(p):
            os.remove(p)
        with open(p, "w") as f:
            f.write(content)
    return d


def deep_json(depth):
    return "[" * depth + "]" * depth


def peft_dir(out, name, src, edit=None, raw_config=None):
    base = os.path.join(src, "tests/fixtures/adapters/peft_lora")
    d = os.path.join(out, name)
    os.makedirs(d)
    os.symlink(os.path.join(base, "adapter_model.safetensors"), os.path.join(d, "adapter_model.safetensors"))
    with open(os.path.join(base, "adapter_config.json")) as f:
        cfg = json.load(f)
    if edit:
        edit(cfg)
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        f.write(raw_config(cfg) if raw_config else json.dumps(cfg))
    return d


def mlx_dir(out, name, src, edit):
    base = os.path.join(src, "tests/fixtures/adapters/mlx_lora")
    d = os.path.join(out, name)
    os.makedirs(d)
    os.symlink(os.path.join(base, "adapters.safetensors"), os.path.join(d, "adapters.safetensors"))
    with open(os.path.join(base, "adapter_config.json")) as f:
        cfg = json.load(f)
    edit(cfg)
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump(cfg, f)
    return d


def make_cases(out, src):
    """Writes every crafted input under `out` and returns the cases that read them."""
    os.makedirs(out, exist_ok=True)
    cases = []
    gen = lambda model, *extra: ["generate", "-m", model, "-p", "hi", "-n", "1", "--temp", "0", *extra]
    tiny = os.path.join(src, "tests/fixtures/models/llama_f32")
    peft = os.path.join(src, "tests/fixtures/adapters/peft_lora")

    # GGUF metadata: every numeric field range-checked where it is read.
    def gguf_case(name, fragment, code=BAD_INPUT, **override):
        p = os.path.join(out, name + ".gguf")
        tiny_llama_gguf(p, **override)
        cases.append(Case("gguf-" + name, gen(p), code, fragment))

    gguf_case("head-count-zero", "attention.head_count", **{"llama.attention.head_count": (U32, 0)})
    gguf_case("embd-no-dims", "token_embd.weight", tensors=[("token_embd.weight", [], 1)])
    gguf_case("block-count-1e9", "block_count", **{"llama.block_count": (U32, 10**9)})
    gguf_case("rope-theta-negative", "rope_theta", **{"llama.rope.freq_base": (F32, -1.0)})
    gguf_case("rope-theta-nan", "rope_theta", **{"llama.rope.freq_base": (F32, float("nan"))})
    gguf_case("rms-eps-zero", "rms_norm_eps", **{"llama.attention.layer_norm_rms_epsilon": (F32, 0.0)})
    gguf_case("kv-heads-zero", "head_count_kv", **{"llama.attention.head_count_kv": (U32, 0)})
    gguf_case("hidden-zero", "embedding_length", **{"llama.embedding_length": (U32, 0)})
    gguf_case("key-length-odd", "key_length", **{"llama.attention.key_length": (U32, 3)})
    gguf_case("sliding-window-zero", "sliding_window", **{"llama.attention.sliding_window": (U32, 0)})
    gguf_case("eos-beyond-int32", "eos_token_id", **{"tokenizer.ggml.eos_token_id": (U64, 2**40)})
    gguf_case("bos-negative", "bos_token_id", **{"tokenizer.ggml.bos_token_id": (I32, -1)})
    gguf_case("context-zero", "context_length", **{"llama.context_length": (U32, 0)})

    # config.json: the same checks, same messages.
    def config_case(name, fragment, edit, code=BAD_INPUT):
        d = model_dir(out, "cfg-" + name, src, edit)
        cases.append(Case("config-" + name, gen(d), code, fragment))

    config_case("layers-1e9", "num_hidden_layers", lambda c: c.update(num_hidden_layers=10**9))
    config_case("heads-zero", "num_attention_heads", lambda c: c.update(num_attention_heads=0))
    config_case("rope-theta-zero", "rope_theta", lambda c: c.update(rope_theta=0))
    config_case("rms-eps-negative", "rms_norm_eps", lambda c: c.update(rms_norm_eps=-1e-6))
    config_case("sliding-window-zero", "sliding_window",
                lambda c: c.update(model_type="mistral", sliding_window=0))
    config_case("sliding-window-negative", "sliding_window",
                lambda c: c.update(model_type="mistral", sliding_window=-4))
    config_case("eos-beyond-int32", "eos_token_id", lambda c: c.update(eos_token_id=2**40))
    config_case("eos-beyond-vocab", "eos_token_id", lambda c: c.update(eos_token_id=100000))
    config_case("vocab-huge", "vocab_size", lambda c: c.update(vocab_size=2**40))
    config_case("rope-factor-inf", "factor",
                lambda c: c.update(rope_scaling={"rope_type": "linear", "factor": 1e999}))
    config_case("hidden-act-huge", "hidden_act", lambda c: c.update(hidden_act="x" * 200000), UNSUPPORTED)
    config_case("model-type-huge", "model_type", lambda c: c.update(model_type="y" * 1000000), UNSUPPORTED)

    d = model_dir(out, "cfg-deep", src)
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write('{"model_type": "llama", "hidden_act": ' + deep_json(100000) + "}")
    cases.append(Case("config-nested-100k", gen(d), LIMIT, "nested more than"))

    d = model_dir(out, "tok-deep", src)
    os.remove(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        f.write('{"model": ' + deep_json(100000) + "}")
    cases.append(Case("tokenizer-nested-100k", gen(d), LIMIT, "tokenizer.json"))

    d = model_dir(out, "tok-id-huge", src)
    with open(os.path.join(tiny, "tokenizer.json")) as f:
        tok = json.load(f)
    tok["added_tokens"] = [{"id": 2**40, "content": "<x>", "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True}]
    os.remove(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    cases.append(Case("tokenizer-id-beyond-int32", gen(d), BAD_INPUT, "tokenizer.json"))

    # NaN and infinity in base weights (a norm vector, a projection matrix): refused at load, naming
    # the tensor.
    for name, value, tensor in (("nan", float("nan"), "model.norm.weight"),
                                ("inf", float("inf"), "model.layers.0.self_attn.q_proj.weight"),
                                ("neg-inf", float("-inf"), "model.layers.1.mlp.down_proj.weight")):
        d = model_dir(out, "weights-" + name, src)
        with open(os.path.join(tiny, "model.safetensors"), "rb") as f:
            blob = bytearray(f.read())
        n = struct.unpack("<Q", blob[:8])[0]
        header = json.loads(blob[8:8 + n])
        entry = header[tensor]
        assert entry["dtype"] == "F32", entry
        struct.pack_into("<f", blob, 8 + n + entry["data_offsets"][0] + 4 * 5, value)
        os.remove(os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(blob)
        cases.append(Case("weights-" + name, gen(d), BAD_INPUT, f"tensor '{tensor}' holds a non-finite value"))

    # Files that are not regular files never block the reader.
    d = model_dir(out, "fifo-weights", src)
    os.remove(os.path.join(d, "model.safetensors"))
    os.mkfifo(os.path.join(d, "model.safetensors"))
    cases.append(Case("fifo-model-safetensors", gen(d), BAD_INPUT, "model.safetensors"))
    d = model_dir(out, "fifo-config", src)
    os.remove(os.path.join(d, "config.json"))
    os.mkfifo(os.path.join(d, "config.json"))
    cases.append(Case("fifo-config-json", gen(d), BAD_INPUT, "config.json"))
    p = os.path.join(out, "fifo.gguf")
    os.mkfifo(p)
    cases.append(Case("fifo-gguf", gen(p), BAD_INPUT, "fifo.gguf"))

    # Chat templates: programs from strangers run with budgets.
    def template_case(name, template, code, fragment):
        d = model_dir(out, "tpl-" + name, src, files={"chat_template.jinja": template})
        # Every template error names the file it came from, then what went wrong.
        cases.append(Case("template-" + name, gen(d, "--chat"), code, ("chat_template.jinja", fragment)))

    template_case("200k-filters", "{{ 'a'" + "|trim" * 200000 + " }}", BAD_INPUT, "chained too deeply")
    template_case("100k-concat", "{{ 'a'" + " ~ 'a'" * 100000 + " }}", BAD_INPUT, "chained too deeply")
    template_case("200k-attributes", "{{ messages" + ".x" * 200000 + " }}", BAD_INPUT, "chained too deeply")
    template_case("200k-calls", "{{ range" + "(1)" * 200000 + " }}", BAD_INPUT, "chained too deeply")
    template_case("nested-range-loops",
                  "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                  LIMIT, "evaluation steps")
    template_case("string-doubling",
                  "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                  "{% endfor %}{{ ns.s }}", LIMIT, "bytes")
    template_case("list-doubling",
                  "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
                  "{% endfor %}{{ ns.l|length }}", LIMIT, "items")
    template_case("output-flood", "{% for i in range(100000) %}{{ 'x' * 1000000 }}{% endfor %}", LIMIT, "bytes")
    template_case("binary-literal-0b", "{{0b", BAD_INPUT, "chat template")
    template_case("indent-1e9", "{{ 'a\nb'|indent(1000000000) }}", BAD_INPUT, "too large")
    template_case("tojson-indent-1e9", "{{ messages|tojson(indent=1000000000) }}", BAD_INPUT, "too large")
    template_case("huge-template", "x" * (2 << 20), LIMIT, "chat template")

    # Adapter configs.
    def adapter_case(name, path, code, fragment, base=None):
        cases.append(Case("adapter-" + name, ["inspect", path] + (["--base", base] if base else []), code, fragment))

    adapter_case("rank-pattern-100kB-key",
                 peft_dir(out, "peft-longkey", src, lambda c: c.update(rank_pattern={"q" * 100000: 4})),
                 BAD_INPUT, "rank_pattern")
    adapter_case("rank-pattern-backtracking",
                 peft_dir(out, "peft-backtrack", src, lambda c: c.update(rank_pattern={"(.*)*(.*)*(.*)*(.*)*x": 4})),
                 (BAD_INPUT, LIMIT), "rank_pattern")
    adapter_case("alpha-pattern-bad-regex",
                 peft_dir(out, "peft-badre", src, lambda c: c.update(alpha_pattern={"(": 4})),
                 BAD_INPUT, "alpha_pattern")
    adapter_case("config-nested-100k",
                 peft_dir(out, "peft-deep", src, raw_config=lambda c: json.dumps(c)[:-1] + ', "use_dora": '
                          + deep_json(100000) + "}"), LIMIT, "adapter_config.json")
    adapter_case("lora-alpha-1e308", peft_dir(out, "peft-alpha", src, lambda c: c.update(lora_alpha=1e308)),
                 BAD_INPUT, "scale")
    adapter_case("mlx-scale-1e308",
                 mlx_dir(out, "mlx-scale", src, lambda c: c["lora_parameters"].update(scale=1e308)),
                 BAD_INPUT, "scale")
    d = peft_dir(out, "peft-fifo", src)
    os.remove(os.path.join(d, "adapter_config.json"))
    os.mkfifo(os.path.join(d, "adapter_config.json"))
    adapter_case("config-fifo", d, BAD_INPUT, "adapter_config.json")

    # Command-line numbers: range-checked before anything runs (usage errors).
    fused = os.path.join(out, "never-written")
    for opt, val in (("--max-shard-gb", "-1"), ("--max-shard-gb", "nan"), ("--max-shard-gb", "inf"), ("-t", "-3")):
        cases.append(Case(f"cli-fuse{opt}={val}", ["fuse", "--base", tiny, "--adapter", peft, "--out", fused, opt, val],
                          BAD_REQUEST, opt.lstrip("-").split(",")[0]))
    for opt, val in (("--ctx-size", "-5"), ("--top-k", "-1"), ("--temp", "-1"), ("-t", "-3"), ("-n", "-2"),
                     ("--ctx-size", "100000000"), ("--q-group-size", "0")):
        cases.append(Case(f"cli-generate{opt}={val}", gen(tiny, opt, val), BAD_REQUEST, opt if opt != "-n" else "--max-tokens"))
    cases.append(Case("cli-ctx-beyond-model", gen(tiny, "--ctx-size", "100000"), BAD_REQUEST, "--ctx-size"))
    cases.append(Case("cli-adapter-scale-inf", ["fuse", "--base", tiny, "--adapter", peft + ":1e39", "--out", fused],
                      BAD_REQUEST, "not a finite number"))
    return cases


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    if os.path.exists(sys.argv[1]):
        shutil.rmtree(sys.argv[1])
    for c in make_cases(sys.argv[1], os.path.abspath(sys.argv[2])):
        print(c)
