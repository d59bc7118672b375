#!/usr/bin/env python3
"""graft serve under load, on loopback, greedy, N generated tokens per request (default 128).

Rows: aggregate decode tokens/s at 1, 4 and 8 concurrent streams; 8 streams with 8 different
adapters vs 8 streams sharing one; time to first token under load; POST /lora-adapters latency.
With --llama-server BIN (built from the llama-cpp-python sdist) and --peer-model/--peer-lora, the
same workload runs against llama-server (which serializes requests with different adapters) and
the ratios are printed. Engines are interleaved round by round; medians with min-max.

Usage: bench/bench_serve.py [--graft build/graft] [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
       [--rounds 3] [--tokens 128] [--threads 2] [--graft-args "--q-bits 4"] [--llama-server PATH --peer-model GGUF --peer-lora GGUF]

--fleet: adapters at fleet scale. For each count in --fleet-counts (1,10,100,1000) a fresh server runs with
`--metrics --allow-runtime-lora --lora-root DIR --lora-dir DIR --max-loras-resident K --parallel P` over DIR
(written by bench/fleet_adapters.py: DIR/<prefix><i>/), and --parallel clients send a fixed-seed random stream of
--fleet-requests /v1/completions requests (greedy, --fleet-tokens tokens, ignore_eos), each with "model" = one of
the first `count` adapters (loaded on first use through --lora-dir, or all registered up front with
--fleet-register-all). Per count: aggregate decode tokens/s (completion tokens / wall) and its ratio to one
adapter, request latency, the server's VmRSS/RssAnon/RssFile and peak VmHWM (/proc/PID/status, at the end of
the stream), adapter loads, evictions and registered adapters (/metrics); then on the idle server, for
--fleet-probes adapters not used by the stream: POST /v1/load_lora_adapter wall time, time from its return to
the first streamed token of a request using it, the same request's time to first token once resident, and
POST /v1/unload_lora_adapter. Counts are interleaved round by round; medians with min-max; a markdown table.
  bench/fleet_adapters.py /tmp/fleet --count 1008
  bench/bench_serve.py --fleet --fleet-dir /tmp/fleet [--fleet-counts 1,10,100,1000] [--max-loras-resident 64]
       [--lora-memory MB] [--parallel 8] [--fleet-requests 256] [--fleet-tokens 32] [--fleet-register-all]
Needs: requests (the project's .venv has it).
"""
import argparse
import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
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
    def __init__(self, cmd, port, log=None):
        self.url = f"http://127.0.0.1:{port}"
        out = open(log, "wb") if log else subprocess.DEVNULL
        self.p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT if log else subprocess.DEVNULL)
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


# ---- --fleet: adapters at fleet scale ----

FLEET_METRICS = ["graft:lora_adapter_loads_total", "graft:lora_adapter_evictions_total",
                 "graft:lora_adapters_registered", "graft:lora_adapter_resident_bytes",
                 "vllm:lora_adapter_load_seconds_sum", "vllm:lora_adapter_load_seconds_count"]
METRIC_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{.*\})?\s+(\S+)(\s+\S+)?$")


def scrape(url):
    """GET /metrics: {metric name: value summed over its label sets}."""
    r = requests.get(url + "/metrics", timeout=60)
    r.raise_for_status()
    out = {}
    for line in r.text.splitlines():
        m = METRIC_LINE.match(line.strip())
        if m and not line.startswith("#"):
            try:
                out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
            except ValueError:
                pass
    return out


def proc_memory(pid):
    """VmRSS, RssAnon, RssFile, VmHWM of a process in MiB (/proc/PID/status)."""
    mem = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                mem[k] = int(v.split()[0]) / 1024
    return mem


def api_post(session, url, route, body):
    r = session.post(url + route, json=body, timeout=3600)
    if r.status_code != 200:
        raise RuntimeError(f"POST {route} {json.dumps(body)} -> {r.status_code}: {r.text[:500]}")
    return r


