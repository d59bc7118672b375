#!/usr/bin/env python3
"""Cost of constrained decoding per token: graft serve, one stream, greedy, the same prompt with and
without a constraint, interleaved round by round; decode ms per token from the server's own
`timings.predicted_per_token_ms` (medians with min-max).

Constraints measured: a permissive grammar (any text: nearly every token allowed at every step, the
mask's most expensive state), a JSON schema whose string fields keep the model inside JSON strings,
the same schema without maxLength (a bounded repetition makes every character a new grammar
state, whose mask is computed cold; an unbounded one loops on one warm state), and json_object mode. The unconstrained run uses ignore_eos so it never ends early; constrained runs
end when the grammar does, so each is compared per token.

Usage: bench/bench_grammar.py [--graft build/graft] [--model M] [--rounds 5] [--tokens 96] [--threads 2]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from bench_serve import free_port  # noqa: E402

PROMPT = "<|im_start|>user\nDescribe three ships as JSON.<|im_end|>\n<|im_start|>assistant\n"
SCHEMA = {"type": "array", "minItems": 3, "maxItems": 3,
          "items": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 200},
                                                     "story": {"type": "string", "maxLength": 400}},
                    "required": ["name", "story"], "additionalProperties": False}}
SCHEMA_FREE = {"type": "array", "minItems": 3, "maxItems": 3,
               "items": {"type": "object", "properties": {"name": {"type": "string"}, "story": {"type": "string"}},
                         "required": ["name", "story"], "additionalProperties": False}}
CASES = {
    "none": {"ignore_eos": True},
    "any-text grammar": {"grammar": "root ::= [^\\x00]*", "ignore_eos": True},
    "json_schema (strings with maxLength)": {"json_schema": SCHEMA},
    "json_schema (strings without maxLength)": {"json_schema": SCHEMA_FREE},
    "json_object": {"response_format": {"type": "json_object"}},
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graft", default=os.path.join(ROOT, "build", "graft"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([a.graft, "serve", "-m", a.model, "--port", str(port), "--threads", str(a.threads),
                             "--parallel", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                if requests.get(url + "/health", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        per_token = {k: [] for k in CASES}
        counts = {k: [] for k in CASES}
        body0 = {"prompt": PROMPT, "n_predict": a.tokens, "temperature": 0, "cache_prompt": True}
        requests.post(url + "/completion", json=body0, timeout=600)  # warm-up (and the prompt cache)
        for _ in range(a.rounds):
            for name, extra in CASES.items():
                r = requests.post(url + "/completion", json={**body0, **extra}, timeout=600).json()
                t = r["timings"]
                if t["predicted_n"] > 1:
                    per_token[name].append(t["predicted_per_token_ms"])
                    counts[name].append(t["predicted_n"])
        print(f"# bench_grammar: {a.rounds} rounds, up to {a.tokens} tokens, --threads {a.threads}, "
              f"load average {os.getloadavg()[0]:.2f}")
        print("| constraint | tokens | decode ms/token | vs none |\n|---|---|---|---|")
        base = statistics.median(per_token["none"])
        for name in CASES:
            v = per_token[name]
            m = statistics.median(v)
            print(f"| {name} | {statistics.median(counts[name]):.0f} | {m:.2f} ({min(v):.2f}-{max(v):.2f}) | "
                  f"{m / base:.3f} |")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
