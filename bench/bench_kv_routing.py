#!/usr/bin/env python3
"""Prefix-cache hit rate of a multi-turn chat trace through NVIDIA Dynamo's frontend over graft
replicas, with Dynamo's KV router (fed by graft's --kv-events) and with its routings that do not
use them (issue 38).

Per mode, a fresh cluster on loopback (as deploy/dynamo/launch.sh and tests/server/test_dynamo.py
start it: file discovery, TCP request plane, ZeroMQ event plane): R `graft serve --threads T
--parallel P --ctx-size C --metrics --kv-events ipc://... --kv-block-size 16`, one
deploy/dynamo/graft_worker.py per replica (`--graft-url`, relaying the replica's KV events), and
`python -m dynamo.frontend` with the mode's flags:

- kv:           --router-mode kv (the router indexes graft's BlockStored/BlockRemoved events)
- kv-no-events: --router-mode kv --no-router-kv-events (the router predicts what each replica holds
                from its own routing decisions, blocks expiring after 120 s; graft's events ignored)
- round-robin:  --router-mode round-robin
- random:       --router-mode random

The trace, the same in every mode (fixed seed): N conversations of K turns, a shared system prompt
(about 100 tokens), every turn sending the whole history plus a new user message to
/v1/chat/completions (stream, temperature 0, max_tokens M). Turns are interleaved in a fixed random
order: at most --open conversations are in progress at once (0: all), the next turn is drawn among
them, and a finished conversation makes room for the next. --clients clients take the turns in that
order; a turn waits for its conversation's previous answer.

Per mode: prompt tokens requested (the responses' usage.prompt_tokens), prompt tokens graft
evaluated (llamacpp:prompt_tokens_total on every replica's /metrics, after - before), the hit rate
1 - evaluated / requested (and the same from the responses' usage.prompt_tokens_details.cached_tokens,
as a check), TTFT and latency p50/p99 per request, requests/s over the trace, requests per replica
(graft:requests_total), and in the kv modes the hit rate the router expected: the prefix tokens it
counted as cached on the replicas it chose (dynamo_component_router_kv_selected_cached_prefix_tokens),
over the tokens requested, and the same for the replica holding the most
(..._best_eligible_cached_prefix_tokens): equal when the router never traded cache for load. "bound"
is the hit rate if every turn reused exactly its conversation's previous prompt (a first turn: the
system prompt); reusing the previous answer's tokens as well can beat it.

  .venv/bin/python bench/bench_kv_routing.py [--graft build/graft] [--model M.gguf]
      [--dynamo-python .venv-dynamo/bin/python] [--modes kv,kv-no-events,round-robin,random]
      [--replicas 3] [--parallel 2] [--threads 1] [--conversations 16] [--turns 4] [--open 0]
      [--clients 4] [--max-tokens 16] [--seed 0] [--timeout 900] [--json OUT]
Needs requests (the project's .venv) and a Python with ai-dynamo 1.6.1 (`make dynamo-env`).
Every process it starts is killed at the end, also on an error or Ctrl-C; --timeout bounds the run.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "deploy", "dynamo", "graft_worker.py")
MODES = {
    "kv": ["--router-mode", "kv"],
    "kv-no-events": ["--router-mode", "kv", "--no-router-kv-events"],
    "round-robin": ["--router-mode", "round-robin"],
    "random": ["--router-mode", "random"],
}
SYSTEM = ("You are Quill, the assistant of a small public library in a coastal town. You answer questions "
          "from readers about books, local history, gardening, cooking, travel and everyday science. Keep "
          "answers short and concrete: two or three sentences, plain words, no lists unless asked. If you "
          "are not sure of a fact, say so instead of guessing. Be friendly but do not chat about yourself. "
          "When a reader asks for a recommendation, name one title and say in one sentence why it fits.")
TOPICS = ["growing tomatoes on a balcony", "the history of the town lighthouse", "baking sourdough bread",
          "a first trip to Iceland", "why the sky is blue", "learning to knit socks", "keeping bees",
          "the old railway line", "fixing a bicycle puncture", "starting a book club", "composting kitchen waste",
          "watching the Perseid meteors", "making orange marmalade", "tide pools on the north beach",
          "reading Moby-Dick for the first time", "winter care for roses", "the herring fishery of the 1900s",
          "a walking tour of Lisbon", "how lighthouses lenses work", "pressing wild flowers", "brewing ginger beer",
          "birds that winter in the estuary", "restoring an old wooden chair", "the chemistry of baking soda",
          "planning a vegetable garden", "the shipwrecks off the point", "learning Italian as an adult",
          "building a bird box", "pickling cucumbers", "a cycling trip along the Loire", "the town's first school",
          "identifying mushrooms safely"]
QUESTIONS = ["I would like to know more about {t}. Where should a complete beginner start, and what is the most "
             "common mistake people make?",
             "Thanks. Could you explain that a little more simply, as if to a twelve-year-old?",
             "What would you say is the single most useful thing to remember about {t}?",
             "Is there a book in the library you would recommend on this, and why that one?",
             "How much time should I expect to spend on it in a normal week?",
             "What did people in our town do about this fifty years ago?",
             "Can you give me one small thing I could try this weekend?",
             "Last question: what is a good follow-up topic once I am comfortable with {t}?"]
_SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(text, name):
    """Sum of every sample of `name` (or `name`_total) in Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and m.group(1) in (name, name + "_total"):
            total += float(m.group(3))
    return total


