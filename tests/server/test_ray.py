"""Ray Serve as the engine in front of graft replicas (deploy/ray/graft_app.py), on loopback.

One local Ray instance (`ray.init(num_cpus=2, include_dashboard=False)`, usage stats off), the app
with 3 GraftReplica replicas, each a `graft serve --threads 1 --parallel 2 --max-loras-resident 2`
behind Ray's `@serve.multiplexed(max_num_models_per_replica=2)`, over one adapter root of 7 adapters
(scaled copies of the demo PEFT adapter). A plain `graft serve --lora-dir ROOT` with the same options
gives the reference answers (greedy). The app runs with `debug` on, so every answer names its Ray
replica (x-graft-replica), the graft process behind it (x-graft-pid) and that graft's port
(x-graft-port), which the test reads directly (`/lora-adapters`).

Ray reports which adapters a replica holds to its routers with a lag (a push every 0.1 s through the
controller), so the test waits SETTLE seconds after an adapter's first request before relying on it.
The fixture shuts Serve and Ray down and kills every graft process started on its adapter root,
whatever happened.
"""
import importlib.util
import json
import os
import signal
import sys
import threading
import time
import warnings

import pytest
import requests

import adapter_files as af
from conftest import BIN, MODEL, PEFT, SRC, free_port

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
with warnings.catch_warnings():  # Ray's pydantic models warn on import (PydanticDeprecatedSince20)
    warnings.simplefilter("ignore", DeprecationWarning)
    import ray  # noqa: E402 - after the variable above
    from ray import serve  # noqa: E402

APP = os.path.join(SRC, "deploy", "ray", "graft_app.py")
PROMPT = "The three most important things about sailing are"
FACTORS = [1.0, 1.5, 2.0, 0.5, 1.25, 1.75, 0.75]  # distinct greedy answers to PROMPT in TOKENS tokens
NAMES = [f"ad{i}" for i in range(len(FACTORS))]
REPLICAS, BUDGET = 3, 2
SETTLE = 1.5  # seconds for a replica's adapter list to reach the ingress's router (measured: 0.1-0.2 s)
TOKENS = 12


def load_app_module():
    spec = importlib.util.spec_from_file_location("graft_app", APP)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["graft_app"] = mod
    spec.loader.exec_module(mod)
    return mod


def graft_pids(root):
    """Pids of the graft processes serving `root` (this test's own: the root is a fresh directory)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if root.encode() in args and b"serve" in args:
            pids.append(int(d))
    return pids


def kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Fleet:
    def __init__(self, url, root, log_dir, ga):
        self.url, self.root, self.log_dir, self.ga = url, root, log_dir, ga
        self.reference = {}  # model -> (text, completion tokens) from the plain graft

    def post(self, path, body, **kw):
        return requests.post(self.url + path, json=body, timeout=120, **kw)

    def complete(self, model, **fields):
        body = {"prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, **fields}
        if model is not None:
            body["model"] = model
        return self.post("/v1/completions", body)

    def logs(self):
        out = []
        for name in sorted(os.listdir(self.log_dir)):
            with open(os.path.join(self.log_dir, name), errors="replace") as f:
                out.append(f"--- {name}\n{f.read()[-1500:]}")
        return "\n".join(out)


def reference_answers(ga, cfg, root, log_dir):
    """Greedy answers of one plain `graft serve` with the replicas' options and --lora-dir ROOT."""
    plain = dict(cfg, multiplex=False)
    proc, port = ga.start_graft(plain, os.path.join(log_dir, "reference.log"))
    try:
        out = {}
        for model in [None] + NAMES:
            body = {"prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0}
            if model:
                body["model"] = model
            r = requests.post(f"http://127.0.0.1:{port}/v1/completions", json=body, timeout=120)
            assert r.status_code == 200, r.text
            out[model] = r.json()["choices"][0]["text"]
        chat = {"model": NAMES[1], "messages": [{"role": "user", "content": "Hi!"}], "max_tokens": TOKENS,
                "temperature": 0}
        r = requests.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=chat, timeout=120)
        assert r.status_code == 200, r.text
        out["chat"] = r.json()["choices"][0]["message"]["content"]
        r = requests.post(f"http://127.0.0.1:{port}/v1/completions",
                          json={"model": NAMES[2], "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0,
                                "stream": True}, timeout=120)
        assert r.status_code == 200, r.text
        out["stream"] = sse_events(r.text)
        return out
    finally:
        ga.stop_process(proc)


