"""--kv-events: graft's KV-cache events as llm-d's precise prefix-cache scorer and Dynamo's KV router
read them (vLLM's wire format), decoded by a real subscriber (pyzmq + msgpack) and checked against the
server's own cache behaviour: what the events say a replica holds is what the next request reuses.

The layout is llm-d's decoder (llm-d-router pkg/kvevents/engineadapter, vllm_adapter.go): three
frames (topic kv@<pod>@<model>, 8-byte big-endian sequence, msgpack payload); the payload an array of
at least 3 (ts, events, data-parallel rank); each event a tagged array
  BlockStored  [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name]
  BlockRemoved [tag, block_hashes, medium]
  AllBlocksCleared [tag]
Block hashes are reproduced here with hashlib from the rule docs/DEPLOY.md states.
"""
import hashlib
import os
import shutil
import struct
import subprocess
import time

import msgpack
import pytest
import zmq

from conftest import BIN, MLX, MODEL, PEFT, Server, free_port

B = 16  # --kv-block-size (the default)
TOPIC = "kv@pod-a@smollm2"
BASE_DIGEST = hashlib.sha256(b"").digest()  # the selection digest of no adapters
END = (-1).to_bytes(8, "big", signed=True)


def block_hash(parent, digest, tokens):
    h = hashlib.sha256(struct.pack("<Q", parent or 0) + digest + struct.pack(f"<{len(tokens)}i", *tokens))
    return int.from_bytes(h.digest()[:8], "little") & ((1 << 63) - 1)


def decode_batch(payload):
    """llm-d's msgpackEventBatch.DecodeMsgpack and its vLLM event converters."""
    batch = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    assert isinstance(batch, list) and len(batch) >= 3, batch
    ts, events, dp_rank = batch[0], batch[1], batch[2]
    assert isinstance(ts, float) and abs(ts - time.time()) < 600, ts
    assert dp_rank == 0
    out = []
    for e in events:
        assert isinstance(e, list) and isinstance(e[0], str), e
        tag = e[0]
        if tag == "BlockStored":
            assert len(e) == 8, e
            _, hashes, parent, tokens, size, lora_id, medium, lora_name = e
            assert size == B and len(tokens) == B * len(hashes) and hashes, e
            assert all(isinstance(h, int) and 0 <= h < 2**63 for h in hashes + ([parent] if parent is not None else []))
            assert medium is None and (lora_id is None or isinstance(lora_id, int))
            out.append({"type": tag, "hashes": hashes, "parent": parent, "tokens": tokens, "lora_id": lora_id,
                        "lora_name": lora_name})
        elif tag == "BlockRemoved":
            assert len(e) == 3 and e[2] is None and e[1], e
            out.append({"type": tag, "hashes": e[1]})
        else:
            assert tag == "AllBlocksCleared" and len(e) == 1, e
            out.append({"type": tag})
    return out


