"""Scale-out on loopback: three `graft serve` replicas share one --lora-root, each holds its own
adapters (disjoint resident sets), and a small router in the test picks a replica per request from
each replica's /metrics alone, scoring it as llm-d's LoRA load-state scorer does:

  1.0  the adapter is resident (vllm:lora_adapter_loaded level "gpu", or in running_lora_adapters)
  0.7  the adapter is registered but not built (level "cpu")
  0.6  the replica has room for one more adapter (gpu-loaded adapters < vllm:max_gpu_lora_adapters,
       or max_lora of vllm:lora_requests_info where the former is 0)
  0    otherwise

the best score wins, ties by the fewest vllm:num_requests_waiting + vllm:num_requests_running.
Each replica: --parallel 2 --max-loras-resident 2 (room for two built adapters).
"""
import os
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client.parser import text_string_to_metric_families

import adapter_files as af
from conftest import PEFT, Server

PROMPT = "The three most important things about sailing are"
FACTORS = [1.0, 1.5, 2.0]  # three adapters with distinct greedy outputs on PROMPT
NAMES = [f"ad{i}" for i in range(len(FACTORS))]


def scrape(s):
    r = s.get("/metrics")
    assert r.status_code == 200, r.text
    return [x for f in text_string_to_metric_families(r.text) for x in f.samples]


def one(samples, name, **labels):
    got = [x.value for x in samples if x.name == name and all(x.labels.get(k) == v for k, v in labels.items())]
    assert len(got) <= 1, (name, labels, got)
    return got[0] if got else None


def replica_state(s):
    samples = scrape(s)
    info = [x for x in samples if x.name == "vllm:lora_requests_info"]
    assert len(info) == 1, info
    labels = info[0].labels
    levels = {x.labels["adapter_name"]: x.labels["level"] for x in samples if x.name == "vllm:lora_adapter_loaded"}
    max_gpu = one(samples, "vllm:max_gpu_lora_adapters")
    return {
        "levels": levels,
        "running": [n for n in labels["running_lora_adapters"].split(",") if n],
        "capacity": int(max_gpu) if max_gpu else int(labels["max_lora"]),
        "load": one(samples, "vllm:num_requests_waiting") + one(samples, "vllm:num_requests_running"),
        "samples": samples,
    }


def score(st, adapter):
    if st["levels"].get(adapter) == "gpu" or adapter in st["running"]:
        return 1.0
    if st["levels"].get(adapter) == "cpu":
        return 0.7
    if sum(1 for level in st["levels"].values() if level == "gpu") < st["capacity"]:
        return 0.6
    return 0.0


def pick(replicas, adapter):
    """(index of the chosen replica, each replica's score)."""
    states = [replica_state(r) for r in replicas]
    scores = [score(st, adapter) for st in states]
    best = max(range(len(replicas)), key=lambda i: (scores[i], -states[i]["load"], -i))
    return best, scores


def requests_for(replica, adapter):
    v = one(scrape(replica), "graft:lora_adapter_requests_total", adapter_name=adapter)
    return 0 if v is None else v


def registered(replica):
    return {a["name"] for a in replica.get("/lora-adapters").json()}


def place(replicas, layout):
    """Loads and unloads so that replica i holds exactly the adapters layout[i]."""
    for r, want in zip(replicas, layout):
        have = registered(r)
        for name in have - set(want):
            assert r.post("/v1/unload_lora_adapter", {"lora_name": name}).status_code == 200
        for name in set(want) - have:
            got = r.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": name})  # relative to the root
            assert got.status_code == 200, got.text
        assert registered(r) == set(want)


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    root = os.path.realpath(str(tmp_path_factory.mktemp("shared-root")))
    for name, f in zip(NAMES, FACTORS):
        af.scaled_copy(PEFT, os.path.join(root, name), f) if f != 1.0 else af.plain_copy(PEFT, os.path.join(root, name))
    args = ("--metrics", "--allow-runtime-lora", "--lora-root", root, "--max-loras-resident", "2", "--parallel", "2",
            "--ctx-size", "1024")
    with ThreadPoolExecutor(len(NAMES)) as pool:
        futures = [pool.submit(Server, *args) for _ in NAMES]
    started, errors = [], []
    for f in futures:
        try:
            started.append(f.result())
        except Exception as e:  # noqa: BLE001 - stop the others, then report
            errors.append(e)
    if errors:
        for s in started:
            s.stop()
        raise errors[0]
    yield started
    for s in started:
        assert s.stop() == 0, s.output()


def test_requests_land_on_the_replica_holding_their_adapter(replicas):
    place(replicas, [[n] for n in NAMES])
    outputs = {}
    for i, name in enumerate(NAMES):
        chosen, scores = pick(replicas, name)
        assert scores == [1.0 if j == i else 0.6 for j in range(len(replicas))], (name, scores)
        assert chosen == i, (name, scores)
        before = [requests_for(r, name) for r in replicas]
        got = replicas[chosen].complete(PROMPT, n=4, model=name, cache_prompt=False)
        assert got["model"] == name and len(got["tokens"]) == 4
        outputs[name] = got["tokens"]
        after = [requests_for(r, name) for r in replicas]
        assert after == [b + (1 if j == chosen else 0) for j, b in enumerate(before)], (name, before, after)
        # A replica without the adapter (and no --lora-dir) cannot serve it.
        other = replicas[(i + 1) % len(replicas)]
        r = other.post("/completion", {"prompt": PROMPT, "n_predict": 4, "model": name})
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error", r.text
    assert len({tuple(t) for t in outputs.values()}) == len(NAMES), outputs


def test_routing_follows_an_adapter_moved_between_replicas(replicas):
    place(replicas, [[n] for n in NAMES])
    ref = replicas[0].complete(PROMPT, n=4, model="ad0", cache_prompt=False)["tokens"]
    assert pick(replicas, "ad0")[0] == 0

    place(replicas, [[], ["ad1", "ad0"], ["ad2"]])
    s0, s1 = replica_state(replicas[0]), replica_state(replicas[1])
    assert "ad0" not in s0["levels"] and one(s0["samples"], "graft:lora_adapters_registered") == 0, s0["levels"]
    assert s1["levels"] == {"ad0": "gpu", "ad1": "gpu"}, s1["levels"]
    assert one(s1["samples"], "graft:lora_adapters_registered") == 2

    chosen, scores = pick(replicas, "ad0")
    assert scores == [0.6, 1.0, 0.6] and chosen == 1, scores
    before = [requests_for(r, "ad0") for r in replicas]
    got = replicas[chosen].complete(PROMPT, n=4, model="ad0", cache_prompt=False)
    assert got["tokens"] == ref, "the same adapter files gave other tokens on another replica"
    after = [requests_for(r, "ad0") for r in replicas]
    assert after[1] == before[1] + 1 and after[0] == before[0] and after[2] == before[2], (before, after)
    r = replicas[0].post("/completion", {"prompt": PROMPT, "n_predict": 4, "model": "ad0"})
    assert r.status_code == 404, r.text

    # Replica 1 is full (2 adapters, --parallel 2): an adapter held nowhere goes to a replica with room.
    chosen, scores = pick(replicas, "ad-new")
    assert scores == [0.6, 0.0, 0.6] and chosen in (0, 2), scores
    place(replicas, [[n] for n in NAMES])
    assert pick(replicas, "ad0")[0] == 0
