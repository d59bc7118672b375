#!/usr/bin/env python3
"""A stand-in for the Gateway + Endpoint Picker on one machine: N `graft serve` replicas behind one port.

    build/graft serve -m models/SmolLM2-135M-Instruct.Q4_1.gguf --metrics --port 8001 ... &   (8002, 8003)
    deploy/loopback_router.py --port 8000 --backend 127.0.0.1:8001 --backend 127.0.0.1:8002 --backend 127.0.0.1:8003

Every 50 ms it scrapes each replica's GET /metrics (the EPP's default refresh interval) and, for each
request, picks the replica with the highest weighted score, as the EPP's scheduling profile in
deploy/inferencepool.yaml does (weights 2/2/2, no prefix-cache estimate):

- queue:  min-max normalised vllm:num_requests_waiting across the replicas (fewest waiting = 1);
- kv:     1 - vllm:kv_cache_usage_perc;
- lora:   for a request whose "model" is not the base id, from vllm:lora_adapter_loaded when the
          replica exports it (the lora-load-state scorer of llm-d-router PR #2792: resident 1.0,
          registered but dropped 0.7, free slot 0.6, an idle resident it could evict 0.3, full 0),
          else from vllm:lora_requests_info (llm-d-router's lora-affinity-scorer: running 1.0, room
          for another adapter 0.8, waiting 0.6, full 0).

A replica whose /metrics cannot be read is left out until it answers again. POST /v1/load_lora_adapter
and /v1/unload_lora_adapter go to every replica (the answer is the first non-200, else the first
200), so one call registers an adapter fleet-wide; everything else is proxied to the chosen replica,
streams included. The response carries `x-graft-replica: host:port`. Python standard library only.
--policy random or round-robin replaces the scores with a uniform random or a rotating choice among the
replicas whose /metrics answer (baselines for bench/bench_scaleout.py); the default is the scoring above.
docs/DEPLOY.md. tests/server/test_scaleout.py runs three replicas this way with its own in-test router.
"""
import argparse
import http.client
import http.server
import json
import random
import re
import sys
import threading
import time
import urllib.request

WEIGHTS = {"queue": 2.0, "kv": 2.0, "lora": 2.0}
POLICIES = ("lora", "random", "round-robin")
BROADCAST = {"/v1/load_lora_adapter", "/v1/unload_lora_adapter"}
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer",
              "content-length", "host"}

SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus text exposition -> {name: [(labels dict, float value)]}."""
    families = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE_RE.match(line)
        if not m:
            continue
        labels = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                  for k, v in LABEL_RE.findall(m.group(2) or "")}
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        families.setdefault(m.group(1), []).append((labels, value))
    return families


def names(csv):
    return {n.strip() for n in csv.split(",") if n.strip()}


class ReplicaState:
    """What the scorers read from one replica's metrics."""

    def __init__(self, families):
        def gauge(name, default=0.0):
            samples = families.get(name)
            return samples[0][1] if samples else default

        self.waiting = gauge("vllm:num_requests_waiting")
        self.running = gauge("vllm:num_requests_running")
        self.kv = gauge("vllm:kv_cache_usage_perc")
        info = max(families.get("vllm:lora_requests_info", []), key=lambda s: s[1], default=({}, 0.0))[0]
        self.running_adapters = names(info.get("running_lora_adapters", ""))
        self.waiting_adapters = names(info.get("waiting_lora_adapters", ""))
        self.max_lora = int(info.get("max_lora") or 0)
        self.has_residency = "vllm:lora_adapter_loaded" in families or "vllm:max_gpu_lora_adapters" in families
        loaded = [(l.get("adapter_name", ""), l.get("level", "")) for l, v in families.get("vllm:lora_adapter_loaded", [])
                  if v > 0]
        self.gpu = {n for n, level in loaded if level == "gpu"}
        self.cpu = {n for n, level in loaded if level == "cpu"} - self.gpu
        self.max_gpu = int(gauge("vllm:max_gpu_lora_adapters", self.max_lora))


def lora_score(state, model):
    if state.has_residency:
        if model in state.gpu:
            return 1.0
        if model in state.cpu:
            return 0.7
        if state.max_gpu <= 0 or len(state.gpu) < state.max_gpu:
            return 0.6
        if state.gpu - state.running_adapters - state.waiting_adapters:
            return 0.3
        return 0.0
    if model in state.running_adapters:
        return 1.0
    if state.max_lora <= 0 or len(state.running_adapters | state.waiting_adapters) < state.max_lora:
        return 0.8
    if model in state.waiting_adapters:
        return 0.6
    return 0.0


def scores(states, model, base_ids):
    """{replica: total score} for a request for `model` (None or a base id: no LoRA term)."""
    waiting = [s.waiting for s in states.values()]
    lo, hi = min(waiting, default=0.0), max(waiting, default=0.0)
    out = {}
    for replica, s in states.items():
        queue = 1.0 if hi == lo else (hi - s.waiting) / (hi - lo)
        kv = 1.0 - min(max(s.kv, 0.0), 1.0)
        lora = 1.0 if model is None or model in base_ids else lora_score(s, model)
        out[replica] = WEIGHTS["queue"] * queue + WEIGHTS["kv"] * kv + WEIGHTS["lora"] * lora
    return out


