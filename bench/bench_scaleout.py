#!/usr/bin/env python3
"""Scale-out through Ray Serve: R `graft serve` replicas behind deploy/ray/graft_app.py, one skewed
adapter stream, Ray's multiplexed routing against Ray's plain routing.

One local Ray instance (`ray.init(num_cpus=..., include_dashboard=False)`, usage stats off) for the
whole run. Each (round, replica count R, policy) deploys the app anew (cold replicas):
GraftReplica x R, each `graft serve --metrics --allow-runtime-lora --lora-root DIR
--max-loras-resident K --parallel P --threads T --ctx-size 512*P` on its own loopback port, and the
FastAPI ingress on Serve's HTTP proxy. Policies:

- multiplex: the request's `model` is Ray's multiplexed model id; each replica's
  `@serve.multiplexed(max_num_models_per_replica=K)` loader registers the adapter in its graft
  (`/v1/load_lora_adapter`), Ray's LRU evicts (`/v1/unload_lora_adapter`); Ray routes to a replica
  holding the adapter, else to one holding the fewest.
- plain: the same deployment without a multiplexed id (Ray's power of two choices on queue length);
  graft runs with `--lora-dir DIR` and loads and evicts adapters itself (its LRU, budget K).

C clients (default R*P) send a fixed-seed stream of /v1/completions requests (greedy, --tokens tokens,
ignore_eos) over the first A adapters (default 48) of DIR (written by bench/fleet_adapters.py:
DIR/<prefix><i>/), Zipf-distributed (--zipf S, default 1.0; 0: uniform). Before the stream, a few
base-model requests per replica page the weights in (no adapter touched).

Per run: requests/s, generated tokens/s, p50/p99 request latency, adapter builds
(graft:lora_adapter_loads_total summed over the replicas' /metrics, after - before the stream),
builds per request, adapters dropped (Ray's unloads or graft's evictions), and requests per replica
(from the x-graft-replica header). The replicas' graft ports are read from their logs (one
machine). Medians over rounds with min-max.

  bench/fleet_adapters.py /tmp/fleet --count 48 --targets q_proj,v_proj
  bench/bench_scaleout.py --fleet-dir /tmp/fleet [--replicas 1,2,3] [--policies multiplex,plain]
       [--max-loras-resident 16] [--parallel 4] [--threads 1] [--adapters 48] [--requests 480]
       [--tokens 16] [--zipf 1.0] [--rounds 1] [--timeout 300] [--num-cpus 2]
Needs: ray[serve] and requests (the project's .venv has them).
"""
import argparse
import importlib.util
import math
import os
import random
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import PROMPTS, free_port  # noqa: E402

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
import logging  # noqa: E402

import ray  # noqa: E402
from ray import serve  # noqa: E402

_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def load_app_module(path):
    spec = importlib.util.spec_from_file_location("graft_app", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["graft_app"] = mod
    dont, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.dont_write_bytecode = dont
    return mod


def metric_total(text, name):
    """Sum of every sample of `name` in Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) == name:
            total += float(m.group(3))
    return total


def graft_ports(log_dir):
    """The ports of the grafts started with their output in `log_dir` (graft-<replica>.log)."""
    ports = {}
    for name in os.listdir(log_dir):
        if name.startswith("graft-") and name.endswith(".log"):
            with open(os.path.join(log_dir, name), errors="replace") as f:
                m = re.search(r"listening on http://[^:\s]+:(\d+)", f.read())
            if m:
                ports[name[len("graft-"):-len(".log")]] = int(m.group(1))
    return ports


def scrape(ports, timeout):
    """{replica: (builds, evictions, registered adapters)} from each graft's /metrics."""
    out = {}
    for rep, port in ports.items():
        r = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=timeout)
        r.raise_for_status()
        out[rep] = (metric_total(r.text, "graft:lora_adapter_loads_total"),
                    metric_total(r.text, "graft:lora_adapter_evictions_total"),
                    metric_total(r.text, "graft:lora_adapters_registered"))
    return out


def completion(session, url, model, prompt, tokens, timeout):
    """One /v1/completions request: (ok, completion tokens, seconds, replica header, error text)."""
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
    if model is not None:
        body["model"] = model
    t0 = time.perf_counter()
    try:
        r = session.post(url + "/v1/completions", json=body, timeout=timeout)
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


def app_config(a, replicas, policy, log_dir):
    return {"graft": a.graft, "model": a.model, "lora_root": a.fleet_dir, "replicas": replicas,
            "max_loras": a.max_loras_resident, "parallel": a.parallel, "threads": a.threads,
            "ctx_size": a.ctx_per_slot * a.parallel, "graft_args": a.graft_args, "multiplex": policy == "multiplex",
            "log_dir": log_dir, "request_timeout_s": a.timeout, "retry_timeout_s": 0.0,
            "start_timeout_s": a.timeout}