class Subscriber:
    """A SUB socket and the block index a router keeps from it (hash -> block), with gap checks."""

    def __init__(self, port, replay_port):
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        self.sub.connect(f"tcp://127.0.0.1:{port}")
        self.replay_port = replay_port
        self.seq = None
        self.index = {}
        self.log = []
        self.resynced = False  # after a replay, batches already replayed may still be queued

    def replay(self, start):
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.connect(f"tcp://127.0.0.1:{self.replay_port}")
        dealer.send_multipart([b"", start.to_bytes(8, "big")])
        got = []
        while True:
            assert dealer.poll(5000), "no replay answer"
            empty, seq, payload = dealer.recv_multipart()
            assert empty == b""
            if seq == END:
                assert payload == b""
                break
            got.append((int.from_bytes(seq, "big"), decode_batch(payload)))
        dealer.close(0)
        return got

    def apply(self, seq, events):
        if self.seq is not None:
            assert seq == self.seq + 1, f"sequence gap or reorder: {self.seq} then {seq}"
        self.seq = seq
        for e in events:
            self.log.append(e)
            if e["type"] == "AllBlocksCleared":
                self.index.clear()
            elif e["type"] == "BlockStored":
                parent = e["parent"]
                assert parent is None or parent in self.index, "stored under a parent never stored"
                for i, h in enumerate(e["hashes"]):
                    assert h not in self.index, "stored twice without a removal"
                    self.index[h] = {"parent": parent, "tokens": e["tokens"][i * B:(i + 1) * B],
                                     "lora_name": e["lora_name"], "lora_id": e["lora_id"]}
                    parent = h
            else:
                for h in e["hashes"]:
                    assert self.index.pop(h, None) is not None, "removed a block never stored"

    def drain(self, quiet=0.4, limit=30):
        """Applies batches until none came for `quiet` seconds; returns their events."""
        start = len(self.log)
        deadline = time.time() + limit
        while time.time() < deadline and self.sub.poll(int(quiet * 1000)):
            topic, seq, payload = self.sub.recv_multipart()
            assert topic == TOPIC.encode() and len(seq) == 8
            seq = int.from_bytes(seq, "big")
            if self.seq is not None and seq <= self.seq:
                assert self.resynced, f"sequence went back from {self.seq} to {seq}"
                continue
            if self.seq is None and seq > 0:  # joined late (ZeroMQ's slow joiner): replay the start
                for s, events in self.replay(0):
                    if s < seq:
                        self.apply(s, events)
            self.apply(seq, decode_batch(payload))
        return self.log[start:]

    def cached_blocks(self, tokens, lora_name=None, digest=BASE_DIGEST):
        """How many leading blocks of `tokens` the index holds, found by their hashes (as a router would)."""
        parent, n = None, 0
        while (n + 1) * B <= len(tokens):
            h = block_hash(parent, digest, tokens[n * B:(n + 1) * B])
            b = self.index.get(h)
            if b is None or b["lora_name"] != lora_name:
                break
            parent, n = h, n + 1
        return n

    def close(self):
        self.sub.close(0)
        self.ctx.term()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("loras")
    shutil.copytree(PEFT, root / "pirate")
    shutil.copytree(MLX, root / "other")
    port, replay_port = free_port(), free_port()
    args = ["--parallel", "2", "--ctx-size", "1024", "--metrics", "--alias", "smollm2", "--allow-runtime-lora",
            "--lora-root", str(root), "--lora", f"pirate={root / 'pirate'}", "--kv-events", f"tcp://*:{port}",
            "--kv-events-replay", f"tcp://*:{replay_port}", "--kv-events-topic", TOPIC]
    s = Server(*args)
    sub = Subscriber(port, replay_port)
    state = {"server": s, "sub": sub, "root": root, "args": args}
    yield state
    sub.close()
    # the server now running: test_restart_... replaces the first one
    assert state["server"].stop() == 0, state["server"].output()


def render(s, prompt):
    r = s.post("/v1/completions/render", {"model": "smollm2", "prompt": prompt})
    assert r.status_code == 200, r.text
    (one,) = r.json()
    return one["token_ids"]


def complete(s, prompt, model="smollm2", n=3):
    r = s.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "model": model})
    assert r.status_code == 200, r.text
    return r.json()


P = "The lighthouse keeper counted the ships that passed each night, writing their names in a worn " \
    "leather book that had belonged to his grandfather, and he wondered where they were all going"
Q = "Quantum computers use qubits, which can hold a superposition of states, to solve some problems " \
    "much faster than any classical machine could ever hope to, at least in theory"


def test_stream_starts_cleared_and_replays(fleet):
    sub = fleet["sub"]
    batches = sub.replay(0)
    assert batches and batches[0][0] == 0 and batches[0][1] == [{"type": "AllBlocksCleared"}]
    assert [s for s, _ in batches] == list(range(len(batches))), "replay is gapless"


def test_prefill_stores_the_full_blocks_of_what_the_slot_holds(fleet):
    s, sub = fleet["server"], fleet["sub"]
    sub.drain()
    tokens = render(s, P)
    assert tokens == s.post("/tokenize", {"content": P}).json()["tokens"]
    out = complete(s, P)
    events = sub.drain()
    stored = [e for e in events if e["type"] == "BlockStored"]
    assert stored and all(e["lora_name"] is None and e["lora_id"] is None for e in stored)
    chain = [t for e in stored for t in e["tokens"]]
    n = len(chain) // B
    assert n >= len(tokens) // B, "every full block of the prompt is stored"
    assert chain == (tokens + out["tokens"])[:n * B]
    assert sub.cached_blocks(chain) == n, "the blocks' hashes follow the documented rule"
    # What the index says is what graft reuses: a follow-up sharing the prefix reuses those blocks.
    again = complete(s, P + " tonight")
    assert n * B <= again["tokens_cached"] < (n + 1) * B + B, again["tokens_cached"]


def test_adapter_blocks_are_apart_from_base_blocks(fleet):
    s, sub = fleet["server"], fleet["sub"]
    sub.drain()
    base = set(sub.index)
    complete(s, P, model="pirate")
    stored = [e for e in sub.drain() if e["type"] == "BlockStored"]
    assert stored and all(e["lora_name"] == "pirate" and isinstance(e["lora_id"], int) for e in stored)
    hashes = {h for e in stored for h in e["hashes"]}
    assert not hashes & base
    assert sub.cached_blocks(render(s, P), lora_name="pirate") == 0, "not under the base digest"
    assert sub.cached_blocks(render(s, P)) > 0, "the base chain is still held"


