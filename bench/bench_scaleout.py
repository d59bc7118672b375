#!/usr/bin/env python3
"""Scale-out on loopback: R `graft serve` replicas behind deploy/loopback_router.py, one adapter stream,
routing policies compared.

Each replica: `graft serve --metrics --allow-runtime-lora --lora-root DIR --lora-dir DIR
--max-loras-resident K --parallel P --threads T --ctx-size 512*P` on a free port, over DIR (written by
bench/fleet_adapters.py: DIR/<prefix><i>/). The router runs as a subprocess on its own port with
`--policy lora` (its default: queue + KV + the lora-load-state score), `random` or `round-robin`.
C clients (default R*P) send a fixed-seed random stream of /v1/completions requests (greedy, --tokens
tokens, ignore_eos), each with "model" = one of the first A adapters (default A = R*K: the adapters fit
the fleet only if each replica holds its own disjoint share), uniform or Zipf (--zipf S).

Every (round, policy) starts cold: fresh replicas and router, a few base-model requests to each replica
(pages the weights in; touches no adapter), then the stream. Policies are interleaved round by round
(their order rotating); medians with min-max. Per policy: requests/s, generated tokens/s, p50/p99
request latency, adapter builds and evictions summed over the replicas (graft:lora_adapter_loads_total,
graft:lora_adapter_evictions_total: after - before the stream), builds per request, and
hit = 1 - builds/requests (the share of requests that found their adapter built on the replica they
reached; an upper bound, as requests waiting on the same build count it once). Builds split into first
touches (distinct (replica, adapter) pairs served, from graft:lora_adapter_requests_total{adapter_name})
and rebuilds after eviction. Placement after the stream: served replication = sum over replicas of the
distinct adapters each served / distinct adapters served by the fleet (1.0: disjoint; R: every adapter
everywhere), resident replication the same over the built (vllm:lora_adapter_loaded level="gpu") sets,
and per replica (ranked by requests served): requests, distinct adapters, builds, evictions, resident.

--policies may also name `single`: one replica with the same K, the stream sent to it directly (no
router). It has a third of the slots and of the adapter budget, so it is not the same fleet budget.

  bench/fleet_adapters.py /tmp/fleet --count 48   (or an existing directory of fleet-<i>/)
  bench/bench_scaleout.py --fleet-dir /tmp/fleet [--replicas 3] [--max-loras-resident 16] [--parallel 4]
       [--threads 1] [--adapters R*K] [--requests 480] [--tokens 16] [--clients R*P] [--zipf 0]
       [--rounds 3] [--policies lora,random,round-robin]
Needs: requests (the project's .venv has it).
"""
import argparse
import importlib.util
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import random
from concurrent.futures import ThreadPoolExecutor

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import PROMPTS, Proc, free_port  # noqa: E402


def load_router_module(path):
    """deploy/loopback_router.py as a module (its Prometheus parser), without writing deploy/__pycache__."""
    spec = importlib.util.spec_from_file_location("loopback_router", path)
    mod = importlib.util.module_from_spec(spec)
    dont, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = dont
    return mod


def start(cmd, port, log):
    try:
        return Proc(cmd, port, log)
    except RuntimeError as e:
        with open(log, errors="replace") as f:
            tail = f.read()[-2000:]
        raise RuntimeError(f"{e}\ncommand: {shlex.join(cmd)}\noutput:\n{tail}") from None


class Replica:
    """What one replica's /metrics says about adapters."""

    def __init__(self, parse, url):
        r = requests.get(url + "/metrics", timeout=60)
        r.raise_for_status()
        fam = parse(r.text)
        total = lambda name: sum(v for _, v in fam.get(name, []))
        self.loads = total("graft:lora_adapter_loads_total")
        self.evictions = total("graft:lora_adapter_evictions_total")
        self.registered = total("graft:lora_adapters_registered")
        self.requests = {l.get("adapter_name", ""): v for l, v in fam.get("graft:lora_adapter_requests_total", [])}
        loaded = [(l.get("adapter_name", ""), l.get("level", "")) for l, v in fam.get("vllm:lora_adapter_loaded", [])
                  if v > 0]
        self.gpu = {n for n, level in loaded if level == "gpu"}
        self.missing = [n for n in ("graft:lora_adapter_loads_total", "graft:lora_adapter_evictions_total",
                                    "graft:lora_adapter_requests_total", "vllm:lora_adapter_loaded") if n not in fam]


