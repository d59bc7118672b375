#!/usr/bin/env python3
"""Decode benchmark for adapters and quantized bases: graft vs mlx-lm (CPU), in one run.

SmolLM2-135M-Instruct as a BF16 Hugging Face checkpoint (dequantized from the demo GGUF by
bench_fuse.prepare) with a rank-16 LoRA on all seven projections of all 30 layers (random non-zero
factors, PEFT layout for graft, the same adapter in mlx-lm's layout for mlx-lm). Configurations,
each decoding --tokens tokens greedily at batch 1 after a short prompt:

  base BF16 | fused adapter (--adapter) | unfused adapter (--lora) | 4-bit g64 base (graft quantize,
  bit-identical to mlx_lm.convert -q) | 4-bit base + unfused adapter

graft's decode tokens/s come from its own stderr report; mlx-lm's from mlx_lm.generate's
"Generation: ... tokens-per-sec" line (mlx on the Linux CPU backend; the LoRA stays unfused there).
Runs are interleaved and repeated; the best of --repeats is reported (the machine is shared).
Needs torch, transformers, peft, mlx-lm (developer machine, not CI).
Usage: python3 bench/bench_decode_adapters.py [--graft build/graft] [--threads 2] [--tokens 128]
"""
import argparse, os, re, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_fuse import ROOT, prepare  # noqa: E402

PROMPT = "Write a short story about a robot who learns to paint."


def graft_tps(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{r.stderr}")
    m = re.search(r"generated: (\d+) tokens, ([0-9.]+) tokens/s", r.stderr)
    return float(m.group(2))


def mlx_tps(model, tokens, adapter=None):
    cmd = [sys.executable, "-m", "mlx_lm", "generate", "--model", model, "--prompt", PROMPT, "--max-tokens",
           str(tokens), "--temp", "0", "--ignore-chat-template"]
    if adapter:
        cmd += ["--adapter-path", adapter]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"Generation: \d+ tokens, ([0-9.]+) tokens-per-sec", r.stdout + r.stderr)
    return float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graft", default=os.path.join(ROOT, "build", "graft"))
    ap.add_argument("--work", default="/tmp/graft-fuse-bench")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-mlx", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    base, peft_dir, mlx_dir = prepare(a.work)
    # The same adapter with BF16 factors (what PEFT saves when trained in bf16 without
    # autocast_adapter_dtype): an unfused term streams 2·r·(in+out) bytes instead of 4·r·(in+out).
    peft_bf16 = os.path.join(a.work, "peft_r16_bf16")
    if not os.path.exists(os.path.join(peft_bf16, "adapter_model.safetensors")):
        import shutil, torch
        from safetensors.torch import load_file, save_file
        os.makedirs(peft_bf16, exist_ok=True)
        shutil.copy(os.path.join(peft_dir, "adapter_config.json"), peft_bf16)
        t = load_file(os.path.join(peft_dir, "adapter_model.safetensors"))
        save_file({k: v.to(torch.bfloat16) for k, v in t.items()}, os.path.join(peft_bf16, "adapter_model.safetensors"))
    q4 = os.path.join(a.work, "base-q4g64")
    if not os.path.exists(os.path.join(q4, "model.safetensors")):
        subprocess.run([a.graft, "quantize", "-m", base, "-o", q4, "--bits", "4", "--group-size", "64"], check=True)

    def g(model, *extra):
        return lambda: graft_tps([a.graft, "generate", "-m", model, "-p", PROMPT, "--temp", "0", "-n", str(a.tokens),
                                  "--ignore-eos", "-t", str(a.threads), *extra])

    configs = {
        "base BF16": g(base),
        "fused rank-16 adapter": g(base, "--adapter", peft_dir),
        "unfused rank-16 adapter": g(base, "--lora", peft_dir),
        "fused rank-16 adapter, BF16 factors": g(base, "--adapter", peft_bf16),
        "unfused rank-16 adapter, BF16 factors": g(base, "--lora", peft_bf16),
        "4-bit g64 base": g(q4),
        "4-bit g64 base + unfused adapter": g(q4, "--lora", peft_dir),
        # --no-mmap: every configuration's weights in anonymous memory, so base, fused and unfused
        # stream from the same kind of pages.
        "base BF16 --no-mmap": g(base, "--no-mmap"),
        "fused rank-16 adapter --no-mmap": g(base, "--adapter", peft_dir, "--no-mmap"),
        "unfused rank-16 adapter --no-mmap": g(base, "--lora", peft_dir, "--no-mmap"),
        "unfused, BF16 factors --no-mmap": g(base, "--lora", peft_bf16, "--no-mmap"),
        "4-bit g64 base --no-mmap": g(q4, "--no-mmap"),
    }
    if not a.no_mlx:
        configs.update({
            "mlx-lm base BF16": lambda: mlx_tps(base, min(a.tokens, 32)),
            "mlx-lm 4-bit g64 base": lambda: mlx_tps(q4, min(a.tokens, 32)),
            "mlx-lm 4-bit + LoRA (unfused)": lambda: mlx_tps(q4, min(a.tokens, 32), mlx_dir),
        })
    best = {k: 0.0 for k in configs}
    for rep in range(a.repeats):
        for name, run in configs.items():
            if name.startswith("mlx-lm") and rep > 0:
                continue  # mlx's Linux CPU backend is slow (reference BLAS); one run is enough
            v = run()
            best[name] = max(best[name], v if v == v else 0.0)
    ref = best["base BF16"]
    print(f"SmolLM2-135M, batch 1, {a.tokens} greedy tokens, {a.threads} thread(s), best of {a.repeats}")
    print("| configuration | decode tok/s | vs graft base BF16 |")
    print("|---|---|---|")
    for name, tps in best.items():
        print(f"| {name} | {tps:.1f} | {tps / ref:.2f}x |")
    print(f"unfused / fused: {best['unfused rank-16 adapter'] / best['fused rank-16 adapter']:.3f} (F32 factors), "
          f"{best['unfused rank-16 adapter, BF16 factors'] / best['fused rank-16 adapter, BF16 factors']:.3f} (BF16 factors); "
          f"4-bit / BF16: {best['4-bit g64 base'] / ref:.2f}x")
    f = best["fused rank-16 adapter --no-mmap"]
    print(f"--no-mmap: unfused / fused {best['unfused rank-16 adapter --no-mmap'] / f:.3f} (F32 factors), "
          f"{best['unfused, BF16 factors --no-mmap'] / f:.3f} (BF16 factors); fused / base "
          f"{f / best['base BF16 --no-mmap']:.3f}; 4-bit / BF16 "
          f"{best['4-bit g64 base --no-mmap'] / best['base BF16 --no-mmap']:.2f}x")


if __name__ == "__main__":
    main()
