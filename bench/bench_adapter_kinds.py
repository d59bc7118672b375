#!/usr/bin/env python3
"""Decode cost of unfused adapter kinds on SmolLM2-135M (the demo GGUF): DoRA vs the same LoRA, LoKr and
LoHa vs a LoRA of about the same parameter count, all on the seven projections of all 30 layers.

Adapters are written here with numpy (random non-zero factors; no training needed for a speed test):
  lora16   PEFT LoRA r=16                       | dora16  the same factors + lora_magnitude_vector (use_dora)
  lokr     LyCORIS LoKr, w1 [4, 4] and w2 full   | lora_eq kohya LoRA with per-module rank ~ LoKr's parameters
  loha4    LyCORIS LoHa dim 4 (unfused as its exact rank-16 pair)
Each configuration decodes --tokens tokens greedily at batch 1 (graft generate --lora), interleaved, best
of --repeats (the machine may be shared). A scale change on a DoRA adapter costs no precomputation:
the per-row factor for a new scale is formed from three stored vectors (O(rows)) at the next token.
Usage: python3 bench/bench_adapter_kinds.py [--graft build/graft] [--threads 2] [--tokens 64] [--repeats 3]
"""
import argparse, json, os, re, subprocess, sys, tempfile

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
H, F, KV, L = 576, 1536, 192, 30
SHAPES = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (KV, H), "self_attn.v_proj": (KV, H),
          "self_attn.o_proj": (H, H), "mlp.gate_proj": (F, H), "mlp.up_proj": (F, H), "mlp.down_proj": (H, F)}


def write_adapters(d, rng):
    def rnd(*s, scale=0.02):
        return (rng.standard_normal(s) * scale).astype(np.float32)
    lora, dora, lokr, lora_eq, loha = {}, {}, {}, {}, {}
    for l in range(L):
        for name, (out, inp) in SHAPES.items():
            m = f"model.layers.{l}.{name}"
            p = "base_model.model." + m
            a, b = rnd(16, inp), rnd(out, 16)
            lora[p + ".lora_A.weight"], lora[p + ".lora_B.weight"] = a, b
            dora[p + ".lora_A.weight"], dora[p + ".lora_B.weight"] = a, b
            dora[p + ".lora_magnitude_vector"] = (1 + rnd(out, scale=0.1)).astype(np.float32)
            k = "lycoris_" + m.replace(".", "_")
            lokr[k + ".lokr_w1"] = rnd(4, 4, scale=1.0)
            lokr[k + ".lokr_w2"] = rnd(out // 4, inp // 4)
            r_eq = max(1, round((16 + (out // 4) * (inp // 4)) / (out + inp)))
            kk = "lora_unet_" + m.replace(".", "_")
            lora_eq[kk + ".lora_down.weight"], lora_eq[kk + ".lora_up.weight"] = rnd(r_eq, inp), rnd(out, r_eq)
            for w in ("w1", "w2"):
                loha[k + f".hada_{w}_a"], loha[k + f".hada_{w}_b"] = rnd(out, 4, scale=0.1), rnd(4, inp, scale=0.1)
    for name, tensors, cfg in [("lora16", lora, {"use_dora": False}), ("dora16", dora, {"use_dora": True})]:
        os.makedirs(os.path.join(d, name))
        save_file(tensors, os.path.join(d, name, "adapter_model.safetensors"))
        with open(os.path.join(d, name, "adapter_config.json"), "w") as f:
            json.dump({"peft_type": "LORA", "r": 16, "lora_alpha": 16, **cfg}, f)
    save_file(lokr, os.path.join(d, "lokr.safetensors"))
    save_file(lora_eq, os.path.join(d, "lora_eq.safetensors"))
    save_file(loha, os.path.join(d, "loha4.safetensors"))
    params = {n: sum(v.size for k, v in t.items() if not k.endswith("magnitude_vector"))
              for n, t in [("lora16", lora), ("dora16", dora), ("lokr", lokr), ("lora_eq", lora_eq), ("loha4", loha)]}
    return {"lora16": os.path.join(d, "lora16"), "dora16": os.path.join(d, "dora16"),
            "lokr": os.path.join(d, "lokr.safetensors"), "lora_eq": os.path.join(d, "lora_eq.safetensors"),
            "loha4": os.path.join(d, "loha4.safetensors")}, params


def decode_tps(graft, threads, tokens, lora):
    cmd = [graft, "generate", "-m", MODEL, "-p", "Write a short story about a robot.", "--temp", "0", "-n",
           str(tokens), "--threads", str(threads), "--no-mmap"]
    if lora:
        cmd += ["--lora", lora]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    m = re.search(r"([0-9.]+) tokens/s", r.stderr.split("decode")[-1]) or re.search(r"([0-9.]+) tokens/s", r.stderr)
    return float(m.group(1)), r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graft", default=os.path.join(ROOT, "build", "graft"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        paths, params = write_adapters(d, np.random.default_rng(0))
        configs = [("base", None)] + list(paths.items())
        best = {n: 0.0 for n, _ in configs}
        for _ in range(a.repeats):
            for n, p in configs:
                tps, _ = decode_tps(a.graft, a.threads, a.tokens, p)
                best[n] = max(best[n], tps)
        for n, _ in configs:
            rel = f"{100 * (best['base'] / best[n] - 1):+.1f}% time/token vs base" if n != "base" else ""
            print(f"{n:8s} {best[n]:7.2f} tok/s  params {params.get(n, 0):>9d}  {rel}")
        print(f"dora16 vs lora16: {100 * (best['lora16'] / best['dora16'] - 1):+.1f}% time per token")
        print(f"lokr vs lora_eq:  {100 * (best['lora_eq'] / best['lokr'] - 1):+.1f}% time per token")


if __name__ == "__main__":
    main()