def completion(session, url, model, prompt, tokens):
    """One /v1/completions request: (ok, completion tokens, seconds, replica header, error text)."""
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
    if model is not None:
        body["model"] = model
    t0 = time.perf_counter()
    try:
        r = session.post(url + "/v1/completions", json=body, timeout=3600)
    except requests.RequestException as e:
        return False, 0, time.perf_counter() - t0, None, f"{type(e).__name__}: {e}"
    dt = time.perf_counter() - t0
    replica = r.headers.get("x-graft-replica")
    if r.status_code != 200:
        return False, 0, dt, replica, f"{r.status_code}: {r.text[:300]}"
    return True, r.json()["usage"]["completion_tokens"], dt, replica, None


def make_stream(a):
    rng = random.Random(a.seed)
    names = [f"{a.fleet_prefix}{i}" for i in range(a.adapters)]
    if a.zipf > 0:
        order = names[:]
        rng.shuffle(order)  # which adapters are hot: random, fixed by the seed
        weights = [1.0 / (k + 1) ** a.zipf for k in range(len(order))]
        models = rng.choices(order, weights=weights, k=a.requests)
    else:
        models = [names[rng.randrange(len(names))] for _ in range(a.requests)]
    return [(m, PROMPTS[rng.randrange(len(PROMPTS))]) for m in models]


def pct(values, q):
    """Nearest-rank percentile."""
    v = sorted(values)
    return v[max(0, math.ceil(q / 100 * len(v)) - 1)]


def replica_cmd(a, port):
    return [a.graft, "serve", "-m", a.model, "--port", str(port), "--metrics", "--allow-runtime-lora",
            "--lora-root", a.fleet_dir, "--lora-dir", a.fleet_dir, "--max-loras-resident", str(a.max_loras_resident),
            "--parallel", str(a.parallel), "--threads", str(a.threads), "--ctx-size", str(a.ctx_per_slot * a.parallel)
            ] + shlex.split(a.graft_args)


def router_cmd(a, port, backends, policy):
    cmd = [a.python, a.router, "--port", str(port), "--interval", str(a.interval), "--policy", policy]
    for b in backends:
        cmd += ["--backend", b]
    return cmd


def run_once(a, policy, rnd, stream, parse, log_dir):
    """Cold replicas (+ router), warm-up, the stream. Returns (row dict, per-replica rows, errors)."""
    n_rep = 1 if policy == "single" else a.replicas
    ports = [free_port() for _ in range(n_rep)]
    procs = [None] * n_rep
    router = None

    def boot(i):
        procs[i] = start(replica_cmd(a, ports[i]), ports[i], os.path.join(log_dir, f"{policy}-{rnd}-r{i}.log"))

    try:
        with ThreadPoolExecutor(n_rep) as pool:
            list(pool.map(boot, range(n_rep)))
        urls = [p.url for p in procs]
        local = threading.local()

        def session():
            if not hasattr(local, "s"):
                local.s = requests.Session()
            return local.s

        # Warm-up: base-model requests straight to each replica (no adapter is touched).
        warm = [(u, k) for u in urls for k in range(a.warmup)]
        with ThreadPoolExecutor(max(1, min(len(warm), a.clients))) as pool:
            for ok, _, _, _, err in pool.map(lambda q: completion(session(), q[0], None, PROMPTS[q[1] % len(PROMPTS)],
                                                                  a.tokens), warm):
                if not ok:
                    raise RuntimeError(f"warm-up request failed: {err}")
        if policy == "single":
            url = urls[0]
        else:
            rport = free_port()
            backends = [u.removeprefix("http://") for u in urls]
            router = start(router_cmd(a, rport, backends, policy), rport, os.path.join(log_dir, f"{policy}-{rnd}-router.log"))
            url = router.url
            time.sleep(max(0.3, 6 * a.interval))  # a few scrapes: every replica in the router's pool
        before = [Replica(parse, u) for u in urls]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(a.clients) as pool:
            res = list(pool.map(lambda q: completion(session(), url, q[0], q[1], a.tokens), stream))
        wall = time.perf_counter() - t0
        after = [Replica(parse, u) for u in urls]
    finally:
        if router is not None:
            router.stop()
        for p in procs:
            if p is not None:
                p.stop()

    ok = [r for r in res if r[0]]
    errors = [r[4] for r in res if not r[0]]
    reps = []
    for b, f in zip(before, after):
        served = {n: f.requests.get(n, 0) - b.requests.get(n, 0) for n in f.requests}
        served = {n: v for n, v in served.items() if v > 0}
        reps.append({"requests": sum(served.values()), "distinct": len(served), "builds": f.loads - b.loads,
                     "evictions": f.evictions - b.evictions, "resident": len(f.gpu), "registered": f.registered,
                     "served set": set(served), "gpu set": f.gpu, "missing": f.missing})
    builds = sum(r["builds"] for r in reps)
    first = sum(r["distinct"] for r in reps)
    served_union = set().union(*(r["served set"] for r in reps))
    gpu_union = set().union(*(r["gpu set"] for r in reps))
    gpu_multi = sum(1 for n in gpu_union if sum(n in r["gpu set"] for r in reps) > 1)
    lat = [r[2] for r in ok]
    row = {
        "requests": len(ok), "errors": len(errors),
        "req/s": len(ok) / wall, "gen tok/s": sum(r[1] for r in ok) / wall,
        "p50 s": statistics.median(lat) if lat else float("nan"), "p99 s": pct(lat, 99) if lat else float("nan"),
        "builds": builds, "evictions": sum(r["evictions"] for r in reps),
        "builds/req": builds / len(ok) if ok else float("nan"),
        "hit %": 100 * (1 - builds / len(ok)) if ok else float("nan"),
        "first touches": first, "rebuilds": builds - first,
        "served repl": first / len(served_union) if served_union else float("nan"),
        "resident repl": sum(r["resident"] for r in reps) / len(gpu_union) if gpu_union else float("nan"),
        "resident on >1": gpu_multi,
        "wall s": wall,
    }
    # Client-side cross-check: the router's x-graft-replica header against the replicas' own counters.
    if policy != "single":
        by_header = {}
        for r in ok:
            by_header[r[3]] = by_header.get(r[3], 0) + 1
        counted = sorted(by_header.values(), reverse=True)
        metric = sorted((r["requests"] for r in reps if r["requests"]), reverse=True)
        if counted != metric:
            errors.append(f"x-graft-replica counts {counted} != graft:lora_adapter_requests_total deltas {metric}")
    reps.sort(key=lambda r: -r["requests"])
    return row, reps, errors


