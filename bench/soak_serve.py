#!/usr/bin/env python3
"""Soak test of `graft serve`: many clients, mixed adapters, hostile requests, adapter churn, idle sockets.

A benchmark-style tool (not a CI test). One server is started:

  graft serve -m MODEL --port P --threads 2 --parallel 8 --metrics --allow-runtime-lora --lora-root ROOT
              --lora pirate=demo/adapters/pirate-peft --max-loras-resident 4

ROOT is a temporary directory holding six distinct copies of the PEFT pirate adapter with their lora_B
tensors scaled (tests/server/adapter_files.py's scaled_copy; factors 0.25 .. 2.0).

1. Solo references, one request at a time (greedy, temperature 0, --tokens generated, cache_prompt false),
   for each request kind: `base` (/completion), `pirate` ("model": "pirate" on /v1/completions),
   `lora-0.5` (/completion with "lora": [{"id": 0, "scale": 0.5}]), `chat` (/v1/chat/completions),
   `stream` (streamed /completion, the events' tokens concatenated) and `rt:<name>` for each runtime
   adapter by "model" name on /completion (loaded for the references, then unloaded). Each reference is
   taken twice; a reference that differs from itself is reported.
2. The soak: --clients threads send --requests requests in all, drawn at random (--seed) from the kinds
   above plus hostile ones: `bad-json` (malformed JSON: 400 with the error envelope), `too-big` (a body of
   9 MiB, over the default --body-limit of 8 MiB: 413), `huge` (one 64 MiB body: 413), `unknown-model`
   (404 not_found_error) and `abandon` (a stream the client closes after its first event). In the soak each
   generating request takes cache_prompt true or false at random (the reference never uses the cache), so
   the prompt cache is exercised across adapters. Meanwhile:
   - a churn thread (--churn, the default) loads and unloads the runtime adapters at random and reloads
     loaded ones in place with the SAME files ("load_inplace": true), which must not change tokens. A
     request for a runtime adapter that may have been unloaded during its life gets 404 not_found_error:
     counted apart (`404-unloaded`), not as a failure; a 404 while the adapter was loaded throughout is one;
   - --idle-sockets connections are opened when the soak starts and held without a request (--idle-mode:
     `silent` sends nothing, `partial` sends part of a request line, `mixed` alternates), closed at the end.
3. Every 2xx answer of a generating kind must equal its solo reference exactly (token ids on /completion,
   text on the OpenAI routes, message content on chat). Printed: requests by kind and status, mismatches
   (the first few in full), errors, wall time, requests/s, generated tokens/s, p50/p99 latency, the idle
   sockets' fate, a solo re-check of every kind after the soak, /metrics counters, and whether the server
   is alive and answers /health. The temporary directory is removed after a passing run and kept, with the
   server's log, otherwise. Exit status 1 on any mismatch, unexpected status, client error, or a dead
   or unhealthy server; 2 when the server does not start.

Usage: .venv/bin/python bench/soak_serve.py [--graft build/graft] [--model models/SmolLM2-135M-Instruct.Q4_1.gguf]
       [--clients 32] [--requests 3000] [--idle-sockets 1000] [--idle-mode mixed] [--churn | --no-churn]
       [--seed 1] [--port 0] [--tokens 12] [--max-seconds 0] [--request-timeout 300]
Needs: the Python standard library and requests (the project's .venv has it).
"""
import argparse
import json
import os
import random
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict

import requests

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(SRC, "tests", "server"))
import adapter_files as af  # noqa: E402

