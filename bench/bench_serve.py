#!/usr/bin/env python3
"""graft serve under load, on loopback, greedy, N generated tokens per request (default 128).

Rows: aggregate decode tokens/s at 1, 4 and 8 concurrent streams; 8 streams with 8 different
adapters vs 8 streams sharing one; time to first token under load; POST /lora-adapters latency.
With --llama-server BIN (built from the llama-cpp-python sdist) and --peer-model/--peer-lora, the
same workload runs against llama-server (which serializes requests with different adapters) and
the ratios are printed. Engines are interleaved round by round; medians with min-max.

Usage: bench/bench_serve.py [--graft build/graft] [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
       [--rounds 3] [--tokens 128] [--threads 2] [--graft-args "--q-bits 4"] [--llama-server PATH --peer-model GGUF --peer-lora GGUF]
Needs: requests (the project's .venv has it).
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["The history of sailing ships", "Write a short poem about the sea", "Explain how a compass works",
           "The best way to learn a language", "A recipe for bread", "Why is the sky blue",
           "Tell me about the moon", "How do airplanes fly"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    def __init__(self, cmd, port):
        self.url = f"http://127.0.0.1:{port}"
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(3000):
            try:
                if requests.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            if self.p.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited: {self.p.returncode}")
            time.sleep(0.1)
        raise RuntimeError("server did not start")

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=60)


def stream_request(url, prompt, tokens, lora):
    """Streams one /completion; returns (time to first token, tokens generated, end time)."""
    body = {"prompt": prompt, "n_predict": tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "cache_prompt": False}
    if lora is not None:
        body["lora"] = lora
    t0 = time.perf_counter()
    ttft, n = None, 0
    with requests.post(url + "/completion", json=body, stream=True, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith(b"data: "):
                continue
            ev = json.loads(line[6:])
            if ev.get("stop"):
                break
            if ev.get("content") or ev.get("tokens"):
                if ttft is None:
                    ttft = time.perf_counter() - t0
                n += max(1, len(ev.get("tokens", [])))
    return ttft, n, time.perf_counter()


def workload(url, streams, tokens, loras):
    """`streams` concurrent requests, request i with loras[i]; returns (aggregate tok/s, median TTFT s)."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(streams) as pool:
        res = list(pool.map(lambda i: stream_request(url, PROMPTS[i % len(PROMPTS)], tokens, loras[i]), range(streams)))
    wall = max(r[2] for r in res) - t0
    return sum(r[1] for r in res) / wall, statistics.median(r[0] for r in res)


def post_latency(url, n=200):
    """POST /lora-adapters round trips on one keep-alive connection, and the same for GET /health (the
    HTTP floor: loopback, parsing, one response). Returns (median POST ms, median GET /health ms):
    POST minus the floor is the time the server spends on the change itself."""
    post, floor = [], []
    with requests.Session() as s:
        for i in range(n):
            t0 = time.perf_counter()
            r = s.post(url + "/lora-adapters", json=[{"id": 0, "scale": 0.5 + (i % 2) * 0.5}])
            post.append(time.perf_counter() - t0)
            assert r.status_code == 200
            t0 = time.perf_counter()
            r = s.get(url + "/health")
            floor.append(time.perf_counter() - t0)
            assert r.status_code == 200
    return statistics.median(post) * 1e3, statistics.median(floor) * 1e3


def summary(values):
    return f"{statistics.median(values):8.2f} ({min(values):.2f}-{max(values):.2f})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--graft", default=os.path.join(ROOT, "build", "graft"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--adapter", default=os.path.join(ROOT, "demo", "adapters", "pirate-peft"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--graft-args", default="", help="more `graft serve` options, e.g. \"--q-bits 4\"")
    ap.add_argument("--llama-server")
    ap.add_argument("--peer-model")
    ap.add_argument("--peer-lora", help="the adapter converted by llama.cpp's convert_lora_to_gguf.py")
    ap.add_argument("--peer-no-repack", action=argparse.BooleanOptionalAction, default=True,
                    help="pass -nr to llama-server (default on: its AMX path crashes at batch > 1 in these VMs)")
    a = ap.parse_args()

    # Eight distinct adapters: copies of one (distinct registry entries, so eight separate sets of
    # low-rank terms per step: the cost of eight different adapters).
    tmp = tempfile.mkdtemp()
    adapters = []
    for i in range(8):
        d = os.path.join(tmp, f"adapter{i}")
        shutil.copytree(a.adapter, d)
        adapters.append(d)
    engines = {}
    port = free_port()
    engines["graft"] = (Proc([a.graft, "serve", "-m", a.model, "--port", str(port), "--parallel", "8", "--threads",
                              str(a.threads), "--ctx-size", "8192", "--lora", ",".join(adapters)] + a.graft_args.split(),
                             port), 8)
    if a.llama_server:
        port = free_port()
        # -nr: no repacked (AMX) weight buffers; llama.cpp's AMX path dies with SIGILL at batch > 1 in
        # this project's VMs (docs/PERFORMANCE.md).
        cmd = [a.llama_server, "-m", a.peer_model, "--port", str(port), "-np", "8", "-t", str(a.threads), "-c", "8192"]
        if a.peer_no_repack:
            cmd.append("-nr")
        for _ in range(8):
            cmd += ["--lora", a.peer_lora]
        engines["llama-server"] = (Proc(cmd, port), 8)
    rows = {}
    try:
        for rnd in range(a.rounds):
            for name, (proc, n_ad) in engines.items():
                url = proc.url
                one = [{"id": 0, "scale": 1.0}]
                only = lambda k: [{"id": k, "scale": 1.0}]
                for label, streams, loras in [
                    ("1 stream, adapter 0", 1, [one]),
                    ("4 streams, adapter 0", 4, [one] * 4),
                    ("8 streams, one shared adapter", 8, [one] * 8),
                    ("8 streams, 8 different adapters", 8, [only(k) for k in range(8)]),
                    ("8 streams, no adapter", 8, [[]] * 8),
                ]:
                    tps, ttft = workload(url, streams, a.tokens, loras)
                    rows.setdefault((name, label), []).append(tps)
                    rows.setdefault((name, label + " TTFT ms"), []).append(ttft * 1e3)
                post, floor = post_latency(url)
                rows.setdefault((name, "POST /lora-adapters ms (client round trip)"), []).append(post)
                rows.setdefault((name, "GET /health ms (the HTTP floor)"), []).append(floor)
                rows.setdefault((name, "POST /lora-adapters ms at the server (minus floor)"), []).append(post - floor)
    finally:
        for proc, _ in engines.values():
            proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()
    print(f"# {a.rounds} rounds, {a.tokens} tokens/request, threads {a.threads}, load average {load[0]:.2f}")
    print(f"{'engine':14} {'row':52} median (min-max)")
    for (name, label), v in rows.items():
        print(f"{name:14} {label:52} {summary(v)}")
    g = lambda label: statistics.median(rows[("graft", label)])
    print(f"graft: 8 streams / 1 stream = {g('8 streams, one shared adapter') / g('1 stream, adapter 0'):.2f}x; "
          f"8 different / 8 shared adapters = {g('8 streams, 8 different adapters') / g('8 streams, one shared adapter'):.2f}")
    if "llama-server" in engines:
        for (name, label), v in rows.items():
            if name == "graft" and ("llama-server", label) in rows and not label.endswith(" ms") and "ms (" not in label:
                print(f"graft / llama-server, {label}: {statistics.median(v) / statistics.median(rows[('llama-server', label)]):.2f}")


if __name__ == "__main__":
    main()