def md(v, p=1):
    if not v:
        return "n/a"
    if len(v) == 1 or min(v) == max(v):
        return f"{v[0]:.{p}f}"
    return f"{statistics.median(v):.{p}f} ({min(v):.{p}f}-{max(v):.{p}f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graft", default=os.path.join(ROOT, "build", "graft"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--router", default=os.path.join(ROOT, "deploy", "loopback_router.py"))
    ap.add_argument("--python", default=sys.executable, help="interpreter for the router")
    ap.add_argument("--fleet-dir", required=True, help="adapters written by bench/fleet_adapters.py")
    ap.add_argument("--fleet-prefix", default="fleet-")
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--max-loras-resident", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx-per-slot", type=int, default=512, help="--ctx-size = this x --parallel")
    ap.add_argument("--graft-args", default="", help="more `graft serve` options")
    ap.add_argument("--adapters", type=int, help="distinct adapters in the stream (default replicas x K)")
    ap.add_argument("--requests", type=int, default=480)
    ap.add_argument("--tokens", type=int, default=16, help="max_tokens per request (ignore_eos)")
    ap.add_argument("--clients", type=int, help="concurrent clients (default replicas x parallel)")
    ap.add_argument("--zipf", type=float, default=0.0, help="Zipf exponent of adapter popularity (0: uniform)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, help="base-model requests per replica before the stream (default parallel)")
    ap.add_argument("--interval", type=float, default=0.05, help="the router's scrape interval")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--policies", default="lora,random,round-robin",
                    help="comma-separated: lora, random, round-robin (router), single (one replica, direct)")
    ap.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args()
    a.adapters = a.adapters or a.replicas * a.max_loras_resident
    a.clients = a.clients or a.replicas * a.parallel
    a.warmup = a.parallel if a.warmup is None else a.warmup
    a.fleet_dir = os.path.abspath(a.fleet_dir)
    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    for p in policies:
        if p not in ("lora", "random", "round-robin", "single"):
            ap.error(f"unknown policy {p!r}")
    lacking = [i for i in range(a.adapters)
               if not os.path.exists(os.path.join(a.fleet_dir, f"{a.fleet_prefix}{i}", "adapter_config.json"))]
    if lacking:
        raise SystemExit(f"{a.fleet_dir} lacks {len(lacking)} of {a.fleet_prefix}0..{a.fleet_prefix}{a.adapters - 1} "
                         f"(first: {a.fleet_prefix}{lacking[0]}); write them with bench/fleet_adapters.py")
    parse = load_router_module(a.router).parse_metrics
    stream = make_stream(a)
    load0 = os.getloadavg()
    print(f"# command: {shlex.join([sys.executable] + sys.argv)}")
    print(f"# replica: {shlex.join(replica_cmd(a, 0)).replace('--port 0', '--port PORT')}")
    print(f"# router:  {shlex.join(router_cmd(a, 0, ['HOST:PORT'] * a.replicas, 'POLICY')).replace('--port 0', '--port PORT')}")
    print(f"# load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, {os.cpu_count()} CPUs", flush=True)
    log_dir = tempfile.mkdtemp(prefix="bench-scaleout-")
    rows, reps_all, notes = {}, {}, {}
    try:
        for rnd in range(a.rounds):
            k = rnd % len(policies)
            for policy in policies[k:] + policies[:k]:
                row, reps, errors = run_once(a, policy, rnd, stream, parse, log_dir)
                print(f"# round {rnd + 1}, {policy}: {row['req/s']:.2f} req/s, {row['gen tok/s']:.1f} tok/s, "
                      f"p50 {row['p50 s']:.2f} s, p99 {row['p99 s']:.2f} s, builds {row['builds']:.0f}, "
                      f"evictions {row['evictions']:.0f}, served per replica "
                      f"{[int(r['requests']) for r in reps]} / distinct {[r['distinct'] for r in reps]}"
                      + (f", {len(errors)} errors" if errors else ""), flush=True)
                for k2, v in row.items():
                    rows.setdefault((policy, k2), []).append(v)
                for i, r in enumerate(reps):
                    for k2, v in r.items():
                        if not isinstance(v, (set, list)):
                            reps_all.setdefault((policy, i, k2), []).append(v)
                for e in errors:
                    notes[(policy, e)] = notes.get((policy, e), 0) + 1
                for r in reps:
                    if r["missing"]:
                        notes[(policy, f"not in /metrics: {', '.join(r['missing'])}")] = 1
    finally:
        if a.keep_logs:
            print(f"# logs: {log_dir}")
        else:
            shutil.rmtree(log_dir, ignore_errors=True)

    load1 = os.getloadavg()
    dist = f"Zipf s={a.zipf}" if a.zipf > 0 else "uniform"
    print(f"\n# {a.rounds} rounds; {a.replicas} replicas x (--parallel {a.parallel}, --threads {a.threads}, "
          f"--max-loras-resident {a.max_loras_resident}); {a.requests} requests x {a.tokens} tokens over {a.adapters} "
          f"adapters ({dist}, seed {a.seed}, {len({m for m, _ in stream})} distinct in the stream), {a.clients} clients; "
          f"adapters {a.fleet_dir}; load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    cols = [("req/s", "req/s", 2), ("gen tok/s", "gen tok/s", 1), ("p50 s", "p50 s", 2), ("p99 s", "p99 s", 2),
            ("builds", "builds", 0), ("evictions", "evictions", 0), ("builds/req", "builds/req", 3),
            ("hit %", "hit %", 1), ("first touches", "first touches", 0), ("rebuilds", "rebuilds", 0),
            ("served repl.", "served repl", 2), ("resident repl.", "resident repl", 2),
            ("resident on >1", "resident on >1", 0), ("errors", "errors", 0)]
    print("\n| policy | " + " | ".join(c for c, _, _ in cols) + " |")
    print("|" + "---|" * (len(cols) + 1))
    for p in policies:
        print(f"| {p} | " + " | ".join(md(rows.get((p, k), []), d) for _, k, d in cols) + " |")
    if "lora" in policies:
        base = statistics.median(rows[("lora", "req/s")])
        for p in policies:
            if p != "lora":
                print(f"\nlora / {p}: req/s {base / statistics.median(rows[(p, 'req/s')]):.2f}x, builds "
                      f"{statistics.median(rows[('lora', 'builds')]):.0f} vs {statistics.median(rows[(p, 'builds')]):.0f}")
    rcols = [("requests", "requests", 0), ("distinct adapters served", "distinct", 0), ("builds", "builds", 0),
             ("evictions", "evictions", 0), ("resident at end", "resident", 0), ("registered at end", "registered", 0)]
    print("\nPer replica after the stream (replicas ranked by requests served, most first):\n")
    print("| policy | replica | " + " | ".join(c for c, _, _ in rcols) + " |")
    print("|" + "---|" * (len(rcols) + 2))
    for p in policies:
        for i in range(1 if p == "single" else a.replicas):
            print(f"| {p} | {i + 1} | " + " | ".join(md(reps_all.get((p, i, k), []), d) for _, k, d in rcols) + " |")
    print("\nserved repl. = sum of distinct adapters per replica / distinct adapters served (1.00: disjoint, "
          f"{a.replicas}.00: everywhere); resident repl. the same over the built (level=\"gpu\") sets at the end; "
          "hit % = 1 - builds/requests (an upper bound on requests that found their adapter built); "
          "first touches = distinct (replica, adapter) pairs served; rebuilds = builds - first touches.")
    for (p, e), n in sorted(notes.items()):
        print(f"\nnote ({p}, {n}x): {e}")


if __name__ == "__main__":
    main()