def oai_completion(session, url, model, prompt, tokens):
    """One /v1/completions request; returns (completion tokens, seconds)."""
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
    if model is not None:
        body["model"] = model
    t0 = time.perf_counter()
    r = api_post(session, url, "/v1/completions", body)
    return r.json()["usage"]["completion_tokens"], time.perf_counter() - t0


def oai_stream_ttft(session, url, model, prompt, tokens):
    """Streams one /v1/completions request; returns (perf_counter at the first non-empty text chunk, start)."""
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "cache_prompt": False,
            "stream": True, "model": model}
    t0 = time.perf_counter()
    first = None
    with session.post(url + "/v1/completions", json=body, stream=True, timeout=3600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"POST /v1/completions (stream, model {model}) -> {r.status_code}: {r.text[:500]}")
        for line in r.iter_lines():
            if not line.startswith(b"data: "):
                continue
            if line[6:].strip() == b"[DONE]":
                break
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(f"stream error (model {model}): {ev['error']}")
            if first is None and any(c.get("text") for c in ev.get("choices", [])):
                first = time.perf_counter()
    if first is None:
        raise RuntimeError(f"stream (model {model}) produced no text")
    return first, t0


def fleet_names(a):
    """Indices i with DIR/<prefix><i>/ present."""
    pat = re.compile(re.escape(a.fleet_prefix) + r"(\d+)$")
    have = set()
    for n in os.listdir(a.fleet_dir):
        m = pat.match(n)
        if m and os.path.exists(os.path.join(a.fleet_dir, n, "adapter_config.json")):
            have.add(int(m.group(1)))
    return have


