#!/usr/bin/env python3
"""Fuse benchmark: graft fuse vs PEFT merge_and_unload + save_pretrained vs mlx_lm.fuse, in one run.

SmolLM2-135M-Instruct (from the demo GGUF, dequantized and saved as a BF16 Hugging Face checkpoint)
with a rank-16 PEFT LoRA on all seven projections of every layer (random non-zero factors). Each
tool runs as its own process under /usr/bin/time -v, so wall time and peak RSS are comparable.
Needs torch, transformers, peft, mlx-lm (developer machine, not CI).
Usage: python3 bench/bench_fuse.py [--graft build/graft] [--work /tmp/graft-fuse-bench]
"""
import argparse, json, os, re, shutil, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GGUF = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def prepare(work):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from peft import LoraConfig, get_peft_model
    from safetensors.numpy import save_file
    base = os.path.join(work, "base")
    if not os.path.exists(os.path.join(base, "model.safetensors")):
        m = AutoModelForCausalLM.from_pretrained(os.path.dirname(GGUF), gguf_file=os.path.basename(GGUF), torch_dtype=torch.bfloat16)
        # transformers refuses to save a GGUF-loaded model; write the dequantized weights directly.
        os.makedirs(base, exist_ok=True)
        sd = {k: v.contiguous() for k, v in m.state_dict().items()}
        if m.config.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        from safetensors.torch import save_file as save_torch
        save_torch(sd, os.path.join(base, "model.safetensors"), metadata={"format": "pt"})
        cfg = m.config.to_dict()
        cfg.pop("quantization_config", None)
        cfg["torch_dtype"] = "bfloat16"
        # A GGUF-loaded config has no architectures; llama.cpp's convert_hf_to_gguf.py needs it.
        cfg["architectures"] = cfg.get("architectures") or [type(m).__name__]
        # transformers 5 writes rope_parameters only; mlx-lm's llama reads rope_theta.
        cfg.setdefault("rope_theta", (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        json.dump(cfg, open(os.path.join(base, "config.json"), "w"), indent=2)
        AutoTokenizer.from_pretrained(os.path.dirname(GGUF), gguf_file=os.path.basename(GGUF)).save_pretrained(base)
    peft_dir = os.path.join(work, "peft_r16")
    mlx_dir = os.path.join(work, "mlx_r16")
    if not os.path.exists(os.path.join(peft_dir, "adapter_model.safetensors")):
        torch.manual_seed(0)
        m = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.bfloat16)
        pm = get_peft_model(m, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS))
        with torch.no_grad():
            for n, p in pm.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.02)
        pm.save_pretrained(peft_dir)
        # The same adapter in mlx-lm's native layout: lora_a = Aᵀ [in, r], lora_b = Bᵀ [r, out], scale = alpha/r.
        os.makedirs(mlx_dir, exist_ok=True)
        tensors = {}
        for n, p in pm.named_parameters():
            if "lora_A" in n or "lora_B" in n:
                stem = n.replace("base_model.model.", "").replace(".default", "")
                key = stem.replace(".lora_A.weight", ".lora_a").replace(".lora_B.weight", ".lora_b")
                tensors[key] = p.detach().float().T.contiguous().numpy()
        save_file(tensors, os.path.join(mlx_dir, "adapters.safetensors"))
        json.dump({"fine_tune_type": "lora", "num_layers": -1,
                   "lora_parameters": {"rank": 16, "scale": 2.0, "dropout": 0.0, "keys": [f"self_attn.{t}" for t in TARGETS[:4]] + [f"mlp.{t}" for t in TARGETS[4:]]}},
                  open(os.path.join(mlx_dir, "adapter_config.json"), "w"))
    return base, peft_dir, mlx_dir


def timed(cmd, env=None):
    out = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out.stderr[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", out.stderr)
    h = float(wall.group(1) or 0); secs = h * 3600 + float(wall.group(2)) * 60 + float(wall.group(3))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", out.stderr).group(1)) / 1024
    return secs, rss


PEFT_MERGE = """
import sys, torch
from transformers import AutoModelForCausalLM
from peft import PeftModel
base, adapter, out = sys.argv[1:4]
m = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.bfloat16)
m = PeftModel.from_pretrained(m, adapter).merge_and_unload()
m.save_pretrained(out)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graft", default=os.path.join(ROOT, "build", "graft"))
    ap.add_argument("--work", default="/tmp/graft-fuse-bench")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    base, peft_dir, mlx_dir = prepare(a.work)
    out_size = os.path.getsize(os.path.join(base, "model.safetensors")) / 2**20
    runs = {
        "graft fuse": lambda o: [a.graft, "fuse", "--base", base, "--adapter", peft_dir, "--out", o],
        "PEFT merge_and_unload + save_pretrained": lambda o: [sys.executable, "-c", PEFT_MERGE, base, peft_dir, o],
        "mlx_lm.fuse": lambda o: [sys.executable, "-m", "mlx_lm", "fuse", "--model", base, "--adapter-path", mlx_dir, "--save-path", o],
    }
    results = {}
    for name, cmd in runs.items():
        best = None
        for i in range(a.repeats):
            o = os.path.join(a.work, "out")
            shutil.rmtree(o, ignore_errors=True)
            r = timed(cmd(o))
            best = r if best is None or r[0] < best[0] else best
        results[name] = best
    g = results["graft fuse"]
    print(f"SmolLM2-135M BF16 ({out_size:.0f} MiB of weights), rank-16 LoRA on all 7 projections x 30 layers; best of {a.repeats}")
    print(f"| tool | wall s | peak RSS MiB | RSS / output | graft speedup |")
    print(f"|---|---|---|---|---|")
    for name, (secs, rss) in results.items():
        print(f"| {name} | {secs:.2f} | {rss:.0f} | {rss / out_size:.2f} | {secs / g[0]:.1f}x |")


if __name__ == "__main__":
    main()
