"""deploy/loopback_router.py: metric parsing and replica choice, without servers."""
import importlib.util
import os
import random
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
spec = importlib.util.spec_from_file_location("loopback_router", os.path.join(ROOT, "deploy", "loopback_router.py"))
router = importlib.util.module_from_spec(spec)
_dont_write, sys.dont_write_bytecode = sys.dont_write_bytecode, True  # no deploy/__pycache__
spec.loader.exec_module(router)
sys.dont_write_bytecode = _dont_write


def exposition(waiting=0, running=0, kv=0.0, running_lora="", waiting_lora="", max_lora=4, gpu=(), cpu=(),
               residency=True):
    """Metrics in the shape graft serve --metrics writes them."""
    lines = [
        "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running {running}",
        "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting {waiting}",
        "# TYPE vllm:kv_cache_usage_perc gauge", f"vllm:kv_cache_usage_perc {kv}",
        "# TYPE vllm:lora_requests_info gauge",
        # an older series first: the newest (largest value) must win
        f'vllm:lora_requests_info{{max_lora="{max_lora}",running_lora_adapters="stale",waiting_lora_adapters=""}} 100.0',
        f'vllm:lora_requests_info{{max_lora="{max_lora}",running_lora_adapters="{running_lora}",'
        f'waiting_lora_adapters="{waiting_lora}"}} 1796219813.754720',
    ]
    if residency:
        lines.append("# TYPE vllm:lora_adapter_loaded gauge")
        for level, group in (("gpu", gpu), ("cpu", cpu)):
            for name in group:
                lines.append(f'vllm:lora_adapter_loaded{{adapter_name="{name}",level="{level}",pinned="false",rank="8"}} 1')
        lines += [f"vllm:num_gpu_loaded_lora_adapters {len(gpu)}", f"vllm:max_gpu_lora_adapters {max_lora}"]
    return "\n".join(lines) + "\n"


def state(**kw):
    return router.ReplicaState(router.parse_metrics(exposition(**kw)))


def test_parse_reads_graft_metrics():
    s = state(waiting=3, running=2, kv=0.25, running_lora="a, b", waiting_lora="c", gpu=("a", "b"), cpu=("d",))
    assert (s.waiting, s.running, s.kv) == (3, 2, 0.25)
    assert s.running_adapters == {"a", "b"} and s.waiting_adapters == {"c"}  # newest series, names trimmed
    assert s.max_lora == 4 and s.max_gpu == 4
    assert s.gpu == {"a", "b"} and s.cpu == {"d"}


def test_label_escapes():
    fam = router.parse_metrics('m{a="x\\"y",b="p,q"} 1\n')
    assert fam["m"] == [({"a": 'x"y', "b": "p,q"}, 1.0)]


def test_residency_scores():
    assert router.lora_score(state(gpu=("a",)), "a") == 1.0
    assert router.lora_score(state(gpu=("a",), cpu=("b",)), "b") == 0.7
    assert router.lora_score(state(gpu=("a",)), "new") == 0.6
    full = dict(max_lora=2, gpu=("a", "b"))
    assert router.lora_score(state(running_lora="a", **full), "new") == 0.3  # b is idle: evictable
    assert router.lora_score(state(running_lora="a,b", **full), "new") == 0.0


def test_lora_requests_info_scores_without_residency():
    kw = dict(residency=False, max_lora=2)
    assert router.lora_score(state(running_lora="a", **kw), "a") == 1.0
    assert router.lora_score(state(running_lora="a", **kw), "b") == 0.8
    assert router.lora_score(state(running_lora="a", waiting_lora="b", **kw), "b") == 0.6
    assert router.lora_score(state(running_lora="a", waiting_lora="c", **kw), "b") == 0.0


def test_pick_prefers_the_replica_holding_the_adapter():
    states = {"r1": state(gpu=("pirate",)), "r2": state(), "r3": state(cpu=("pirate",))}
    assert router.pick(states, "pirate", {"smollm2"})[0] == "r1"
    del states["r1"]
    assert router.pick(states, "pirate", {"smollm2"})[0] == "r3"


def test_pick_balances_queue_and_ignores_lora_for_the_base():
    states = {"r1": state(waiting=4, gpu=("pirate",)), "r2": state(waiting=0), "r3": state(waiting=2)}
    assert router.pick(states, "smollm2", {"smollm2"})[0] == "r2"
    assert router.pick(states, None, {"smollm2"})[0] == "r2"
    # a deep queue outweighs residency: 2*0 + 2*1 (r1) < 2*1 + 2*0.6 (r2)
    assert router.pick(states, "pirate", {"smollm2"})[0] == "r2"


def test_pick_ties_and_empty():
    states = {"r1": state(), "r2": state()}
    seen = {router.pick(states, None, set(), rng=random.Random(i))[0] for i in range(20)}
    assert seen == {"r1", "r2"}
    assert router.pick({}, None, set())[0] is None