def metrics(url):
    r = requests.get(url + "/metrics", timeout=10)
    r.raise_for_status()
    return r.text


def pct(xs, q):
    """Nearest-rank percentile."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def schedule(n_conv, turns, open_max, seed):
    """The turns in trace order: (conversation, turn) pairs, each conversation's turns in order."""
    rng = random.Random(seed)
    open_max = open_max or n_conv
    waiting = list(range(n_conv))
    active, nxt, out = [], {}, []
    while waiting or active:
        while waiting and len(active) < open_max:
            c = waiting.pop(0)
            active.append(c)
            nxt[c] = 0
        c = rng.choice(active)
        out.append((c, nxt[c]))
        nxt[c] += 1
        if nxt[c] == turns:
            active.remove(c)
    return out


def user_message(c, k):
    t = TOPICS[c % len(TOPICS)]
    q = QUESTIONS[0] if k == 0 else QUESTIONS[1 + (c + k - 1) % (len(QUESTIONS) - 1)]
    return q.format(t=t)


class Cluster:
    """R grafts, R Dynamo workers and the frontend; stop() kills every process group it started."""

    def __init__(self, args, work, mode):
        self.args, self.work, self.mode = args, work, mode
        self.procs = []
        self.env = dict(os.environ, DYN_FILE_KV=os.path.join(work, "discovery"), DYN_TCP_RPC_HOST="127.0.0.1",
                        DYN_TCP_RESPONSE_STREAM_HOST="127.0.0.1", DYN_EVENT_PLANE_HOST="127.0.0.1",
                        DYN_SELF_HOST_METADATA="0", XDG_CACHE_HOME=args.cache_dir)

    def spawn(self, name, cmd):
        with open(os.path.join(self.work, name + ".log"), "w") as log:
            p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        p.name = name
        self.procs.append(p)
        return p

    def tail(self, name, n=3000):
        try:
            with open(os.path.join(self.work, name + ".log"), errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def alive(self):
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.name} exited with {p.returncode}:\n{self.tail(p.name)}")
        return True

    def wait_for(self, cond, what, deadline):
        while time.monotonic() < deadline:
            self.alive()
            try:
                if cond():
                    return
            except requests.RequestException:
                pass
            time.sleep(0.25)
        raise TimeoutError(f"{self.mode}: timed out waiting for {what}")

    def start(self, deadline):
        a = self.args
        self.urls, kv = [], []
        for i in range(a.replicas):
            port = free_port()
            kv.append(f"ipc://{self.work}/kv{i}")
            self.urls.append(f"http://127.0.0.1:{port}")
            self.spawn(f"graft{i}", [a.graft, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", str(port),
                                     "--threads", str(a.threads), "--parallel", str(a.parallel),
                                     "--ctx-size", str(a.ctx_size), "--metrics", "--log-format", "none",
                                     "--kv-events", kv[i], "--kv-block-size", "16"])
        self.url = f"http://127.0.0.1:{free_port()}"
        self.spawn("frontend", [a.dynamo_python, "-m", "dynamo.frontend", *MODES[self.mode],
                                "--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq",
                                "--kv-cache-block-size", "16", "--migration-limit", "3", "--http-host", "127.0.0.1",
                                "--http-port", self.url.rsplit(":", 1)[1]])
        for i, url in enumerate(self.urls):
            self.wait_for(lambda: requests.get(url + "/health", timeout=2).status_code == 200, f"graft {i}", deadline)
            self.spawn(f"worker{i}", [a.dynamo_python, WORKER, "--graft-url", url, "--kv-events", kv[i],
                                      "--model", a.model, "--discovery-backend", "file"])
        instances = os.path.join(self.env["DYN_FILE_KV"], "v1", "instances")

        def ready():
            if not (os.path.isdir(instances) and len(os.listdir(instances)) >= a.replicas):
                return False
            r = requests.get(self.url + "/v1/models", timeout=5)
            return r.status_code == 200 and any(m["id"] == a.served for m in r.json().get("data", []))
        self.wait_for(ready, "the workers' registration", deadline)

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + 20
        for p in reversed(self.procs):
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:  # whatever is left, and anything a process started in its group
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                print(f"warning: {p.name} (pid {p.pid}) did not exit after SIGKILL", file=sys.stderr)
        self.procs = []


