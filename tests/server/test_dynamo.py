"""NVIDIA Dynamo's KV router in front of three graft replicas, all on loopback (ai-dynamo: file
discovery, TCP request plane, ZeroMQ event plane; no etcd, no NATS, no GPU).

Three `graft serve --threads 1 --kv-events ipc://...` replicas, one deploy/dynamo/graft_worker.py per
replica (it relays the replica's KV events to the router and sends token ids to its /completion), and
`python -m dynamo.frontend --router-mode kv`, which tokenizes with the files deploy/dynamo/gguf_hf.py
writes from the GGUF. Replica 0 also serves the pirate adapter, registered in discovery as a LoRA.

Checked: the frontend lists the model and the adapter and answers chat; its tokenizer gives graft's
ids; a long prompt P lands on one replica r and P + a suffix lands on r again, r evaluating only the
suffix (its llamacpp:prompt_tokens_total), the others nothing; unrelated prompts reach at least two
replicas; the adapter reaches only the replica that has it; a replica killed outright costs no
request (the frontend migrates, the replica's worker leaves discovery).

Needs the ai-dynamo package (deploy/dynamo/README.md says how to install it) importable by
DYNAMO_PYTHON, by default .venv-dynamo/bin/python in the source tree if there is one, else this
interpreter; skipped when it is not.
"""
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from conftest import BIN, MLX, MODEL, PEFT, SRC, START_TIMEOUT, free_port

# ai-dynamo pins pydantic below the test venv's (Ray Serve's), so it lives in a venv of its own.
DYNAMO_PY = os.environ.get("DYNAMO_PYTHON") or next(
    (p for p in [os.path.join(SRC, ".venv-dynamo", "bin", "python")] if os.path.exists(p)), sys.executable)
HERE = os.path.join(SRC, "deploy", "dynamo")
BASE = "SmolLM2-135M-Instruct.Q4_1"
N = 3
P = ("The lighthouse keeper wrote in his log every evening. He noted the wind, the height of the waves, "
     "the ships that passed and the birds that rested on the rail of the gallery. In winter the lamp burned "
     "for sixteen hours, and he climbed the stairs four times a night to trim the wick and wind the clockwork "
     "that turned the lens. The supply boat came once a month when the sea allowed it, bringing oil, flour, "
     "letters and newspapers that were already three weeks old. He read them slowly, one page each night, "
     "so that they would last until the boat came again.")