def sse_events(text):
    """The data of each server-sent event, JSON decoded, without the per-response id and time."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        if data == "[DONE]":
            events.append(data)
            continue
        ev = json.loads(data)
        for k in ("id", "created", "system_fingerprint"):
            ev.pop(k, None)
        ev.pop("timings", None)
        ev.pop("usage", None)
        events.append(ev)
    return events


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    ga = load_app_module()
    root = os.path.realpath(str(tmp_path_factory.mktemp("ray-root")))
    log_dir = os.path.realpath(str(tmp_path_factory.mktemp("ray-logs")))
    for name, f in zip(NAMES, FACTORS):
        dst = os.path.join(root, name)
        af.plain_copy(PEFT, dst) if f == 1.0 else af.scaled_copy(PEFT, dst, f)
    cfg = ga.make_config({"graft": BIN, "model": MODEL, "lora_root": root, "replicas": REPLICAS,
                          "max_loras": BUDGET, "parallel": 2, "threads": 1, "ctx_size": 1024,
                          "health_check_period_s": 1.0, "health_check_timeout_s": 5.0, "retry_timeout_s": 40.0,
                          "start_timeout_s": 120.0, "log_dir": log_dir, "debug": True})
    reference = reference_answers(ga, cfg, root, log_dir)
    assert len({reference[m] for m in [None] + NAMES}) == len(NAMES) + 1, reference  # a wrong adapter shows
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(ga.build_app(cfg), name="graft", route_prefix="/")
        f = Fleet(f"http://127.0.0.1:{port}", root, log_dir, ga)
        f.reference = reference
        yield f
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()
            # Replicas stop their graft; the kernel kills the rest with their replica (PDEATHSIG).
            # Anything still there is a leak: kill it, then fail.
            deadline = time.monotonic() + 15
            while graft_pids(root) and time.monotonic() < deadline:
                time.sleep(0.1)
            left = graft_pids(root)
            kill_all(left)
            assert not left, f"graft processes left behind: {left}"
            for name in os.listdir(log_dir):  # under ASan+UBSan: every graft's own report
                with open(os.path.join(log_dir, name), errors="replace") as f:
                    out = f.read()
                assert "Sanitizer" not in out and "runtime error" not in out, (name, out[-4000:])


def answer(r):
    assert r.status_code == 200, (r.status_code, r.text)
    return r.json()["choices"][0]["text"], r.headers["x-graft-replica"], r.headers


def registered(headers_of_replica):
    """Adapter names graft itself has registered, asked at the replica's graft port."""
    port = headers_of_replica["x-graft-port"]
    got = requests.get(f"http://127.0.0.1:{port}/lora-adapters", timeout=30)
    assert got.status_code == 200, got.text
    return {a["name"] for a in got.json()}


def test_models_lists_the_base_and_the_adapters(fleet):
    r = requests.get(fleet.url + "/v1/models", timeout=60)
    assert r.status_code == 200, r.text
    ids = [m["id"] for m in r.json()["data"]]
    assert ids[0] == os.path.basename(MODEL)[:-len(".gguf")] and ids[1:] == NAMES, ids


def test_base_requests_spread_and_match(fleet):
    seen = set()
    for _ in range(12):
        text, rep, _ = answer(fleet.complete(None))
        assert text == fleet.reference[None]
        seen.add(rep)
    # The base model's names mean "no multiplexed id" too.
    text, rep, _ = answer(fleet.complete(os.path.basename(MODEL)[:-len(".gguf")]))
    assert text == fleet.reference[None]
    seen.add(rep)
    assert len(seen) >= 2, seen