def chat(url, model, messages, max_tokens, deadline):
    """One streamed chat request: (reply text, usage, TTFT s, latency s)."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    ttft, text, usage = None, [], None
    left = max(1.0, deadline - time.monotonic())
    with requests.post(url + "/v1/chat/completions", json=body, stream=True, timeout=(10, left)) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:300]}")
        for line in r.iter_lines():
            if time.monotonic() > deadline:
                raise TimeoutError("request past the deadline")
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text.append(piece)
    lat = time.perf_counter() - t0
    if usage is None:
        raise RuntimeError("no usage in the stream")
    return "".join(text), usage, (ttft if ttft is not None else lat), lat


def run_trace(url, args, order, deadline):
    """Replays the trace; one record per turn (None where it failed or was skipped)."""
    n = args.conversations
    history = [[{"role": "system", "content": SYSTEM}] for _ in range(n)]
    done = [[threading.Event() for _ in range(args.turns)] for _ in range(n)]
    failed = [False] * n
    records, errors = {}, []
    lock = threading.Lock()
    pos = [0]

    def client():
        while True:
            with lock:
                i = pos[0]
                pos[0] += 1
            if i >= len(order):
                return
            c, k = order[i]
            try:
                if k > 0 and not done[c][k - 1].wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise TimeoutError("previous turn past the deadline")
                if failed[c]:
                    raise RuntimeError("an earlier turn failed")
                if time.monotonic() > deadline:
                    raise TimeoutError("trace past the deadline")
                msgs = history[c] + [{"role": "user", "content": user_message(c, k)}]
                reply, usage, ttft, lat = chat(url, args.served, msgs, args.max_tokens, deadline)
                history[c] = msgs + [{"role": "assistant", "content": reply}]
                cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                records[(c, k)] = {"conv": c, "turn": k, "prompt": usage["prompt_tokens"], "cached": cached,
                                   "completion": usage.get("completion_tokens"), "ttft": ttft, "latency": lat,
                                   "reply": reply}
            except Exception as e:  # noqa: BLE001  (counted and reported, the trace goes on)
                failed[c] = True
                with lock:
                    errors.append(f"conv {c} turn {k}: {type(e).__name__}: {e}")
            finally:
                done[c][k].set()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()) + 30)
    if any(t.is_alive() for t in threads):
        errors.append("clients still running past the deadline")
    return records, errors


def run_mode(args, mode, order, deadline):
    work = tempfile.mkdtemp(prefix=f"kvbench-{mode}-", dir=args.work)
    cluster = Cluster(args, work, mode)
    try:
        t_start = time.monotonic()
        cluster.start(min(deadline, time.monotonic() + args.start_timeout))
        start_s = time.monotonic() - t_start
        # Page every replica's weights in (a prompt sharing nothing with the trace), then one chat
        # through the frontend (its tokenizer and connections); the counters are read after these.
        for u in cluster.urls:
            requests.post(u + "/completion", json={"prompt": "Warm up.", "n_predict": 2}, timeout=120).raise_for_status()
        chat(cluster.url, args.served, [{"role": "user", "content": "Hello!"}], 2, time.monotonic() + 120)
        before = [metrics(u) for u in cluster.urls]
        fbefore = metrics(cluster.url)
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        records, errors = run_trace(cluster.url, args, order, deadline)
        wall = time.perf_counter() - t0
        load1 = os.getloadavg()[0]
        after = [metrics(u) for u in cluster.urls]
        fafter = metrics(cluster.url)
        cluster.alive()
    except BaseException:
        for p in cluster.procs:
            print(f"--- {mode}: {p.name} (last lines)\n{cluster.tail(p.name, 1500)}", file=sys.stderr)
        raise
    finally:
        cluster.stop()
        if not args.keep_logs:
            shutil.rmtree(work, ignore_errors=True)
    delta = lambda name: [metric(a, name) - metric(b, name) for a, b in zip(after, before)]  # noqa: E731
    recs = list(records.values())
    requested = sum(r["prompt"] for r in recs)
    evaluated = sum(delta("llamacpp:prompt_tokens_total"))
    cached = [r["cached"] for r in recs]
    fdelta = lambda name: metric(fafter, name) - metric(fbefore, name)  # noqa: E731
    routed = fdelta("dynamo_component_router_kv_selected_cached_prefix_tokens")
    best = fdelta("dynamo_component_router_kv_best_eligible_cached_prefix_tokens")
    return {"mode": mode, "requests": len(recs), "errors": errors, "requested": requested, "evaluated": evaluated,
            "hit": 1 - evaluated / requested if requested else float("nan"),
            "hit_usage": (sum(cached) / requested) if requested and None not in cached else None,
            "router_cached": routed if mode.startswith("kv") else None,
            "router_best": best if mode.startswith("kv") else None,
            "ttft50": pct([r["ttft"] for r in recs], 50), "ttft99": pct([r["ttft"] for r in recs], 99),
            "lat50": pct([r["latency"] for r in recs], 50), "lat99": pct([r["latency"] for r in recs], 99),
            "rps": len(recs) / wall if wall else float("nan"), "wall": wall, "start_s": start_s,
            "per_replica": [int(x) for x in delta("graft:requests_total")], "load": (load0, load1),
            "records": sorted(recs, key=lambda r: (r["conv"], r["turn"]))}


def bound(res, system_tokens):
    """Hit rate if every turn reused exactly its conversation's previous prompt (turn 0: the system prompt)."""
    prompts = {(r["conv"], r["turn"]): r["prompt"] for r in res["records"]}
    reusable = sum(system_tokens if k == 0 else prompts.get((c, k - 1), 0) for (c, k) in prompts)
    total = sum(prompts.values())
    return reusable / total if total else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--graft", default=os.path.join(ROOT, "build", "graft"))
    p.add_argument("--model", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    p.add_argument("--dynamo-python", default=os.path.join(ROOT, ".venv-dynamo", "bin", "python"))
    p.add_argument("--modes", default="kv,kv-no-events,round-robin,random")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--parallel", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ctx-size", type=int, default=4096, help="graft's total context (shared by the slots)")
    p.add_argument("--conversations", type=int, default=16)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--open", type=int, default=0, help="conversations in progress at once (0: all)")
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=900, help="seconds for the whole run")
    p.add_argument("--start-timeout", type=float, default=180, help="seconds for one cluster to come up")
    p.add_argument("--work", help="logs and discovery files (default: a new temp dir, removed at the end)")
    p.add_argument("--keep-logs", action="store_true")
    p.add_argument("--json", help="write every mode's numbers and per-request records here")
    args = p.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            p.error(f"unknown mode {m} (known: {', '.join(MODES)})")
    for path, what in [(args.graft, "--graft"), (args.model, "--model"), (args.dynamo_python, "--dynamo-python")]:
        if not os.path.exists(path):
            p.error(f"{what} {path} does not exist")
    deadline = time.monotonic() + args.timeout
    own_work = args.work is None
    args.work = args.work or tempfile.mkdtemp(prefix="kvbench-")
    os.makedirs(args.work, exist_ok=True)
    args.cache_dir = os.path.join(args.work, "cache")  # the tokenizer files, exported once
    args.served = os.path.basename(args.model).removesuffix(".gguf")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the finally blocks run

    order = schedule(args.conversations, args.turns, args.open, args.seed)
    print(f"trace: {args.conversations} conversations x {args.turns} turns = {len(order)} requests, "
          f"open at once {args.open or args.conversations}, {args.clients} clients, max_tokens {args.max_tokens}, "
          f"seed {args.seed}; {args.replicas} replicas x graft --threads {args.threads} --parallel {args.parallel}",
          flush=True)
    results, system_tokens, failed = [], None, []
    try:
        for mode in modes:
            if time.monotonic() > deadline:
                print(f"{mode}: skipped, --timeout reached", file=sys.stderr)
                break
            try:
                res = run_mode(args, mode, order, deadline)
            except Exception as e:  # noqa: BLE001  (the other modes still run; the exit status says so)
                print(f"{mode}: failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
                failed.append(mode)
                continue
            results.append(res)
            print(f"{mode}: {res['requests']} requests, {len(res['errors'])} errors, hit rate {res['hit']:.3f}, "
                  f"{res['rps']:.2f} req/s, cluster start {res['start_s']:.0f} s, trace {res['wall']:.1f} s, "
                  f"load {res['load'][0]:.1f}->{res['load'][1]:.1f}", flush=True)
            for e in res["errors"][:5]:
                print(f"  error: {e}", flush=True)
            if system_tokens is None:  # the system turn as the template renders it (ChatML), in graft's tokens
                system_tokens = count_system_tokens(args)
    finally:
        if own_work and not args.keep_logs:
            shutil.rmtree(args.work, ignore_errors=True)
    if not results:
        return 1
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": {k: v for k, v in vars(args).items()}, "results": results}, f, indent=1)
    same = all([r["reply"] for r in res["records"]] == [r["reply"] for r in results[0]["records"]] for res in results)
    print()
    print("| mode | requests | errors | prompt tokens requested | evaluated by graft | hit rate | hit rate (usage) "
          "| router-expected: chosen / best replica | TTFT p50 / p99 ms | latency p50 / p99 ms | req/s | requests per replica |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        hu = "–" if r["hit_usage"] is None else f"{r['hit_usage']:.3f}"
        rc = "–" if r["router_cached"] is None else \
            f"{r['router_cached'] / r['requested']:.3f} / {r['router_best'] / r['requested']:.3f}"
        print(f"| {r['mode']} | {r['requests']} | {len(r['errors'])} | {r['requested']} | {r['evaluated']:.0f} "
              f"| {r['hit']:.3f} | {hu} | {rc} | {r['ttft50'] * 1e3:.0f} / {r['ttft99'] * 1e3:.0f} "
              f"| {r['lat50'] * 1e3:.0f} / {r['lat99'] * 1e3:.0f} | {r['rps']:.2f} "
              f"| {', '.join(map(str, r['per_replica']))} |")
    print()
    if system_tokens:
        print(f"bound (every turn reusing its conversation's previous prompt, a first turn the {system_tokens}-token "
              f"system turn): {bound(results[0], system_tokens):.3f}")
    print(f"replies identical in every mode: {'yes' if same else 'no'}; "
          f"load average (1 min) per mode, before -> after the trace: "
          + ", ".join(f"{r['mode']} {r['load'][0]:.1f}->{r['load'][1]:.1f}" for r in results))
    return 0 if not failed and all(not r["errors"] for r in results) else 2


def count_system_tokens(args):
    """Tokens of the rendered system turn (ChatML: <|im_start|>system\\n...<|im_end|>\\n), by a graft's /tokenize."""
    port = free_port()
    p = subprocess.Popen([args.graft, "serve", "-m", args.model, "--host", "127.0.0.1", "--port", str(port),
                          "--threads", "1", "--parallel", "1", "--ctx-size", "512", "--log-format", "none"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            try:
                r = requests.post(f"http://127.0.0.1:{port}/tokenize", timeout=5,
                                  json={"content": f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"})
                if r.status_code == 200:
                    return len(r.json()["tokens"])
            except requests.RequestException:
                pass
            time.sleep(0.2)
        return None
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
