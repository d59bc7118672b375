#!/usr/bin/env python3
"""A random Llama-family or Qwen3-MoE checkpoint of a chosen size, and a random PEFT LoRA for it, for
speed measurements on model shapes no downloadable model here has (decode cost is set by shapes and
bytes, not by what the weights say). Not a test fixture; nothing here is committed output.

    python3 bench/synthetic_model.py OUT_DIR [--hidden 2048 --intermediate 5632 --layers 22
        --heads 32 --kv-heads 4 --rank 16 --lora-dtype f32|bf16 --lora-only] --tokenizer-from HF_DIR
    python3 bench/synthetic_model.py OUT_DIR --family qwen3_moe [--layers 8 --experts 128 --top-k 8
        --moe-intermediate 768 --head-dim 128 --vocab 151936 ...] --tokenizer-from HF_DIR

--family qwen3_moe writes Qwen3MoeForCausalLM (Qwen3-30B-A3B's shapes by default but for the layer
count: q/k norms, untied lm_head, every layer sparse, norm_topk_prob true) with each expert as its
own matrices under the Hub's names (mlp.experts.E.{gate,up,down}_proj), streamed to disk one tensor
at a time (one layer is 1.2 GB of BF16: the whole model never sits in memory), and a LoRA of PEFT
per-expert pairs on every expert's gate/up/down plus q/k/v/o (what graft runs unfused per expert).

Writes OUT_DIR/base (config.json, model.safetensors in BF16, the tokenizer files copied from
HF_DIR, whose vocabulary sets vocab_size unless --vocab gives more rows) and OUT_DIR/lora (lora_r<R>_<dtype>; the
llama family writes OUT_DIR/lora for rank 16 F32:
adapter_config.json and
adapter_model.safetensors: F32 or BF16 factors of the given rank on q, k, v, o, gate, up and down of every
layer, B non-zero). Defaults: TinyLlama-1.1B's shapes. Needs numpy and safetensors.
"""
import argparse
import json
import os
import shutil

import numpy as np
from safetensors.numpy import save_file


def bf16(a):
    """float32 array -> bfloat16 bits (round to nearest even) as uint16, viewed by safetensors as BF16."""
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def save_with_bf16(tensors, path):
    """safetensors.numpy has no bfloat16: uint16 arrays (bf16 bits) are written as U16, then the header
    is rewritten with dtype BF16 (data offsets are relative to the end of the header, so the data is
    copied unchanged)."""
    save_file(tensors, path + ".u16")
    with open(path + ".u16", "rb") as src, open(path, "wb") as dst:
        n = int.from_bytes(src.read(8), "little")
        header = src.read(n).rstrip(b" ").replace(b'"dtype":"U16"', b'"dtype":"BF16"')
        header += b" " * (-len(header) % 8)
        dst.write(len(header).to_bytes(8, "little") + header)
        shutil.copyfileobj(src, dst, 1 << 24)
    os.remove(path + ".u16")


def write_streamed(specs, path):
    """A safetensors file from [(name, dtype, shape, make)], make() producing the array only when its
    bytes are written (header first: offsets follow from the shapes), so peak memory is one tensor."""
    size = {"BF16": 2, "F32": 4}
    header, off = {}, 0
    for name, dt, shape, _ in specs:
        n = size[dt] * int(np.prod(shape))
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for name, dt, shape, make in specs:
            a = make()
            assert a.shape == tuple(shape) and a.dtype == (np.uint16 if dt == "BF16" else np.float32), name
            f.write(np.ascontiguousarray(a).tobytes())