def fleet_server(a, count, rnd, log_dir, probes):
    """One server, one count: the stream, then the probes. Returns {row: value}."""
    port = free_port()
    cmd = [a.graft, "serve", "-m", a.model, "--port", str(port), "--metrics", "--allow-runtime-lora",
           "--lora-root", a.fleet_dir, "--lora-dir", a.fleet_dir, "--max-loras-resident", str(a.max_loras_resident),
           "--parallel", str(a.parallel), "--threads", str(a.threads), "--ctx-size", str(a.fleet_ctx * a.parallel)]
    if a.lora_memory is not None:
        cmd += ["--lora-memory", str(a.lora_memory)]
    cmd += a.graft_args.split()
    log = os.path.join(log_dir, f"serve-{count}-{rnd}.log")
    try:
        proc = Proc(cmd, port, log)
    except RuntimeError as e:
        with open(log, errors="replace") as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"{e}\ncommand: {' '.join(cmd)}\nserver output:\n{tail}") from None
    name = lambda i: f"{a.fleet_prefix}{i}"
    row = {}
    local = threading.local()

    def session():
        if not hasattr(local, "s"):
            local.s = requests.Session()
        return local.s

    try:
        url = proc.url
        with requests.Session() as s:
            if a.fleet_register_all:
                t0 = time.perf_counter()
                for i in range(count):
                    api_post(s, url, "/v1/load_lora_adapter", {"lora_name": name(i), "lora_path": name(i)})
                row["register all s"] = time.perf_counter() - t0
        # Warm-up on the base model (pages the weights in; touches no adapter).
        with ThreadPoolExecutor(a.parallel) as pool:
            list(pool.map(lambda k: oai_completion(session(), url, None, PROMPTS[k % len(PROMPTS)], a.fleet_tokens),
                          range(a.parallel)))
        rng = random.Random(a.seed)  # the same stream in every round
        stream = [(name(rng.randrange(count)), PROMPTS[rng.randrange(len(PROMPTS))]) for _ in range(a.fleet_requests)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(a.parallel) as pool:
            res = list(pool.map(lambda q: oai_completion(session(), url, q[0], q[1], a.fleet_tokens), stream))
        wall = time.perf_counter() - t0
        row["decode tok/s"] = sum(r[0] for r in res) / wall
        row["latency s"] = statistics.median(r[1] for r in res)
        row["distinct used"] = len({q[0] for q in stream})
        for k, v in proc_memory(proc.p.pid).items():
            row[k + " MiB"] = v
        m = scrape(url)
        row["missing metrics"] = [k for k in FLEET_METRICS if k not in m]
        row["loads"] = m.get("graft:lora_adapter_loads_total")
        row["evictions"] = m.get("graft:lora_adapter_evictions_total")
        row["registered"] = m.get("graft:lora_adapters_registered")
        rb = m.get("graft:lora_adapter_resident_bytes")
        row["resident MiB"] = rb / 2**20 if rb is not None else None
        if m.get("vllm:lora_adapter_load_seconds_count"):
            row["server load ms"] = m["vllm:lora_adapter_load_seconds_sum"] / m["vllm:lora_adapter_load_seconds_count"] * 1e3
        # Probes on the idle server: load, first token after load, first token once resident, unload.
        loads, after, resident, unloads = [], [], [], []
        with requests.Session() as s:
            for j in probes:
                pname = f"probe-{j}"
                t0 = time.perf_counter()
                api_post(s, url, "/v1/load_lora_adapter", {"lora_name": pname, "lora_path": name(j)})
                t1 = time.perf_counter()
                first, _ = oai_stream_ttft(s, url, pname, PROMPTS[j % len(PROMPTS)], 4)
                loads.append((t1 - t0) * 1e3)
                after.append((first - t1) * 1e3)
                first, start = oai_stream_ttft(s, url, pname, PROMPTS[j % len(PROMPTS)], 4)
                resident.append((first - start) * 1e3)
                t0 = time.perf_counter()
                api_post(s, url, "/v1/unload_lora_adapter", {"lora_name": pname})
                unloads.append((time.perf_counter() - t0) * 1e3)
        row["probe load ms"], row["probe load->1st token ms"] = loads, after
        row["probe resident TTFT ms"], row["probe unload ms"] = resident, unloads
    finally:
        proc.stop()
    return row


def fleet(a):
    counts = [int(c) for c in a.fleet_counts.split(",")]
    have = fleet_names(a)
    top = max(counts)
    lacking = [i for i in range(top) if i not in have]
    if lacking:
        raise SystemExit(f"{a.fleet_dir} lacks {len(lacking)} of {a.fleet_prefix}0..{a.fleet_prefix}{top - 1} "
                         f"(first: {a.fleet_prefix}{lacking[0]}); write them with bench/fleet_adapters.py")
    # Probe adapters: ones no stream uses (index >= the largest count) where the directory has them.
    spare = sorted(i for i in have if i >= top)[:a.fleet_probes]
    shared = [i for i in range(top - 1, -1, -1) if i not in spare][:a.fleet_probes - len(spare)]
    probes = spare + shared
    a.fleet_dir = os.path.abspath(a.fleet_dir)
    log_dir = tempfile.mkdtemp(prefix="bench-fleet-")
    rows = {}
    notes = set()
    for rnd in range(a.rounds):
        for count in counts:
            r = fleet_server(a, count, rnd, log_dir, probes)
            print(f"# round {rnd + 1}, {count} adapters: {r['decode tok/s']:.1f} tok/s, loads {r['loads']}, "
                  f"evictions {r['evictions']}, registered {r['registered']}, VmHWM {r['VmHWM MiB']:.0f} MiB", flush=True)
            if r["missing metrics"]:
                notes.add(f"not in /metrics: {', '.join(r['missing metrics'])}")
            for k, v in r.items():
                if k == "missing metrics" or v is None:
                    continue
                rows.setdefault((count, k), []).extend(v if isinstance(v, list) else [v])
    shutil.rmtree(log_dir, ignore_errors=True)

    load = os.getloadavg()
    print(f"\n# fleet: {a.rounds} rounds, {a.fleet_requests} requests x {a.fleet_tokens} tokens per count, "
          f"--parallel {a.parallel} (clients), --threads {a.threads}, --max-loras-resident {a.max_loras_resident}"
          + (f", --lora-memory {a.lora_memory}" if a.lora_memory is not None else "")
          + (", all registered up front" if a.fleet_register_all else ", loaded on first use (--lora-dir)")
          + f", load average {load[0]:.2f}")
    print(f"# adapters: {a.fleet_dir}; probes: {len(spare)} unused by any stream"
          + (f", {len(shared)} shared with the stream's set (generate more than {top} to avoid)" if shared else ""))
    def md(v, p=1):
        if not v:
            return "n/a"
        return f"{statistics.median(v):.{p}f} ({min(v):.{p}f}-{max(v):.{p}f})" if len(v) > 1 else f"{v[0]:.{p}f}"

    get = lambda c, k: rows.get((c, k), [])
    base = statistics.median(get(counts[0], "decode tok/s"))
    cols = [("adapters", None), ("used", "distinct used"), ("registered", "registered"), ("decode tok/s", "decode tok/s"),
            (f"vs {counts[0]}", "ratio"), ("latency s", "latency s"), ("loads", "loads"), ("evictions", "evictions"),
            ("resident MiB", "resident MiB"), ("VmRSS MiB", "VmRSS MiB"), ("RssAnon MiB", "RssAnon MiB"),
            ("RssFile MiB", "RssFile MiB"), ("VmHWM MiB", "VmHWM MiB")]
    if a.fleet_register_all:
        cols.insert(3, ("register all s", "register all s"))
    print("\n| " + " | ".join(c for c, _ in cols) + " |")
    print("|" + "---|" * len(cols))
    for c in counts:
        cells = []
        for _, k in cols:
            if k is None:
                cells.append(str(c))
            elif k == "ratio":
                cells.append(f"{statistics.median(get(c, 'decode tok/s')) / base:.2f}")
            elif k in ("used", "registered", "loads", "evictions", "distinct used"):
                v = get(c, k)
                cells.append((f"{statistics.median(v):.0f}" + (f" ({min(v):.0f}-{max(v):.0f})" if min(v) != max(v) else ""))
                             if v else "n/a")
            else:
                cells.append(md(get(c, k), 2 if k.endswith(" s") else 1))
        print("| " + " | ".join(cells) + " |")
    pcols = [("load_lora_adapter ms", "probe load ms"), ("load -> 1st token ms", "probe load->1st token ms"),
             ("TTFT resident ms", "probe resident TTFT ms"), ("unload_lora_adapter ms", "probe unload ms"),
             ("server load ms (mean)", "server load ms")]
    print(f"\n{len(probes)} distinct adapters per server, idle server after the stream (4-token streamed requests):\n")
    print("| adapters registered | " + " | ".join(c for c, _ in pcols) + " |")
    print("|" + "---|" * (len(pcols) + 1))
    for c in counts:
        print(f"| {c} | " + " | ".join(md(get(c, k)) for _, k in pcols) + " |")
    for n in sorted(notes):
        print(f"\nnote: {n}")


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
    ap.add_argument("--fleet", action="store_true", help="the fleet benchmark (see the top of this file) instead")
    ap.add_argument("--fleet-dir", help="adapters written by bench/fleet_adapters.py")
    ap.add_argument("--fleet-prefix", default="fleet-")
    ap.add_argument("--fleet-counts", default="1,10,100,1000")
    ap.add_argument("--fleet-requests", type=int, default=256, help="requests per count")
    ap.add_argument("--fleet-tokens", type=int, default=32, help="max_tokens per request")
    ap.add_argument("--fleet-ctx", type=int, default=512, help="context per slot (--ctx-size = this x --parallel)")
    ap.add_argument("--fleet-probes", type=int, default=5, help="adapters timed through load_lora_adapter per server")
    ap.add_argument("--fleet-register-all", action="store_true",
                    help="register all `count` adapters with load_lora_adapter before the stream")
    ap.add_argument("--max-loras-resident", type=int, default=64)
    ap.add_argument("--lora-memory", type=int, help="MB; passed to graft serve when given")
    ap.add_argument("--parallel", type=int, default=8, help="--fleet: slots and concurrent clients")
    ap.add_argument("--seed", type=int, default=0, help="--fleet: the request stream's seed")
    a = ap.parse_args()
    if a.fleet:
        if not a.fleet_dir:
            ap.error("--fleet needs --fleet-dir")
        return fleet(a)

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
