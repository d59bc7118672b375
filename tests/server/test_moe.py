"""graft serve on a mixture-of-experts model with adapters on its experts.

The tiny Qwen3-MoE checkpoint (tests/fixtures/models/qwen3_moe_f32: 4 experts, top-2, a dense layer)
with two expert adapters made by the real tools (tools/gen_moe_fixtures.py): PEFT 0.21's
target_parameters LoRA on the 3-D expert parameters, and mlx-lm 0.32's LoRASwitchLinear pairs
(router included). Their numerics against PEFT and mlx-lm are checked in
tests/runtime/moe_family_test.cpp; here: the server runs them unfused with per-request scales, a
batch mixing them (and the base) gives every request what it gets alone, the fused server gives
what the unfused one gives at scale 1, and a bad adapter id is refused with the server still up.
"""
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


def test_unknown_adapter_id_is_refused_and_the_server_keeps_running(moe):
    r = moe.post("/completion", {"prompt": "Hello", "n_predict": 4, "lora": [{"id": 5, "scale": 1.0}]})
    assert r.status_code == 400, r.text
    assert "lora" in r.text and "5" in r.text, r.text
    assert moe.get("/health").status_code == 200
    assert len(tokens(moe, "Hello", [{"id": 1, "scale": 1.0}])) > 0