def moe(a, vocab, base):
    """Qwen3-MoE base (unless --lora-only) and its PEFT LoRA; see the module's docstring."""
    rng, lrng = np.random.default_rng(0), np.random.default_rng(1)
    H, D, F, E = a.hidden, a.head_dim, a.moe_intermediate, a.experts
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": H,
           "intermediate_size": 6144, "moe_intermediate_size": F, "num_experts": E, "num_experts_per_tok": a.top_k,
           "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": [], "num_hidden_layers": a.layers,
           "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads, "head_dim": D, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0, "max_position_embeddings": 4096, "vocab_size": vocab, "tie_word_embeddings": False,
           "hidden_act": "silu", "attention_bias": False, "use_sliding_window": False, "sliding_window": None,
           "router_aux_loss_coef": 0.001, "output_router_logits": False, "torch_dtype": "bfloat16",
           "bos_token_id": 1, "eos_token_id": 2}
    json.dump(cfg, open(os.path.join(base, "config.json"), "w"), indent=1)
    rand = lambda r, shape, s: (lambda: bf16(r.standard_normal(shape, np.float32) * s))  # noqa: E731
    ones = lambda n: (lambda: bf16(np.ones(n, np.float32)))  # noqa: E731
    attn = {"self_attn.q_proj": (a.heads * D, H), "self_attn.k_proj": (a.kv_heads * D, H),
            "self_attn.v_proj": (a.kv_heads * D, H), "self_attn.o_proj": (H, a.heads * D)}
    expert = {"gate_proj": (F, H), "up_proj": (F, H), "down_proj": (H, F)}
    w = [("model.embed_tokens.weight", "BF16", (vocab, H), rand(rng, (vocab, H), 0.02)),
         ("model.norm.weight", "BF16", (H,), ones(H)), ("lm_head.weight", "BF16", (vocab, H), rand(rng, (vocab, H), 0.02))]
    lora = []
    factor = (lambda shape: (lambda: lrng.standard_normal(shape, np.float32) * 0.01)) if a.lora_dtype == "f32" else \
        (lambda shape: rand(lrng, shape, 0.01))
    ldt = a.lora_dtype.upper()
    pair = lambda name, rows, cols: [  # noqa: E731
        ("base_model.model." + name + ".lora_A.weight", ldt, (a.rank, cols), factor((a.rank, cols))),
        ("base_model.model." + name + ".lora_B.weight", ldt, (rows, a.rank), factor((rows, a.rank)))]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        w += [(p + n + ".weight", "BF16", (k,), ones(k)) for n, k in
              (("input_layernorm", H), ("post_attention_layernorm", H), ("self_attn.q_norm", D), ("self_attn.k_norm", D))]
        for n, shape in attn.items():
            w.append((p + n + ".weight", "BF16", shape, rand(rng, shape, 0.02)))
            lora += pair(p + n, *shape)
        w.append((p + "mlp.gate.weight", "BF16", (E, H), rand(rng, (E, H), 0.02)))
        for e in range(E):
            for n, shape in expert.items():
                w.append((p + f"mlp.experts.{e}.{n}.weight", "BF16", shape, rand(rng, shape, 0.02)))
                lora += pair(p + f"mlp.experts.{e}.{n}", *shape)
    if not a.lora_only:
        write_streamed(w, os.path.join(base, "model.safetensors"))
    ldir = os.path.join(a.out, f"lora_r{a.rank}_{a.lora_dtype}")
    os.makedirs(ldir, exist_ok=True)
    write_streamed(lora, os.path.join(ldir, "adapter_model.safetensors"))
    json.dump({"peft_type": "LORA", "r": a.rank, "lora_alpha": 2 * a.rank, "base_model_name_or_path": base,
               "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
               "bias": "none", "fan_in_fan_out": False, "task_type": "CAUSAL_LM", "use_rslora": False,
               "use_dora": False, "modules_to_save": None},
              open(os.path.join(ldir, "adapter_config.json"), "w"), indent=1)
    mb = sum(int(np.prod(s)) for _, _, s, _ in lora) * (4 if ldt == "F32" else 2) / 1e6
    print(f"wrote {'' if a.lora_only else base + ' and '}{ldir} ({mb:.1f} MB of {ldt} factors)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tokenizer-from", required=True)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=22)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--lora-dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--lora-only", action="store_true", help="write OUT_DIR/lora only (same seed, same shapes)")
    ap.add_argument("--family", choices=["llama", "qwen3_moe"], default="llama")
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--moe-intermediate", type=int, default=768)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=0,
                    help="embedding and lm_head rows (0: the tokenizer's); more than the tokenizer has gives a "
                         "real model's head on a small tokenizer, e.g. 151936 for Qwen3 (the converter pads the "
                         "token list with unused [PAD<i>] tokens)")
    a = ap.parse_args()
    rng, lrng = np.random.default_rng(0), np.random.default_rng(1)
    tok = json.load(open(os.path.join(a.tokenizer_from, "tokenizer.json")))
    vocab = max(list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]) + 1
    if a.vocab:
        assert a.vocab >= vocab, f"--vocab {a.vocab} is below the tokenizer's {vocab} ids"
        vocab = a.vocab
    head_dim = a.hidden // a.heads
    base = os.path.join(a.out, "base")
    os.makedirs(base, exist_ok=True)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(a.tokenizer_from, f)):
            shutil.copy(os.path.join(a.tokenizer_from, f), base)
    if a.family == "qwen3_moe":
        return moe(a, vocab, base)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": a.hidden,
           "intermediate_size": a.intermediate, "num_hidden_layers": a.layers, "num_attention_heads": a.heads,
           "num_key_value_heads": a.kv_heads, "head_dim": head_dim, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "max_position_embeddings": 2048, "vocab_size": vocab, "tie_word_embeddings": True,
           "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2}
    json.dump(cfg, open(os.path.join(base, "config.json"), "w"), indent=1)
    shapes = {"self_attn.q_proj": (a.heads * head_dim, a.hidden), "self_attn.k_proj": (a.kv_heads * head_dim, a.hidden),
              "self_attn.v_proj": (a.kv_heads * head_dim, a.hidden), "self_attn.o_proj": (a.hidden, a.heads * head_dim),
              "mlp.gate_proj": (a.intermediate, a.hidden), "mlp.up_proj": (a.intermediate, a.hidden),
              "mlp.down_proj": (a.hidden, a.intermediate)}
    # Streamed as the MoE writer does (each tensor made when its bytes are written, in the order the
    # in-memory version drew them, so the values are the same): an 8B shape is 16 GB of BF16.
    rand = lambda r, shape, s: (lambda: bf16(r.standard_normal(shape, np.float32) * s))  # noqa: E731
    ones = lambda n: (lambda: bf16(np.ones(n, np.float32)))  # noqa: E731
    ldt = a.lora_dtype.upper()
    factor = (lambda shape: (lambda: lrng.standard_normal(shape, np.float32) * 0.01)) if a.lora_dtype == "f32" else \
        (lambda shape: rand(lrng, shape, 0.01))
    w = [("model.embed_tokens.weight", "BF16", (vocab, a.hidden), rand(rng, (vocab, a.hidden), 0.02)),
         ("model.norm.weight", "BF16", (a.hidden,), ones(a.hidden))]
    lora = []
    for i in range(a.layers):
        p = f"model.layers.{i}."
        w.append((p + "input_layernorm.weight", "BF16", (a.hidden,), ones(a.hidden)))
        w.append((p + "post_attention_layernorm.weight", "BF16", (a.hidden,), ones(a.hidden)))
        for name, (rows, cols) in shapes.items():
            w.append((p + name + ".weight", "BF16", (rows, cols), rand(rng, (rows, cols), 0.02)))
            lp = "base_model.model." + p + name
            lora.append((lp + ".lora_A.weight", ldt, (a.rank, cols), factor((a.rank, cols))))
            lora.append((lp + ".lora_B.weight", ldt, (rows, a.rank), factor((rows, a.rank))))
    if not a.lora_only:
        write_streamed(w, os.path.join(base, "model.safetensors"))
    ldir = os.path.join(a.out, "lora" if a.lora_dtype == "f32" and a.rank == 16 else f"lora_r{a.rank}_{a.lora_dtype}")
    os.makedirs(ldir, exist_ok=True)
    write_streamed(lora, os.path.join(ldir, "adapter_model.safetensors"))
    json.dump({"peft_type": "LORA", "r": a.rank, "lora_alpha": 2 * a.rank, "base_model_name_or_path": base,
               "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
               "bias": "none", "fan_in_fan_out": False, "task_type": "CAUSAL_LM", "use_rslora": False,
               "use_dora": False, "modules_to_save": None},
              open(os.path.join(ldir, "adapter_config.json"), "w"), indent=1)
    mb = sum(int(np.prod(s)) for _, _, s, _ in lora) * (4 if ldt == "F32" else 2) / 1e6
    print(f"wrote {'' if a.lora_only else base + ' and '}{ldir} ({mb:.1f} MB of {ldt} factors)")


if __name__ == "__main__":
    main()