def test_adapters_stick_and_new_ones_go_to_the_fewest(fleet):
    held = {}  # replica -> adapter names in Ray's LRU order (least recent first)
    headers = {}  # replica -> the last headers it answered with
    for name in NAMES:
        counts = {rep: len(v) for rep, v in held.items()}
        fewest = min(list(counts.values()) + ([0] if len(held) < REPLICAS else []))
        text, rep, h = answer(fleet.complete(name))
        assert text == fleet.reference[name], name
        assert counts.get(rep, 0) == fewest, (name, rep, counts)  # a new adapter: a replica with the fewest
        lru = held.setdefault(rep, [])
        if len(lru) == BUDGET:
            lru.pop(0)  # Ray's LRU evicts; graft must unload it
        lru.append(name)
        headers[rep] = h
        time.sleep(SETTLE)
        # Repeated requests stick to that replica.
        for _ in range(3):
            text, again, _ = answer(fleet.complete(name))
            assert (again, text) == (rep, fleet.reference[name]), (name, rep, again)
    assert len(held) == REPLICAS, held
    assert sum(len(v) for v in held.values()) == REPLICAS * BUDGET  # 7 adapters: one was evicted
    for rep, h in headers.items():
        assert registered(h) == set(held[rep]), (rep, held)
    # Every adapter Ray still places is answered by its replica; the evicted one is loaded again.
    for rep, names in held.items():
        for name in names:
            text, again, _ = answer(fleet.complete(name))
            assert (again, text) == (rep, fleet.reference[name]), (name, rep, again)


def test_chat_and_streaming_pass_through(fleet):
    r = fleet.post("/v1/chat/completions", {"model": NAMES[1], "messages": [{"role": "user", "content": "Hi!"}],
                                            "max_tokens": TOKENS, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == fleet.reference["chat"]
    assert r.json()["model"] == NAMES[1] and r.headers["x-graft-replica"]

    r = fleet.post("/v1/completions", {"model": NAMES[2], "prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0,
                                       "stream": True}, stream=True)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
    assert r.headers["x-graft-replica"]
    chunks = [c for c in r.iter_content(chunk_size=None) if c]
    events = sse_events(b"".join(chunks).decode())
    assert events == fleet.reference["stream"]
    assert events[-1] == "[DONE]" and len(events) >= 3
    assert "".join(e["choices"][0]["text"] for e in events[:-1] if e["choices"]) == fleet.reference[NAMES[2]]

    # Errors come back as graft gives them, streamed or not.
    for stream in (False, True):
        r = fleet.complete("no-such-adapter", stream=stream)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error", r.text


def test_a_killed_graft_is_replaced_and_no_answer_is_wrong(fleet):
    name = NAMES[0]
    _, victim, h = answer(fleet.complete(name))
    pid = int(h["x-graft-pid"])
    assert pid in graft_pids(fleet.root)
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()

    bad, errors, seen = [], [], []
    stop = threading.Event()

    def client(model):
        while not stop.is_set():
            try:
                r = fleet.complete(model)
            except requests.RequestException as e:
                errors.append(f"{type(e).__name__}")
                continue
            if r.status_code == 200:
                if r.json()["choices"][0]["text"] != fleet.reference[model]:
                    bad.append((model, r.headers.get("x-graft-replica"), r.text))
                seen.append((model, r.headers["x-graft-replica"]))
            else:
                try:
                    clean = r.status_code >= 500 and r.json()["error"]["type"] == "unavailable_error"
                except (ValueError, KeyError, TypeError):
                    clean = False
                (errors if clean else bad).append((model, r.status_code, r.text[:300]))

    threads = [threading.Thread(target=client, args=(m,)) for m in (name, None, NAMES[1])]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 60
        recovered = False
        while time.monotonic() < deadline:
            st = serve.status().applications["graft"].deployments["GraftReplica"]
            if st.replica_states.get("RUNNING") == REPLICAS and len(graft_pids(fleet.root)) == REPLICAS \
                    and pid not in graft_pids(fleet.root):
                recovered = True
                break
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=150)
    print(f"\nkilled graft {pid} of replica {victim}; recovered in {time.monotonic() - killed:.1f} s; "
          f"{len(seen)} answers during recovery, all correct: {not bad}; {len(errors)} clean errors")
    assert recovered, (serve.status(), fleet.logs())
    assert not bad, bad
    assert seen, errors
    # After recovery every request succeeds, correctly, and none reaches the dead replica.
    time.sleep(SETTLE)
    for model in [None] + NAMES[:4]:
        text, rep, _ = answer(fleet.complete(model))
        assert text == fleet.reference[model] and rep != victim, (model, rep)
