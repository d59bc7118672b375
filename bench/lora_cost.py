#!/usr/bin/env python3
"""Decode cost of an unfused LoRA per factor type (--lora-dtype), side by side with llama.cpp.

    python3 bench/lora_cost.py --model M.gguf --lora ADAPTER [--dtypes auto,bf16,q8_0] [--threads 1,2]
        [--rounds 5] [--tokens 128] [--llama-bin DIR --llama-lora F32.gguf[,Q8_0.gguf]] [--graft build/graft]

Per round and thread count, interleaved: graft without the adapter, then with it at each
--lora-dtype; then llama.cpp's llama-completion without and with each --llama-lora file (its
repacked weights off, -nr, as bench/vs_llamacpp.sh's LoRA rows). Each run decodes --tokens tokens
after a short prompt (--ignore-eos, greedy). Ratios are taken within a round (LoRA tok/s over the
same round's base), then the median and min-max over rounds are printed with the load average.
Nothing is asserted: this is a measurement (docs/PERFORMANCE.md).
"""
import argparse
import os
import re
import statistics
import subprocess
import time

PROMPT = "Once upon a time"


def graft_tps(graft, model, threads, tokens, extra):
    cmd = [graft, "generate", "-m", model, "-p", PROMPT, "--temp", "0", "-n", str(tokens), "--ignore-eos",
           "-t", str(threads), *extra]
    err = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=True).stderr
    return float(re.search(r"generated: \d+ tokens, ([0-9.]+) tokens/s", err).group(1))


def llama_tps(bin_dir, model, threads, tokens, extra):
    cmd = [os.path.join(bin_dir, "llama-completion"), "-m", model, "-p", PROMPT, "-n", str(tokens), "--ignore-eos",
           "-t", str(threads), "--temp", "0", "-no-cnv", "-nr", *extra]
    out = subprocess.run(cmd, capture_output=True, text=True, errors="replace", stdin=subprocess.DEVNULL)
    rates = [float(m.group(1)) for line in (out.stdout + out.stderr).splitlines()
             if "eval time" in line and "prompt" not in line
             for m in [re.search(r"([0-9.]+) tokens per second", line)] if m]
    if not rates:
        raise SystemExit("llama-completion printed no eval rate:\n" + out.stderr[-2000:])
    return rates[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--model", required=True)
    ap.add_argument("--lora", required=True, help="the adapter graft runs (any format graft reads)")
    ap.add_argument("--dtypes", default="auto,bf16,q8_0")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--graft", default=os.path.join(root, "build", "graft"))
    ap.add_argument("--graft-args", default="", help="extra arguments for every graft run (e.g. '--q-bits 4')")
    ap.add_argument("--llama-bin", help="llama.cpp build's bin/ (llama-completion)")
    ap.add_argument("--llama-model", help="the model llama.cpp runs (default: --model)")
    ap.add_argument("--llama-lora", default="", help="comma-separated GGUF LoRA files for llama.cpp")
    a = ap.parse_args()
    dtypes = a.dtypes.split(",")
    threads = [int(t) for t in a.threads.split(",")]
    llama_loras = [f for f in a.llama_lora.split(",") if f] if a.llama_bin else []
    extra = a.graft_args.split()
    ratios = {}  # (engine, variant, threads) -> [ratio per round]
    rates = {}
    load = [os.getloadavg()[0]]
    print(f"start {time.strftime('%H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()}")
    for r in range(a.rounds):
        for t in threads:
            base = graft_tps(a.graft, a.model, t, a.tokens, extra)
            rates.setdefault(("graft", "base", t), []).append(base)
            line = [f"r{r + 1} t{t} graft base {base:.1f}"]
            for d in dtypes:
                v = graft_tps(a.graft, a.model, t, a.tokens, extra + ["--lora", a.lora, "--lora-dtype", d])
                rates.setdefault(("graft", d, t), []).append(v)
                ratios.setdefault(("graft", d, t), []).append(v / base)
                line.append(f"{d} {v:.1f}")
            if llama_loras:
                lb = llama_tps(a.llama_bin, a.llama_model or a.model, t, a.tokens, [])
                rates.setdefault(("llama.cpp", "base", t), []).append(lb)
                line.append(f"| llama.cpp base {lb:.1f}")
                for f in llama_loras:
                    v = llama_tps(a.llama_bin, a.llama_model or a.model, t, a.tokens, ["--lora", f])
                    name = os.path.basename(f)
                    rates.setdefault(("llama.cpp", name, t), []).append(v)
                    ratios.setdefault(("llama.cpp", name, t), []).append(v / lb)
                    line.append(f"{name} {v:.1f}")
            load.append(os.getloadavg()[0])
            print(" ".join(line), flush=True)
    print(f"end {time.strftime('%H:%M:%S', time.gmtime())} UTC, load {min(load):.2f}-{max(load):.2f}")
    print("| engine | factors | threads | base tok/s | with LoRA tok/s | LoRA / base, median (min-max) |")
    print("|---|---|---|---|---|---|")
    for (eng, var, t), rs in ratios.items():
        b = statistics.median(rates[(eng, "base", t)])
        v = statistics.median(rates[(eng, var, t)])
        print(f"| {eng} | {var} | {t} | {b:.1f} | {v:.1f} | {statistics.median(rs):.2f} ({min(rs):.2f}-{max(rs):.2f}) |")


if __name__ == "__main__":
    main()