def pick(states, model, base_ids, rng=random):
    """The best-scoring replica; ties broken at random (as the EPP's max-score picker does)."""
    total = scores(states, model, base_ids)
    if not total:
        return None, total
    best = max(total.values())
    return rng.choice(sorted(r for r, v in total.items() if v == best)), total


class Fleet:
    def __init__(self, backends, interval, policy="lora"):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        self.backends = backends
        self.interval = interval
        self.policy = policy
        self.turn = 0  # round-robin position
        self.states = {}
        self.base_ids = set()
        self.base_ids_seen = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._loop, daemon=True).start()

    def _fetch(self, backend, path):
        with urllib.request.urlopen(f"http://{backend}{path}", timeout=2) as r:
            return r.read().decode("utf-8", "replace")

    def refresh(self):
        states = {}
        for b in self.backends:
            try:
                states[b] = ReplicaState(parse_metrics(self._fetch(b, "/metrics")))
                if b not in self.base_ids_seen:
                    models = json.loads(self._fetch(b, "/v1/models"))["data"]
                    self.base_ids.add(models[0]["id"])  # the base model comes first, then adapters
                    self.base_ids_seen.add(b)
            except (OSError, ValueError, KeyError, IndexError):
                pass  # not ready or gone: out of the pool until it answers
        with self.lock:
            self.states = states

    def _loop(self):
        while True:
            self.refresh()
            time.sleep(self.interval)

    def choose(self, model):
        with self.lock:
            states = dict(self.states)
            if self.policy == "round-robin":
                ready = [b for b in self.backends if b in states]
                chosen = ready[self.turn % len(ready)] if ready else None
                self.turn += 1
        if self.policy == "lora":
            return pick(states, model, self.base_ids)
        total = scores(states, model, self.base_ids)  # not used to choose: for -v only
        if self.policy == "random":
            chosen = random.choice(sorted(states)) if states else None
        return chosen, total


class Handler(http.server.BaseHTTPRequestHandler):
    fleet = None
    verbose = False

    def log_message(self, fmt, *args):
        if self.verbose:
            sys.stderr.write("router: " + fmt % args + "\n")

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _forward(self, backend, method, body):
        host, port = backend.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=3600)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        if body:
            headers["Content-Length"] = str(len(body))
        conn.request(method, self.path, body=body or None, headers=headers)
        return conn, conn.getresponse()

    def _relay(self, backend, resp, conn):
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        self.send_header("x-graft-replica", backend)
        length = resp.getheader("Content-Length")
        if length is not None:
            self.send_header("Content-Length", length)
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    break
                self.wfile.write(chunk)
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client left; closing the upstream connection frees graft's slot at its next token
        finally:
            conn.close()

    def _error(self, status, message):
        body = json.dumps({"error": {"code": status, "message": message, "type": "unavailable_error"}}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self, method):
        body = self._body() if method == "POST" else b""
        if method == "POST" and self.path in BROADCAST:
            return self._broadcast(body)
        model = None
        if body:
            try:
                model = json.loads(body).get("model")
            except (ValueError, AttributeError):
                pass
        backend, total = self.fleet.choose(model if isinstance(model, str) else None)
        if backend is None:
            return self._error(503, "no graft replica is ready")
        if self.verbose:
            sys.stderr.write(f"router: {method} {self.path} model={model!r} -> {backend} "
                             f"{ {b: round(v, 2) for b, v in total.items()} }\n")
        try:
            conn, resp = self._forward(backend, method, body)
        except OSError as e:
            return self._error(502, f"replica {backend}: {e}")
        self._relay(backend, resp, conn)

    def _broadcast(self, body):
        with self.fleet.lock:
            ready = sorted(self.fleet.states)
        if not ready:
            return self._error(503, "no graft replica is ready")
        chosen = None
        for backend in ready:
            try:
                conn, resp = self._forward(backend, "POST", body)
            except OSError as e:
                return self._error(502, f"replica {backend}: {e}")
            data = resp.read()
            conn.close()
            if chosen is None or (chosen[1].status == 200 and resp.status != 200):
                chosen = (backend, resp, data)
        backend, resp, data = chosen
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.getheader("Content-Type", "text/plain"))
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-graft-replica", backend if resp.status != 200 else ",".join(ready))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--backend", action="append", required=True, help="HOST:PORT of a graft serve --metrics")
    ap.add_argument("--interval", type=float, default=0.05, help="seconds between metric scrapes")
    ap.add_argument("--policy", choices=POLICIES, default="lora",
                    help="lora: the scores above (default); random or round-robin: ignore them (baselines)")
    ap.add_argument("-v", "--verbose", action="store_true", help="log every decision with its scores")
    args = ap.parse_args(argv)
    fleet = Fleet(args.backend, args.interval, args.policy)
    Handler.fleet, Handler.verbose = fleet, args.verbose
    server = http.server.ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"router: http://{args.host}:{server.server_address[1]} -> {', '.join(args.backend)}"
          + (f" (policy {args.policy})" if args.policy != "lora" else ""), file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