def run_once(a, ga, url, replicas, policy, rnd, stream, log_root):
    """Deploys the app cold, warms it up, sends the stream. Returns (row, per-replica request counts, errors)."""
    log_dir = os.path.join(log_root, f"{policy}-r{replicas}-{rnd}")
    os.makedirs(log_dir)
    cfg = ga.make_config(app_config(a, replicas, policy, log_dir))
    serve.run(ga.build_app(cfg), name="graft", route_prefix="/")
    try:
        ports = graft_ports(log_dir)
        if len(ports) != replicas:
            raise RuntimeError(f"found {len(ports)} graft ports in {log_dir}, expected {replicas}")
        local = threading.local()

        def session():
            if not hasattr(local, "s"):
                local.s = requests.Session()
            return local.s

        clients = a.clients or replicas * a.parallel
        warm = [(None, PROMPTS[k % len(PROMPTS)]) for k in range(a.warmup * replicas)]
        with ThreadPoolExecutor(clients) as pool:
            for ok, _, _, _, err in pool.map(lambda q: completion(session(), url, q[0], q[1], a.tokens, a.timeout),
                                             warm):
                if not ok:
                    raise RuntimeError(f"warm-up request failed: {err}")
        before = scrape(ports, a.timeout)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            res = list(pool.map(lambda q: completion(session(), url, q[0], q[1], a.tokens, a.timeout), stream))
        wall = time.perf_counter() - t0
        after = scrape(ports, a.timeout)
    finally:
        serve.delete("graft")
    ok = [r for r in res if r[0]]
    errors = [r[4] for r in res if not r[0]]
    builds = sum(after[k][0] - before[k][0] for k in after)
    evictions = sum(after[k][1] - before[k][1] for k in after)
    # multiplex: every build is a registration (/v1/load_lora_adapter), so the builds that are no
    # longer registered were unloaded by Ray's LRU; plain: graft's own LRU drops (evictions).
    unloads = builds - sum(after[k][2] - before[k][2] for k in after)
    per_replica = {}
    for r in ok:
        per_replica[r[3]] = per_replica.get(r[3], 0) + 1
    lat = [r[2] for r in ok]
    row = {
        "requests": len(ok), "errors": len(errors),
        "req/s": len(ok) / wall, "gen tok/s": sum(r[1] for r in ok) / wall,
        "p50 s": statistics.median(lat) if lat else float("nan"), "p99 s": pct(lat, 99) if lat else float("nan"),
        "builds": builds, "builds/req": builds / len(ok) if ok else float("nan"),
        "dropped": unloads if policy == "multiplex" else evictions, "graft evictions": evictions,
        "wall s": wall,
    }
    return row, sorted(per_replica.values(), reverse=True), errors


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
    ap.add_argument("--app", default=os.path.join(ROOT, "deploy", "ray", "graft_app.py"))
    ap.add_argument("--fleet-dir", required=True, help="adapters written by bench/fleet_adapters.py")
    ap.add_argument("--fleet-prefix", default="fleet-")
    ap.add_argument("--replicas", default="1,2,3", help="comma-separated replica counts")
    ap.add_argument("--policies", default="multiplex,plain", help="comma-separated: multiplex, plain")
    ap.add_argument("--max-loras-resident", type=int, default=16, help="K: graft's budget and Ray's models per replica")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ctx-per-slot", type=int, default=512, help="--ctx-size = this x --parallel")
    ap.add_argument("--graft-args", default="--log-format none", help="more `graft serve` options")
    ap.add_argument("--adapters", type=int, default=48, help="distinct adapters in the stream")
    ap.add_argument("--requests", type=int, default=480)
    ap.add_argument("--tokens", type=int, default=16, help="max_tokens per request (ignore_eos)")
    ap.add_argument("--clients", type=int, default=0, help="concurrent clients (default replicas x parallel)")
    ap.add_argument("--zipf", type=float, default=1.0, help="Zipf exponent of adapter popularity (0: uniform)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup", type=int, default=4, help="base-model requests per replica before the stream")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds for one request, a replica's start")
    ap.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray instance (default: all)")
    ap.add_argument("--keep-logs", action="store_true")
    a = ap.parse_args()
    a.fleet_dir = os.path.abspath(a.fleet_dir)
    counts = [int(x) for x in a.replicas.split(",") if x.strip()]
    policies = [p.strip() for p in a.policies.split(",") if p.strip()]
    for p in policies:
        if p not in ("multiplex", "plain"):
            ap.error(f"unknown policy {p!r}")
    lacking = [i for i in range(a.adapters)
               if not os.path.exists(os.path.join(a.fleet_dir, f"{a.fleet_prefix}{i}", "adapter_config.json"))]
    if lacking:
        raise SystemExit(f"{a.fleet_dir} lacks {len(lacking)} of {a.fleet_prefix}0..{a.fleet_prefix}{a.adapters - 1} "
                         f"(first: {a.fleet_prefix}{lacking[0]}); write them with bench/fleet_adapters.py")
    ga = load_app_module(a.app)
    stream = make_stream(a)
    load0 = os.getloadavg()
    print(f"# command: {shlex.join([sys.executable] + sys.argv)}")
    print(f"# replica: {shlex.join(ga.graft_command(ga.make_config(app_config(a, 1, 'multiplex', ''))))}"
          " (plain: + --lora-dir DIR)")
    print(f"# load average at start {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}, {os.cpu_count()} CPUs", flush=True)
    log_root = tempfile.mkdtemp(prefix="bench-scaleout-")
    rows, spread, notes = {}, {}, {}
    t_start = time.perf_counter()
    ray.init(num_cpus=a.num_cpus, include_dashboard=False, log_to_driver=False)
    logging.getLogger("ray.serve").setLevel(logging.WARNING)  # one line per deploy otherwise
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        url = f"http://127.0.0.1:{port}"
        print(f"# Ray and Serve up in {time.perf_counter() - t_start:.1f} s", flush=True)
        for rnd in range(a.rounds):
            for r in counts:
                k = rnd % len(policies)
                for policy in policies[k:] + policies[:k]:
                    row, per_rep, errors = run_once(a, ga, url, r, policy, rnd, stream, log_root)
                    print(f"# round {rnd + 1}, {r} replicas, {policy}: {row['req/s']:.2f} req/s, "
                          f"{row['gen tok/s']:.1f} tok/s, p50 {row['p50 s']:.2f} s, p99 {row['p99 s']:.2f} s, "
                          f"builds {row['builds']:.0f} ({row['builds/req']:.3f}/req), dropped {row['dropped']:.0f} "
                          f"(graft evictions {row['graft evictions']:.0f}), "
                          f"requests per replica {per_rep}" + (f", {len(errors)} errors" if errors else ""), flush=True)
                    for key, v in row.items():
                        rows.setdefault((r, policy, key), []).append(v)
                    spread.setdefault((r, policy), []).append(per_rep)
                    for e in errors:
                        notes[(r, policy, e)] = notes.get((r, policy, e), 0) + 1
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            if a.keep_logs:
                print(f"# logs: {log_root}")
            else:
                shutil.rmtree(log_root, ignore_errors=True)

    load1 = os.getloadavg()
    dist = f"Zipf s={a.zipf}" if a.zipf > 0 else "uniform"
    print(f"\n# {a.rounds} round(s); replicas {counts} x (--parallel {a.parallel}, --threads {a.threads}, "
          f"--max-loras-resident {a.max_loras_resident} = Ray's max_num_models_per_replica); {a.requests} requests x "
          f"{a.tokens} tokens over {a.adapters} adapters ({dist}, seed {a.seed}, {len({m for m, _ in stream})} distinct "
          f"in the stream), clients = replicas x {a.parallel} unless --clients; adapters {a.fleet_dir}; "
          f"load average at end {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; "
          f"total {time.perf_counter() - t_start:.0f} s")
    cols = [("req/s", "req/s", 2), ("gen tok/s", "gen tok/s", 1), ("p50 s", "p50 s", 2), ("p99 s", "p99 s", 2),
            ("builds", "builds", 0), ("builds/req", "builds/req", 3), ("dropped", "dropped", 0),
            ("errors", "errors", 0)]
    print("\n| replicas | routing | " + " | ".join(c for c, _, _ in cols) + " | requests per replica |")
    print("|" + "---|" * (len(cols) + 3))
    for r in counts:
        for p in policies:
            print(f"| {r} | {p} | " + " | ".join(md(rows.get((r, p, k), []), d) for _, k, d in cols)
                  + f" | {' / '.join(str(x) for x in spread.get((r, p), []))} |")
    print("\nbuilds = graft:lora_adapter_loads_total summed over the replicas (after - before the stream); "
          "dropped = adapters taken out of the budget: multiplex, unloaded by Ray's LRU (builds - change in "
          "graft:lora_adapters_registered); plain, graft's own evictions (graft:lora_adapter_evictions_total); "
          "requests per replica from x-graft-replica, one list per round.")
    for (r, p, e), n in sorted(notes.items()):
        print(f"\nnote ({r} replicas, {p}, {n}x): {e}")


if __name__ == "__main__":
    main()
