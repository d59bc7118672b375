"""graft serve on the non-Llama families, with their adapters.

Every tiny family checkpoint (gemma2, gemma3, phi3, mixtral, qwen3_moe) serves its PEFT LoRA (and
mlx-lm's, where the fixture exists) unfused: the adapter changes the text, a request mixed with a
base request in one batch gets what it gets alone, and a server fusing the adapter gives what the
unfused one gives at scale 1.

The tiny Qwen3-MoE checkpoint (tests/fixtures/models/qwen3_moe_f32: 4 experts, top-2, a dense layer)
with two expert adapters made by the real tools (tools/gen_moe_fixtures.py): PEFT 0.21's
target_parameters LoRA on the 3-D expert parameters, and mlx-lm 0.32's LoRASwitchLinear pairs
(router included). Their numerics against PEFT and mlx-lm are checked in
tests/runtime/moe_family_test.cpp; here: the server runs them unfused with per-request scales, a
batch mixing them (and the base) gives every request what it gets alone, the fused server gives
what the unfused one gives at scale 1, and a bad adapter id is refused with the server still up.
"""
import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from conftest import SRC, Server

MOE = f"{SRC}/tests/fixtures/models/qwen3_moe_f32"
PEFT_EXPERTS = f"{SRC}/tests/fixtures/engine_adapters/qwen3_moe_f32/peft_experts"
MLX_SWITCH = f"{SRC}/tests/fixtures/engine_adapters/qwen3_moe_f32/mlx_switch"
PROMPTS = ["Hello world", "Once upon a time", "The ocean is", "def f(n):", "Ten tips"]
SETTINGS = [None, [], [{"id": 0, "scale": 1.0}], [{"id": 1, "scale": 1.0}],
            [{"id": 0, "scale": 0.5}, {"id": 1, "scale": 1.0}]]


@pytest.fixture(scope="module")
def moe():
    s = Server("--lora", PEFT_EXPERTS, "--lora", MLX_SWITCH, "--parallel", "4", model=MOE)
    yield s
    assert s.stop() == 0, s.output()


def tokens(server, prompt, lora):
    fields = {} if lora is None else {"lora": lora}
    return server.complete(prompt, n=12, **fields)["tokens"]


def test_expert_adapters_in_a_mixed_batch_equal_solo_runs(moe):
    cases = [(p, l) for p in PROMPTS for l in SETTINGS]
    solo = [tokens(moe, p, l) for p, l in cases]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda c: tokens(moe, *c), cases))
    for (p, l), a, b in zip(cases, solo, together):
        assert a == b, f"prompt {p!r} lora {l}: alone {a} vs in a mixed batch {b}"
    by = dict(zip([(p, repr(l)) for p, l in cases], solo))
    # each adapter changes the text of some prompt (a test that cannot fail is a defect)
    assert any(by[(p, repr([{"id": 0, "scale": 1.0}]))] != by[(p, repr([]))] for p in PROMPTS)
    assert any(by[(p, repr([{"id": 1, "scale": 1.0}]))] != by[(p, repr([]))] for p in PROMPTS)


def test_fused_server_equals_unfused_at_scale_one(moe):
    fused = Server("--lora-fuse", "--lora", PEFT_EXPERTS, "--parallel", "1", model=MOE)
    try:
        for p in PROMPTS:
            assert tokens(fused, p, None) == tokens(moe, p, [{"id": 0, "scale": 1.0}]), p
    finally:
        assert fused.stop() == 0, fused.output()


def probs(server, prompt, lora):
    r = server.complete(prompt, n=1, lora=lora, n_probs=3)
    return [(t["id"], round(t["logprob"], 4)) for t in r["completion_probabilities"][0]["top_logprobs"]]


FAMILIES = ["gemma2_f32", "gemma3_f32", "phi3_f32", "mixtral_f32"]


@pytest.mark.parametrize("family", FAMILIES)
def test_family_serves_its_adapters_fused_and_unfused(family):
    model = f"{SRC}/tests/fixtures/models/{family}"
    root = f"{SRC}/tests/fixtures/engine_adapters/{family}"
    adapters = [f"{root}/peft_lora"] + [f"{root}/{k}" for k in ("mlx_lora", "mlx_switch") if os.path.isdir(f"{root}/{k}")]
    args = [a for path in adapters for a in ("--lora", path)]
    s = Server(*args, "--parallel", "2", model=model)
    try:
        settings = [[]] + [[{"id": i, "scale": 1.0}] for i in range(len(adapters))]
        solo = {repr(l): [tokens(s, p, l) for p in PROMPTS] for l in settings}
        for i in range(len(adapters)):  # the tiny models' greedy text can stay put; their logprobs move
            assert probs(s, PROMPTS[1], settings[i + 1]) != probs(s, PROMPTS[1], []), f"{adapters[i]} changes nothing"
        with ThreadPoolExecutor(4) as pool:
            cases = [(p, l) for p in PROMPTS[:2] for l in settings]
            together = list(pool.map(lambda c: tokens(s, *c), cases))
        for (p, l), b in zip(cases, together):
            assert solo[repr(l)][PROMPTS.index(p)] == b, f"{family} prompt {p!r} lora {l} alone vs mixed"
    finally:
        assert s.stop() == 0, s.output()
    fused = Server("--lora-fuse", "--lora", adapters[0], "--parallel", "1", model=model)
    try:
        assert [tokens(fused, p, None) for p in PROMPTS] == solo[repr(settings[1])]
    finally:
        assert fused.stop() == 0, fused.output()


def test_unknown_adapter_id_is_refused_and_the_server_keeps_running(moe):
    r = moe.post("/completion", {"prompt": "Hello", "n_predict": 4, "lora": [{"id": 5, "scale": 1.0}]})
    assert r.status_code == 400, r.text
    assert "lora" in r.text and "5" in r.text, r.text
    assert moe.get("/health").status_code == 200
    assert len(tokens(moe, "Hello", [{"id": 1, "scale": 1.0}])) > 0