PEFT = os.path.join(SRC, "demo", "adapters", "pirate-peft")
FACTORS = [0.25, 0.5, 0.75, 1.25, 1.5, 2.0]
RT_NAMES = [f"rt-{f:g}" for f in FACTORS]
RT_PROMPT = "The three most important things about sailing are"
PROMPTS = {
    "base": "The history of the lighthouse begins",
    "pirate": "Ahoy, matey! Where is the",
    "lora-0.5": "The ocean is",
    "stream": "Once upon a time, on a ship called",
}
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
BODY_LIMIT = 8 << 20  # graft serve's default --body-limit
GENERATING = ["base", "pirate", "lora-0.5", "chat", "stream"] + [f"rt:{n}" for n in RT_NAMES]
HOSTILE_WEIGHTS = {"bad-json": 0.4, "too-big": 0.15, "unknown-model": 0.4, "abandon": 0.4}
METRICS = ["graft:lora_adapter_loads_total", "graft:lora_adapter_evictions_total", "vllm:num_requests_waiting",
           "vllm:num_requests_running", "graft:requests_total", "graft:requests_cancelled_total",
           "graft:lora_adapters_registered", "vllm:num_gpu_loaded_lora_adapters", "vllm:num_cpu_loaded_lora_adapters",
           "graft:batch_steps_mixed_adapters_total", "llamacpp:tokens_predicted_total"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log(msg):
    print(msg, flush=True)


# ---- requests of each kind --------------------------------------------------------------------


def body_of(kind, n, cache_prompt):
    """(route, JSON body) of a generating kind."""
    common = {"temperature": 0, "cache_prompt": cache_prompt}
    if kind == "base":
        return "/completion", {"prompt": PROMPTS[kind], "n_predict": n, **common}
    if kind == "pirate":
        return "/v1/completions", {"model": "pirate", "prompt": PROMPTS[kind], "max_tokens": n, **common}
    if kind == "lora-0.5":
        return "/completion", {"prompt": PROMPTS[kind], "n_predict": n, "lora": [{"id": 0, "scale": 0.5}], **common}
    if kind == "chat":
        return "/v1/chat/completions", {"messages": CHAT, "max_tokens": n, **common}
    if kind == "stream":
        return "/completion", {"prompt": PROMPTS[kind], "n_predict": n, "stream": True, **common}
    if kind.startswith("rt:"):
        return "/completion", {"model": kind[3:], "prompt": RT_PROMPT, "n_predict": n, **common}
    raise ValueError(kind)


class Answer:
    """What one request got: status, the comparable result (tokens or text), generated tokens, a note."""

    def __init__(self, status, result=None, generated=0, note="", text=""):
        self.status, self.result, self.generated, self.note, self.text = status, result, generated, note, text


def read_stream(r):
    """(tokens, content, final event) of a streamed /completion; raises on a malformed stream."""
    toks, content, final = [], "", None
    for line in r.iter_lines():
        if not line:
            continue
        if not line.startswith(b"data: "):
            raise ValueError(f"stream line without 'data: ': {line[:200]!r}")
        ev = json.loads(line[6:])
        if "error" in ev:
            raise ValueError(f"error event in the stream: {ev}")
        if ev.get("stop"):
            final = ev
            break
        toks += ev.get("tokens", [])
        content += ev.get("content", "")
    if final is None:
        raise ValueError("the stream ended without a stop event")
    return toks, content, final


def send(sess, url, kind, n, cache_prompt, timeout):
    """Sends one generating request; returns an Answer (result: tokens for /completion, text otherwise)."""
    route, body = body_of(kind, n, cache_prompt)
    if body.get("stream"):
        with sess.post(url + route, json=body, stream=True, timeout=timeout) as r:
            if r.status_code != 200:
                return Answer(r.status_code, text=r.text)
            toks, content, final = read_stream(r)
            note = ""
            if final.get("tokens_predicted") not in (None, len(toks)):
                note = f"tokens_predicted {final.get('tokens_predicted')} != {len(toks)} streamed tokens"
            return Answer(200, (toks, content), len(toks), note)
    r = sess.post(url + route, json=body, timeout=timeout)
    if r.status_code != 200:
        return Answer(r.status_code, text=r.text)
    j = r.json()
    note = ""
    if "model" in body and j.get("model") != body["model"]:
        note = f"model echoed as {j.get('model')!r}, sent {body['model']!r}"
    if route == "/completion":
        return Answer(200, j["tokens"], len(j["tokens"]), note)
    gen = j.get("usage", {}).get("completion_tokens", 0)
    if route == "/v1/chat/completions":
        return Answer(200, j["choices"][0]["message"]["content"], gen, note)
    return Answer(200, j["choices"][0]["text"], gen, note)


def envelope_problem(status, text, want_status, want_type):
    """None if `text` is the error envelope {"error": {"code": want_status, "message", "type": want_type}}."""
    if status != want_status:
        return f"status {status}, expected {want_status}: {text[:300]}"
    try:
        e = json.loads(text)["error"]
    except (ValueError, KeyError, TypeError):
        return f"not the error envelope: {text[:300]!r}"
    if e.get("code") != want_status or e.get("type") != want_type or not isinstance(e.get("message"), str):
        return f"envelope {e}, expected code {want_status} type {want_type}"
    return None


def raw_post(port, path, body, timeout):
    """POSTs `body` on a fresh socket while reading the answer at the same time (a server may answer a
    too-large body before it has read it). Returns (status or None, response bytes, bytes sent, what went
    wrong or '')."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    data = memoryview(head + body)
    sent, resp, problem = 0, b"", ""
    s.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
    deadline = time.monotonic() + timeout
    writing, done = True, False
    try:
        while not done:
            left = deadline - time.monotonic()
            if left <= 0:
                problem = f"timed out after {timeout} s ({sent} of {len(data)} bytes sent)"
                break
            for _, mask in sel.select(min(left, 1.0)):
                if mask & selectors.EVENT_READ:
                    try:
                        chunk = s.recv(1 << 16)
                    except (ConnectionResetError, BrokenPipeError) as e:
                        problem = f"{type(e).__name__} while reading ({sent} of {len(data)} bytes sent)"
                        done = True
                        break
                    except BlockingIOError:
                        chunk = None
                    if chunk == b"":
                        done = True
                        break
                    if chunk:
                        resp += chunk
                        if response_complete(resp):
                            done = True
                            break
                if writing and mask & selectors.EVENT_WRITE:
                    try:
                        sent += s.send(data[sent:sent + (1 << 20)])
                    except BlockingIOError:
                        pass
                    except (ConnectionResetError, BrokenPipeError) as e:
                        problem = f"{type(e).__name__} while sending ({sent} of {len(data)} bytes sent)"
                        writing = False
                    if sent >= len(data):
                        writing = False
                    if not writing:
                        sel.modify(s, selectors.EVENT_READ)
    finally:
        sel.close()
        s.close()
    status = None
    if resp.startswith(b"HTTP/1."):
        try:
            status = int(resp.split(b" ", 2)[1])
        except (IndexError, ValueError):
            pass
    return status, resp, sent, problem


def response_complete(resp):
    i = resp.find(b"\r\n\r\n")
    if i < 0:
        return False
    for line in resp[:i].split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            return len(resp) - (i + 4) >= int(v.strip())
    return False


def hostile(sess, url, port, kind, rng, n, timeout):
    """Sends one hostile request; returns (status, problem or None)."""
    if kind == "bad-json":
        bad = rng.choice([b'{"prompt": "The sea", "n_predict": ', b'{"prompt": "x",}', b"[1, 2", b"not json at all",
                          b'{"prompt": "\\ud800 broken \\x"}'])
        route = rng.choice(["/completion", "/v1/completions", "/v1/chat/completions"])
        r = sess.post(url + route, data=bad, headers={"Content-Type": "application/json"}, timeout=timeout)
        return r.status_code, envelope_problem(r.status_code, r.text, 400, "invalid_request_error")
    if kind in ("too-big", "huge"):
        size = (64 << 20) if kind == "huge" else (9 << 20)
        pad = size - len(b'{"prompt": "", "n_predict": 1}')
        body = b'{"prompt": "' + b"a" * pad + b'", "n_predict": 1}'
        status, resp, sent, problem = raw_post(port, "/completion", body, timeout)
        if status is None:
            return None, f"no HTTP answer to a {len(body)}-byte body: {problem or 'connection closed'}"
        text = resp.split(b"\r\n\r\n", 1)[1].decode("utf-8", "replace") if b"\r\n\r\n" in resp else ""
        p = envelope_problem(status, text, 413, "invalid_request_error")
        return status, p
    if kind == "unknown-model":
        route = rng.choice(["/completion", "/v1/completions", "/v1/chat/completions"])
        body = {"model": "no-such-adapter-" + str(rng.randrange(10 ** 6)), "max_tokens": n, "n_predict": n,
                "temperature": 0}
        if route == "/v1/chat/completions":
            body["messages"] = CHAT
        else:
            body["prompt"] = RT_PROMPT
        r = sess.post(url + route, json=body, timeout=timeout)
        return r.status_code, envelope_problem(r.status_code, r.text, 404, "not_found_error")
    if kind == "abandon":
        body = {"prompt": PROMPTS["stream"], "n_predict": 200, "ignore_eos": True, "temperature": 0, "stream": True,
                "cache_prompt": rng.random() < 0.5}
        r = sess.post(url + "/completion", json=body, stream=True, timeout=timeout)
        try:
            if r.status_code != 200:
                return r.status_code, f"status {r.status_code}: {r.text[:300]}"
            for line in r.iter_lines():
                if line:
                    if not line.startswith(b"data: ") or json.loads(line[6:]).get("stop"):
                        return 200, f"first line of the stream is not a token event: {line[:200]!r}"
                    return 200, None
            return 200, "the stream ended before its first event"
        finally:
            r.close()  # abandoned: the server must free the slot at its next token
    raise ValueError(kind)


# ---- the server -------------------------------------------------------------------------------


class Server:
    def __init__(self, cmd, port, logpath):
        self.url = f"http://127.0.0.1:{port}"
        self.port = port
        self.logpath = logpath
        self.logf = open(logpath, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.logf, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout=300):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if requests.get(self.url + "/health", timeout=2).status_code == 200:
                    return True
            except requests.RequestException:
                pass
            time.sleep(0.1)
        return False

    def tail(self, n=3000):
        self.logf.flush()
        with open(self.logpath, "rb") as f:
            return f.read()[-n:].decode("utf-8", "replace")

    def stop(self):
        """SIGTERM, up to 60 s for the exit (then SIGKILL); returns (exit status, seconds it took)."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second `timeout` signal must not orphan the server
        t = time.time()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                log("graft serve did not exit within 60 s of SIGTERM (or the wait was interrupted): SIGKILL")
                self.proc.kill()
                self.proc.wait()
        self.logf.close()
        return self.proc.returncode, time.time() - t


def post_adapter(url, route, body, timeout=120):
    r = requests.post(url + route, json=body, timeout=timeout)
    return r.status_code, r.text


def load_ok(url, name, path, inplace=False):
    body = {"lora_name": name, "lora_path": path}
    if inplace:
        body["load_inplace"] = True
    st, text = post_adapter(url, "/v1/load_lora_adapter", body)
    ok = st == 200 and text == f"Success: LoRA adapter '{name}' added successfully."
    return ok, f"{st} {text[:300]}"


def unload_ok(url, name):
    st, text = post_adapter(url, "/v1/unload_lora_adapter", {"lora_name": name})
    ok = st == 200 and text == f"Success: LoRA adapter '{name}' removed successfully."
    return ok, f"{st} {text[:300]}"


def scrape(url):
    """{metric name: summed value over its label sets} of GET /metrics."""
    out = {}
    r = requests.get(url + "/metrics", timeout=60)
    if r.status_code != 200:
        return {"<status>": r.status_code}
    for line in r.text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, val = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(val)
        except ValueError:
            pass
    return out


# ---- churn ------------------------------------------------------------------------------------


class Churn:
    """Which runtime adapters are certainly loaded. `loaded[name]` turns False before an unload is sent and
    True after a load has been answered 200; `epoch[name]` counts the unloads. A request whose adapter was
    certainly loaded before it was sent and after it was answered, with no unload between, must not get 404."""

    def __init__(self, url, paths, rng):
        self.url, self.paths, self.rng = url, paths, rng
        self.lock = threading.Lock()
        self.loaded = {n: False for n in paths}
        self.epoch = {n: 0 for n in paths}
        self.ops = Counter()
        self.failures = []
        self.stop = threading.Event()

    def snapshot(self, name):
        with self.lock:
            return self.loaded[name], self.epoch[name]

    def load(self, name):
        ok, what = load_ok(self.url, name, self.paths[name])
        self.ops["load"] += 1
        if ok:
            with self.lock:
                self.loaded[name] = True
        else:
            self.failures.append(f"load {name}: {what}")
        return ok

    def unload(self, name):
        with self.lock:
            self.loaded[name] = False
            self.epoch[name] += 1
        ok, what = unload_ok(self.url, name)
        self.ops["unload"] += 1
        if not ok:
            self.failures.append(f"unload {name}: {what}")
        return ok

    def reload(self, name):
        ok, what = load_ok(self.url, name, self.paths[name], inplace=True)
        self.ops["reload-inplace"] += 1
        if not ok:
            self.failures.append(f"in-place reload {name}: {what}")
        return ok

    def run(self):
        while not self.stop.is_set():
            name = self.rng.choice(list(self.paths))
            try:
                if not self.snapshot(name)[0]:
                    self.load(name)
                elif self.rng.random() < 0.5:
                    self.unload(name)
                else:
                    self.reload(name)
            except requests.RequestException as e:
                self.failures.append(f"{name}: {type(e).__name__}: {e}")
            self.stop.wait(self.rng.uniform(0.05, 0.4))


# ---- idle sockets -----------------------------------------------------------------------------


def open_idle(port, k, mode):
    """Opens k connections (16 at a time: graft's listen backlog is small, so some connects wait for a SYN
    retransmission); `partial` ones send the start of a request line and nothing more."""
    socks, failed, lock = [], [], threading.Lock()
    todo = iter(range(k))

    def worker():
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                partial = mode == "partial" or (mode == "mixed" and i % 2 == 1)
                if partial:
                    s.sendall(b"GET /health HT")
                with lock:
                    socks.append((s, partial))
            except OSError as e:
                with lock:
                    failed.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return socks, failed


def idle_fate(socks):
    """Counter of (mode, fate) for the idle sockets: 'open', 'closed by server', 'reset', 'answered: <line>'."""
    fate = Counter()
    for s, partial in socks:
        mode = "partial" if partial else "silent"
        s.setblocking(False)
        try:
            got = s.recv(4096)
            fate[(mode, "closed by server" if got == b"" else "answered: " + got.split(b"\r\n")[0].decode("latin-1"))] += 1
        except BlockingIOError:
            fate[(mode, "open")] += 1
        except ConnectionResetError:
            fate[(mode, "reset")] += 1
        except OSError as e:
            fate[(mode, type(e).__name__)] += 1
    return fate


# ---- main -------------------------------------------------------------------------------------


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def interrupt(*_):
    raise KeyboardInterrupt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graft", default=os.path.join(SRC, "build", "graft"))
    ap.add_argument("--model", default=os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--idle-sockets", type=int, default=1000)
    ap.add_argument("--idle-mode", choices=["silent", "partial", "mixed"], default="mixed")
    ap.add_argument("--churn", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--tokens", type=int, default=12, help="n_predict / max_tokens of the generating kinds")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="stop drawing new requests after this long (0: never); the scale reached is printed")
    ap.add_argument("--request-timeout", type=float, default=300)
    ap.add_argument("--show", type=int, default=5, help="mismatches and errors printed in full")
    a = ap.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = a.idle_sockets + a.clients * 2 + 200
    if soft < need:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))
            soft = min(hard, need)
        except (ValueError, OSError):
            pass
    if soft < need:
        k = max(0, soft - a.clients * 2 - 200)
        log(f"ulimit -n is {soft} (hard {hard}): --idle-sockets lowered from {a.idle_sockets} to {k}")
        a.idle_sockets = k

    port = a.port or free_port()
    url = f"http://127.0.0.1:{port}"
    tmp = tempfile.mkdtemp(prefix="graft-soak-")
    root = os.path.realpath(os.path.join(tmp, "lora-root"))
    os.makedirs(root)
    paths = {}
    for name, f in zip(RT_NAMES, FACTORS):
        paths[name] = af.scaled_copy(PEFT, os.path.join(root, name), f)
    cmd = [a.graft, "serve", "-m", a.model, "--port", str(port), "--threads", "2", "--parallel", "8", "--metrics",
           "--allow-runtime-lora", "--lora-root", root, "--lora", f"pirate={PEFT}", "--max-loras-resident", "4"]
    log("server: " + " ".join(cmd))
    signal.signal(signal.SIGTERM, interrupt)  # a `timeout` around the script still stops the server
    srv = Server(cmd, port, os.path.join(tmp, "serve.log"))
    failures = []  # lines explaining a non-zero exit
    result = 1
    try:
        if not srv.wait_ready():
            log(f"graft serve did not become ready (exit {srv.proc.poll()}):\n{srv.tail()}")
            result = 2
            return result
        result = run(a, srv, url, port, paths, failures)
        return result
    finally:
        rc, secs = srv.stop()
        if result == 0 and rc == 0:
            shutil.rmtree(tmp, ignore_errors=True)  # the adapter copies are ~30 MB a run
            log(f"server exit status after SIGTERM: {rc}, {secs:.1f} s")
        else:
            log(f"server exit status after SIGTERM: {rc}, {secs:.1f} s (kept: {tmp}, log {srv.logpath})")


def run(a, srv, url, port, paths, failures):
    n = a.tokens
    solo = requests.Session()

    # ---- 1. references ----
    t0 = time.time()
    for name, path in paths.items():
        ok, what = load_ok(url, name, path)
        if not ok:
            log(f"FAIL: loading {name} for the references: {what}")
            return 1
    refs = {}
    for kind in GENERATING:
        got = [send(solo, url, kind, n, False, a.request_timeout) for _ in range(2)]
        for g in got:
            if g.status != 200:
                log(f"FAIL: reference {kind}: status {g.status}: {g.text[:500]}")
                return 1
        if got[0].result != got[1].result:
            failures.append(f"reference {kind} differs from itself: {got[0].result!r} then {got[1].result!r}")
        refs[kind] = got[0].result
    for name in paths:
        ok, what = unload_ok(url, name)
        if not ok:
            log(f"FAIL: unloading {name} after the references: {what}")
            return 1
    log(f"references ({time.time() - t0:.1f} s, {n} tokens each):")
    for kind in GENERATING:
        log(f"  {kind:10s} {refs[kind]!r}"[:220])
    base_like = [k for k in GENERATING if k.startswith("rt:") and refs[k] == refs["base"]]
    rt_refs = [repr(refs[f"rt:{x}"]) for x in RT_NAMES]
    if len(set(rt_refs)) < len(rt_refs):
        log(f"note: {len(rt_refs) - len(set(rt_refs))} runtime adapters share tokens with another on this prompt")
    if base_like:
        log(f"note: {base_like} give the base model's tokens on their prompt")

    # ---- 2. the soak ----
    rng = random.Random(a.seed)
    kinds = GENERATING + list(HOSTILE_WEIGHTS)
    weights = [1.0] * len(GENERATING) + list(HOSTILE_WEIGHTS.values())
    plan = [rng.choices(kinds, weights)[0] for _ in range(a.requests)]
    if a.requests >= 50:
        plan[rng.randrange(a.requests // 4, a.requests // 2)] = "huge"  # one 64 MiB body
        plan[rng.randrange(0, a.requests // 4)] = "too-big"  # at least one 9 MiB body
    plan_rngs = [random.Random(rng.random()) for _ in range(a.clients)]

    churn = Churn(url, paths, random.Random(a.seed + 1))
    if not a.churn:
        for name in paths:
            if not churn.load(name):
                log(f"FAIL: {churn.failures[-1]}")
                return 1

    t_idle = time.time()
    idle, idle_failed = open_idle(port, a.idle_sockets, a.idle_mode)
    log(f"idle sockets: {len(idle)} opened ({a.idle_mode}) in {time.time() - t_idle:.1f} s"
        + (f", {len(idle_failed)} failed to open, first: {idle_failed[0]}" if idle_failed else ""))

    lock = threading.Lock()
    state = {"next": 0}
    by_status = defaultdict(Counter)  # kind -> status (or outcome) -> count
    latencies = []  # seconds, 2xx answers of generating kinds
    generated = [0]
    mismatches, errors, unexpected = [], [], []
    stop_at = time.time() + a.max_seconds if a.max_seconds > 0 else None

    def record(kind, outcome, **kw):
        with lock:
            by_status[kind][outcome] += 1
            if "latency" in kw:
                latencies.append(kw["latency"])
            generated[0] += kw.get("generated", 0)

    def client(ci):
        crng = plan_rngs[ci]
        sess = requests.Session()
        while True:
            with lock:
                i = state["next"]
                if i >= len(plan) or (stop_at and time.time() > stop_at):
                    return
                state["next"] = i + 1
            kind = plan[i]
            t = time.perf_counter()
            try:
                if kind in GENERATING:
                    cp = crng.random() < 0.5
                    name = kind[3:] if kind.startswith("rt:") else None
                    before = churn.snapshot(name) if name else None
                    ans = send(sess, url, kind, n, cp, a.request_timeout)
                    after = churn.snapshot(name) if name else None
                    lat = time.perf_counter() - t
                    if ans.status == 200:
                        record(kind, "200", latency=lat, generated=ans.generated)
                        if ans.result != refs[kind] or ans.note:
                            route, body = body_of(kind, n, cp)
                            with lock:
                                mismatches.append({"i": i, "kind": kind, "route": route, "body": body,
                                                   "expected": refs[kind], "got": ans.result, "note": ans.note,
                                                   "t": round(time.time() - t_soak, 2)})
                    elif ans.status == 404 and name:
                        p = envelope_problem(ans.status, ans.text, 404, "not_found_error")
                        certainly_loaded = before[0] and after[0] and before[1] == after[1]
                        if p is None and not certainly_loaded:
                            record(kind, "404-unloaded")
                        else:
                            record(kind, "404-UNEXPECTED")
                            with lock:
                                unexpected.append(f"#{i} {kind}: 404 although {name} was loaded throughout "
                                                  f"(churn state {before} -> {after}): {p or ans.text[:300]}")
                    else:
                        record(kind, str(ans.status))
                        with lock:
                            unexpected.append(f"#{i} {kind} {body_of(kind, n, cp)}: status {ans.status}: "
                                              f"{ans.text[:500]}")
                else:
                    status, problem = hostile(sess, url, port, kind, crng, n, a.request_timeout)
                    record(kind, str(status) if problem is None else f"{status}-BAD")
                    if problem:
                        with lock:
                            unexpected.append(f"#{i} {kind}: {problem}")
            except Exception as e:  # noqa: BLE001 - every client-side failure is reported
                record(kind, "error")
                with lock:
                    errors.append(f"#{i} {kind} after {time.perf_counter() - t:.1f} s: {type(e).__name__}: {e}")
                sess.close()
                sess = requests.Session()

    t_soak = time.time()
    churn_thread = threading.Thread(target=churn.run, daemon=True) if a.churn else None
    if churn_thread:
        churn_thread.start()
    threads = [threading.Thread(target=client, args=(ci,), daemon=True) for ci in range(a.clients)]
    for th in threads:
        th.start()
    last, progress, stalled_logged = 0, (0, time.time()), 0
    cut_off = None  # why the soak stopped before every client finished
    while any(th.is_alive() for th in threads):
        try:
            time.sleep(1.0)
        except KeyboardInterrupt:
            cut_off = "interrupted (SIGINT/SIGTERM)"
            break
        if stop_at and time.time() > stop_at + 60:
            cut_off = f"--max-seconds {a.max_seconds:g} passed 60 s ago and requests are still in flight"
            break
        with lock:
            done = sum(sum(c.values()) for c in by_status.values())
        if done != progress[0]:
            progress = (done, time.time())
        elif time.time() - progress[1] >= 30 and time.time() - stalled_logged >= 30:
            stalled_logged = time.time()
            try:
                h = requests.get(url + "/health", timeout=5)
                hs = f"{h.status_code}"
            except requests.RequestException as e:
                hs = type(e).__name__
            log(f"  STALL: no request completed for {time.time() - progress[1]:.0f} s ({done} done); "
                f"GET /health on a fresh connection: {hs}")
        if time.time() - last >= 15:
            last = time.time()
            el = time.time() - t_soak
            log(f"  [{el:6.1f} s] {done}/{len(plan)} done, {done / max(el, 1e-9):.1f} req/s, "
                f"{generated[0] / max(el, 1e-9):.1f} tok/s, {len(mismatches)} mismatches, "
                f"{len(unexpected)} unexpected, {len(errors)} errors, server "
                f"{'alive' if srv.proc.poll() is None else 'EXITED ' + str(srv.proc.returncode)}")
    wall = time.time() - t_soak
    if churn_thread:
        churn.stop.set()
        churn_thread.join(timeout=5 if cut_off else 180)
    with lock:
        done = sum(sum(c.values()) for c in by_status.values())
        started = state["next"]

    # ---- 3. report ----
    log(f"\nsoak: {done} of {len(plan)} requests answered ({started} sent), {a.clients} clients, seed {a.seed}, "
        f"wall {wall:.1f} s")
    if cut_off:
        log(f"  CUT OFF: {cut_off}; {started - done} requests still in flight")
        failures.append(f"soak cut off: {cut_off}, {started - done} requests in flight")
    elif done < len(plan):
        log(f"  stopped drawing requests after --max-seconds {a.max_seconds:g}")
    log(f"  throughput: {done / wall:.2f} requests/s, {generated[0] / wall:.1f} generated tokens/s "
        f"({generated[0]} tokens in 2xx answers)")
    log(f"  latency of 2xx generating requests: p50 {percentile(latencies, 50) * 1e3:.0f} ms, "
        f"p99 {percentile(latencies, 99) * 1e3:.0f} ms, max {max(latencies, default=0) * 1e3:.0f} ms "
        f"({len(latencies)} requests)")
    log("  requests by kind and status:")
    for kind in kinds + ["huge"]:
        if by_status.get(kind):
            log(f"    {kind:14s} " + ", ".join(f"{s}: {c}" for s, c in sorted(by_status[kind].items())))
    if a.churn:
        log(f"  churn: {dict(churn.ops)}, {len(churn.failures)} failed operations")
        for f in churn.failures[:a.show]:
            log(f"    {f}")
        failures += [f"churn: {f}" for f in churn.failures]
    log(f"  mismatches: {len(mismatches)}")
    for m in mismatches[:a.show]:
        log("    " + json.dumps(m))
    if mismatches:
        log("    mismatches by kind: " + str(Counter(m["kind"] for m in mismatches)))
        log("    of which cache_prompt true: " + str(sum(1 for m in mismatches if m["body"]["cache_prompt"])))
    log(f"  unexpected statuses: {len(unexpected)}")
    for u in unexpected[:a.show]:
        log(f"    {u}")
    log(f"  client errors (exceptions, timeouts): {len(errors)}")
    for e in errors[:a.show]:
        log(f"    {e}")
    failures += [f"{len(mismatches)} mismatches"] * bool(mismatches)
    failures += [f"{len(unexpected)} unexpected statuses"] * bool(unexpected)
    failures += [f"{len(errors)} client errors"] * bool(errors)

    fate = idle_fate(idle)
    log(f"  idle sockets at the end ({len(idle)}): " + ", ".join(f"{m} {f}: {c}" for (m, f), c in sorted(fate.items())))
    for s, _ in idle:
        s.close()

    # ---- after the soak: alive, health, solo re-check, metrics ----
    alive = srv.proc.poll() is None
    log(f"  server process: {'alive' if alive else f'EXITED with {srv.proc.returncode}'}")
    if not alive:
        failures.append(f"the server exited with {srv.proc.returncode}")
        log(srv.tail())
        return report(failures)
    try:
        h = requests.get(url + "/health", timeout=5 if cut_off else 30)
        log(f"  GET /health: {h.status_code} {h.text.strip()}")
        if h.status_code != 200:
            failures.append(f"/health answered {h.status_code}")
    except requests.RequestException as e:
        failures.append(f"/health: {type(e).__name__}: {e}")
        log(f"  GET /health: {type(e).__name__}: {e}")
        return report(failures)
    if cut_off:
        return report(failures)
    for name in paths:
        if not churn.snapshot(name)[0] and not churn.load(name):
            failures.append(f"after the soak: {churn.failures[-1]}")
    drift = []
    for kind in GENERATING:
        g = send(solo, url, kind, n, False, a.request_timeout)
        if g.status != 200 or g.result != refs[kind]:
            drift.append(f"{kind}: status {g.status}, got {g.result!r} {g.text[:200]}, expected {refs[kind]!r}")
    log(f"  solo re-check after the soak: {len(GENERATING) - len(drift)}/{len(GENERATING)} equal their references")
    for d in drift:
        log(f"    {d}")
    failures += [f"after the soak {d}" for d in drift]
    deadline = time.time() + 30
    while True:
        m = scrape(url)
        if m.get("vllm:num_requests_waiting", 0) == 0 and m.get("vllm:num_requests_running", 0) == 0:
            break
        if time.time() > deadline:
            failures.append(f"30 s after the soak: {m.get('vllm:num_requests_waiting')} waiting, "
                            f"{m.get('vllm:num_requests_running')} running")
            break
        time.sleep(0.5)
    log("  /metrics: " + ", ".join(f"{k} {m.get(k, 'absent'):g}" if isinstance(m.get(k), float)
                                   else f"{k} {m.get(k, 'absent')}" for k in METRICS))
    return report(failures)


def report(failures):
    if failures:
        log("FAIL: " + "; ".join(failures[:20]))
        return 1
    log("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