def dynamo_missing():
    try:
        r = subprocess.run([DYNAMO_PY, "-c", "import dynamo.frontend, dynamo.common.backend, aiohttp, tokenizers"],
                           capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{DYNAMO_PY}: {e}"
    return None if r.returncode == 0 else r.stderr.strip().splitlines()[-1]


class Cluster:
    def __init__(self, tmp):
        self.tmp = tmp
        self.procs = []
        self.env = dict(os.environ, DYN_FILE_KV=os.path.join(tmp, "discovery"), DYN_TCP_RPC_HOST="127.0.0.1",
                        DYN_TCP_RESPONSE_STREAM_HOST="127.0.0.1", DYN_EVENT_PLANE_HOST="127.0.0.1",
                        DYN_SELF_HOST_METADATA="0", XDG_CACHE_HOME=os.path.join(tmp, "cache"))

    def spawn(self, name, cmd, **env):
        log = open(os.path.join(self.tmp, name + ".log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(self.env, **env))
        self.procs.append(p)
        return p

    def log(self, name):
        with open(os.path.join(self.tmp, name + ".log"), errors="replace") as f:
            return f.read()

    def start(self):
        self.grafts, self.urls, self.workers, self.kv = [], [], [], []
        for i in range(N):
            port = free_port()
            kv = f"ipc://{self.tmp}/kv{i}"
            extra = (["--lora", f"pirate={PEFT}"] if i == 0 else
                     ["--allow-runtime-lora", "--lora-root", os.path.dirname(MLX)] if i == 2 else [])
            self.grafts.append(self.spawn(f"graft{i}", [
                BIN, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", str(port), "--threads", "1",
                "--parallel", "2", "--ctx-size", "4096", "--metrics", "--kv-events", kv, "--kv-block-size", "16",
                *extra]))
            self.urls.append(f"http://127.0.0.1:{port}")
            self.kv.append(kv)
        self.http = free_port()
        self.url = f"http://127.0.0.1:{self.http}"
        # DYN_LORA_ENABLED: the frontend routes an adapter's requests only to the workers that
        # registered it (without it, to any worker of the endpoint).
        self.env["DYN_LORA_ENABLED"] = "true"
        self.frontend = self.spawn("frontend", [
            DYNAMO_PY, "-m", "dynamo.frontend", "--router-mode", "kv", "--discovery-backend", "file",
            "--request-plane", "tcp", "--event-plane", "zmq", "--kv-cache-block-size", "16",
            "--migration-limit", "3", "--http-host", "127.0.0.1", "--http-port", str(self.http)])
        self.system = f"http://127.0.0.1:{free_i16_port()}"  # worker 2's system port: runtime adapters
        for i, url in enumerate(self.urls):
            wait_for(lambda: self.check(self.grafts[i], f"graft{i}") and health(url), f"graft {i}")
            env = {"DYN_SYSTEM_HOST": "127.0.0.1", "DYN_SYSTEM_PORT": self.system.rsplit(":", 1)[1]} if i == 2 else {}
            self.workers.append(self.spawn(f"worker{i}", [
                DYNAMO_PY, os.path.join(HERE, "graft_worker.py"), "--graft-url", url, "--kv-events", self.kv[i],
                "--model", MODEL, "--discovery-backend", "file", "--lora", "auto"], **env))
        instances = os.path.join(self.env["DYN_FILE_KV"], "v1", "instances")
        wait_for(lambda: all(self.check(w, f"worker{i}") for i, w in enumerate(self.workers))
                 and self.check(self.frontend, "frontend")
                 and os.path.isdir(instances) and len(os.listdir(instances)) >= N
                 and {BASE, "pirate"} <= model_ids(self.url), "the workers' registration")

    def check(self, proc, name):
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode}: {self.log(name)[-4000:]}")
        return True

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def free_i16_port():
    """A free loopback port below 32768: ai-dynamo 1.6.1 parses DYN_SYSTEM_PORT as an i16."""
    for port in random.sample(range(20000, 32768), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port below 32768")


def wait_for(cond, what, timeout=START_TIMEOUT):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if cond():
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def health(url):
    return requests.get(url + "/health", timeout=2).status_code == 200


def model_ids(url):
    r = requests.get(url + "/v1/models", timeout=5)
    return {m["id"] for m in r.json()["data"]} if r.status_code == 200 else set()


def counter(url, name, **labels):
    text = requests.get(url + "/metrics", timeout=10).text
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in (name, name + "_total") and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    return 0.0


@pytest.fixture(scope="module")
def cluster():
    missing = dynamo_missing()
    if missing:
        assert not os.environ.get("GRAFT_REQUIRE_ENGINES"), f"make test-all needs ai-dynamo (make engines-env): {missing}"
        pytest.skip(f"ai-dynamo is not importable by {DYNAMO_PY} ({missing}); "
                    "set DYNAMO_PYTHON to a Python with ai-dynamo==1.6.1 (deploy/dynamo/README.md)")
    tmp = tempfile.mkdtemp(prefix="graft-dynamo-test-")
    c = Cluster(tmp)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def complete(c, prompt, model=BASE, max_tokens=1, **extra):
    r = requests.post(c.url + "/v1/completions", json={"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                                       "temperature": 0, **extra}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def router_sum(c, name, **labels):
    """The frontend's metric `name` summed over the series whose labels match (a callable tests one)."""
    text = requests.get(c.url + "/metrics", timeout=10).text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name.startswith(name)
               and all(v(s.labels.get(k)) if callable(v) else s.labels.get(k) == v for k, v in labels.items()))


def stored_events(c):
    """BlockStored events the router's indexer has applied, over all workers."""
    return router_sum(c, "dynamo_component_kv_cache_events_applied", event_type="stored", status="ok")


def prompt_counts(c):
    return [counter(u, "llamacpp:prompt_tokens_total") for u in c.urls]


def tokens(c, text):
    r = requests.post(c.urls[0] + "/tokenize", json={"content": text}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def test_models_and_chat(cluster):
    """The frontend renders the GGUF's chat template and tokenizes as graft does: the same answer,
    token for token, as graft's own /v1/chat/completions, ending on EOS as graft's does."""
    assert {BASE, "pirate"} <= model_ids(cluster.url)
    req = {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 32, "temperature": 0}
    r = requests.post(cluster.url + "/v1/chat/completions", timeout=300, json={"model": BASE, **req})
    assert r.status_code == 200, r.text
    got = r.json()
    want = requests.post(cluster.urls[1] + "/v1/chat/completions", timeout=300, json=req).json()
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"], (got, want)
    assert got["choices"][0]["finish_reason"] == want["choices"][0]["finish_reason"] == "stop", (got, want)
    for k in ("prompt_tokens", "completion_tokens"):
        assert got["usage"][k] == want["usage"][k], (got, want)


def test_frontend_tokenizer_is_grafts(cluster):
    """The files gguf_hf.py wrote give the ids graft's own tokenizer gives."""
    texts = [P, "Hello world", "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n", "  tabs\tand\n\nnewlines  ",
             "héllo wörld, naïve café — 日本語 😀", "x=1;y=22;z=333;w=4444", "don't won't I'll we've"]
    hf_dir = [d for d in os.listdir(os.path.join(cluster.tmp, "cache", "graft-dynamo"))][0]
    script = ("import json,sys; from tokenizers import Tokenizer; t=Tokenizer.from_file(sys.argv[1]);"
              "print(json.dumps([t.encode(s, add_special_tokens=False).ids for s in json.loads(sys.stdin.read())]))")
    out = subprocess.run([DYNAMO_PY, "-c", script, os.path.join(cluster.tmp, "cache", "graft-dynamo", hf_dir,
                                                                 "tokenizer.json")],
                         input=json.dumps(texts), capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == [tokens(cluster, t) for t in texts]


def test_prefix_stays_on_its_replica(cluster):
    before, events = prompt_counts(cluster), stored_events(cluster)
    complete(cluster, P)
    wait_for(lambda: stored_events(cluster) > events, "P's BlockStored events at the router", timeout=30)
    after = prompt_counts(cluster)
    grew = [i for i in range(N) if after[i] > before[i]]
    assert len(grew) == 1, (before, after)
    r = grew[0]
    n_p = len(tokens(cluster, P))
    assert after[r] - before[r] == n_p, (before, after)
    cached = router_sum(cluster, "dynamo_component_router_kv_selected_cached_prefix_tokens")
    for k, suffix in enumerate([" What did he write about first?", " How often did the boat come?",
                                " Why did he read slowly?", " What burned in winter?", " Who climbed the stairs?"]):
        before = prompt_counts(cluster)
        complete(cluster, P + suffix)
        after = prompt_counts(cluster)
        delta = [a - b for a, b in zip(after, before)]
        want = len(tokens(cluster, P + suffix)) - len(tokens(cluster, P))
        assert delta[r] == want and sum(delta) == want, (k, r, delta, want)
    # The router chose r for P's full blocks, from graft's events, every time; and applied all of them.
    assert router_sum(cluster, "dynamo_component_router_kv_selected_cached_prefix_tokens") - cached == 5 * (n_p // 16 * 16)
    assert router_sum(cluster, "dynamo_component_kv_cache_events_applied", status=lambda v: v != "ok") == 0
    assert router_sum(cluster, "dynamo_component_kv_cache_event_warnings") == 0


def test_unrelated_prompts_spread(cluster):
    before = prompt_counts(cluster)
    topics = ["apples", "volcanoes", "violins", "glaciers", "bicycles", "comets", "bees", "castles", "rivers"]
    prompts = [f"Write a long story about {t} and the people who loved them, with many details." for t in topics]
    with ThreadPoolExecutor(len(prompts)) as ex:
        list(ex.map(lambda p: complete(cluster, p, max_tokens=24), prompts))
    after = prompt_counts(cluster)
    assert sum(1 for a, b in zip(after, before) if a > b) >= 2, (before, after)


def test_adapter_reaches_only_its_replica(cluster):
    before = counter(cluster.urls[0], "graft:lora_adapter_requests_total", adapter_name="pirate")
    want = requests.post(cluster.urls[0] + "/v1/completions", timeout=300, json={
        "model": "pirate", "prompt": "Tell me about the sea.", "max_tokens": 12, "temperature": 0}).json()
    for _ in range(3):
        got = complete(cluster, "Tell me about the sea.", model="pirate", max_tokens=12)
        assert got["choices"][0]["text"] == want["choices"][0]["text"], (got, want)
    after = counter(cluster.urls[0], "graft:lora_adapter_requests_total", adapter_name="pirate")
    assert after - before == 3 + 1, (before, after)


def test_adapter_loaded_at_run_time(cluster):
    """The worker's engine updates load_lora / unload_lora: graft's vLLM routes, then the card."""
    r = requests.post(cluster.system + "/engine/update/load_lora", timeout=120,
                      json={"lora_name": "mlx-pirate", "lora_path": os.path.basename(MLX)})
    assert r.status_code == 200 and r.json()["status"] == "success", r.text
    wait_for(lambda: "mlx-pirate" in model_ids(cluster.url), "the adapter's card", timeout=30)
    for _ in range(3):
        assert "mlx-pirate" not in {m["id"] for m in requests.get(cluster.urls[0] + "/v1/models").json()["data"]}
        complete(cluster, "Tell me about the sea.", model="mlx-pirate", max_tokens=4)
    assert counter(cluster.urls[2], "graft:lora_adapter_requests_total", adapter_name="mlx-pirate") == 3
    r = requests.post(cluster.system + "/engine/update/unload_lora", timeout=120, json={"lora_name": "mlx-pirate"})
    assert r.status_code == 200 and r.json()["status"] == "success", r.text
    wait_for(lambda: "mlx-pirate" not in model_ids(cluster.url), "the card's removal", timeout=30)
    r = requests.post(cluster.url + "/v1/completions", timeout=60,
                      json={"model": "mlx-pirate", "prompt": "Ahoy", "max_tokens": 2})
    assert r.status_code == 404, r.text


def test_replica_loss_is_survived(cluster):
    """Last: kills a replica. The one holding P is the worst case: the router prefers it."""
    counts = prompt_counts(cluster)
    complete(cluster, P + " One more question?")
    after = prompt_counts(cluster)
    victim = max(range(N), key=lambda i: after[i] - counts[i])
    cluster.grafts[victim].kill()
    cluster.grafts[victim].wait()
    for k in range(6):
        complete(cluster, P + f" Question number {k}?", max_tokens=4)
        complete(cluster, f"An unrelated prompt number {k} about owls.", max_tokens=4)
    cluster.workers[victim].wait(timeout=60)  # its worker noticed and left discovery
    for k in range(3):
        complete(cluster, P + f" Late question {k}?", max_tokens=4)
    assert BASE in model_ids(cluster.url)