def test_eviction_removes_blocks_and_the_index_matches_reuse(fleet):
    s, sub = fleet["server"], fleet["sub"]
    sub.drain()
    p = render(s, P)
    before = sub.cached_blocks(p)
    assert before > 0
    complete(s, Q)  # two slots (base P, pirate P): Q takes the least recently used, the base one
    events = sub.drain()
    assert any(e["type"] == "BlockRemoved" for e in events)
    assert sub.cached_blocks(p) == 0 and sub.cached_blocks(render(s, Q)) > 0
    assert complete(s, P)["tokens_cached"] < B, "the index said P's blocks were gone"


def test_unload_removes_and_a_reload_stores_new_blocks(fleet):
    s, sub, root = fleet["server"], fleet["sub"], fleet["root"]
    complete(s, P, model="pirate")
    sub.drain()
    pirate = {h for h, b in sub.index.items() if b["lora_name"] == "pirate"}
    assert pirate
    assert s.post("/v1/unload_lora_adapter", {"lora_name": "pirate"}).status_code == 200
    removed = {h for e in sub.drain() if e["type"] == "BlockRemoved" for h in e["hashes"]}
    assert pirate <= removed and not any(b["lora_name"] == "pirate" for b in sub.index.values())
    # The same name, other bytes: its blocks are new blocks.
    r = s.post("/v1/load_lora_adapter", {"lora_name": "pirate", "lora_path": str(root / "other")})
    assert r.status_code == 200, r.text
    complete(s, P, model="pirate")
    stored = {h for e in sub.drain() if e["type"] == "BlockStored" for h in e["hashes"]}
    assert stored and not stored & pirate


def test_cache_config_render_and_version(fleet):
    s = fleet["server"]
    metrics = s.get("/metrics").text
    line = next(l for l in metrics.splitlines() if l.startswith("vllm:cache_config_info{"))
    assert 'block_size="16"' in line and 'num_gpu_blocks="64"' in line, line  # 2 slots x 512 tokens / 16
    assert s.get("/version").json() == {"version": "0.1.0"}
    chat = {"model": "smollm2", "messages": [{"role": "user", "content": "Hi!"}]}
    r = s.post("/v1/chat/completions/render", chat)
    assert r.status_code == 200, r.text
    ids = r.json()["token_ids"]
    done = s.post("/v1/chat/completions", {**chat, "max_tokens": 1, "temperature": 0}).json()
    assert len(ids) == done["usage"]["prompt_tokens"]
    bad = s.post("/v1/completions/render", {"model": "smollm2"})
    assert bad.status_code == 400 and "prompt" in bad.json()["error"]["message"]


def test_restart_starts_the_sequence_again_with_a_clear(fleet):
    s, sub = fleet["server"], fleet["sub"]
    complete(s, Q)
    sub.drain()
    last = sub.seq
    assert s.stop() == 0
    fleet["server"] = s = Server(*fleet["args"])
    # The SUB socket reconnects by itself, some time after the new server bound: a request per try,
    # each a new prefix (new blocks), until a batch arrives.
    for attempt in range(20):
        complete(s, f"Attempt {attempt}. " + P)
        if sub.sub.poll(500):
            break
    else:
        pytest.fail("no batch from the restarted server")
    topic, seq, payload = sub.sub.recv_multipart()
    seq = int.from_bytes(seq, "big")
    assert seq < last, "a restarted publisher counts from 0 again"
    first = sub.replay(0)  # a router's answer to a sequence going backwards: rebuild from the start
    assert first[0][0] == 0 and first[0][1] == [{"type": "AllBlocksCleared"}]
    sub.seq, sub.index, sub.resynced = None, {}, True
    for s_, events in first:
        sub.apply(s_, events)
    sub.drain()
    assert sub.cached_blocks(render(s, f"Attempt {attempt}. " + P)) > 0, "the rebuilt index holds the new server's blocks"


def test_bad_endpoints_are_refused_at_startup(tmp_path):
    def run(*args):
        return subprocess.run([BIN, "serve", "-m", MODEL, "--port", "0", *args], capture_output=True, text=True,
                              timeout=60)
    r = run("--kv-events", "nonsense")
    assert r.returncode == 2 and "--kv-events 'nonsense'" in r.stderr, r.stderr
    r = run("--kv-events-topic", "kv@x@y")
    assert r.returncode == 2 and "only used with --kv-events" in r.stderr, r.stderr
    r = run("--kv-events", "tcp://*:5557", "--kv-block-size", "0")
    assert r.returncode == 2 and "--kv-block-size" in r.stderr, r.stderr
    with zmq.Context() as ctx, ctx.socket(zmq.PUB) as taken:
        port = taken.bind_to_random_port("tcp://*")
        r = run("--kv-events", f"tcp://*:{port}")
        assert r.returncode == 5 and "cannot bind" in r.stderr, r.stderr  # the OS refused: as a taken --port
