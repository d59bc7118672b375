"""The Python package (python/graft/, the extension module the Release build makes in build/python/):
the same tokens as the CLI, logits against transformers + PEFT, errors with the CLI's kinds and
messages that change nothing, and the in-process commands equal to the CLI's.

The PEFT reference is tests/fixtures/smollm2/pirate_peft_reference.json (tools/train_demo_adapter.py):
greedy tokens of transformers + PEFT in F32 on the demo model with the pirate adapter, and without it.
Tolerance: fed those tokens, graft's logits (--activations f32, the reference frameworks' arithmetic)
must rank the reference's token first at every position; the reference's smallest top-two gap is
0.076 nats, far above the ~1e-4 graft's F32 logits differ by (tests/engine/smollm2_adapters_test).

Run by ctest (python_api) as: PYTHONPATH=build/python .venv/bin/python -m pytest tests/python, with
GRAFT_BIN and GRAFT_SRC set.
"""
import json
import os
import subprocess

import numpy as np
import pytest

import graft

GRAFT = os.environ["GRAFT_BIN"]
SRC = os.environ["GRAFT_SRC"]
MODEL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PEFT = os.path.join(SRC, "demo", "adapters", "pirate-peft")
MLX = os.path.join(SRC, "demo", "adapters", "pirate-mlx")
REFERENCE = os.path.join(SRC, "tests", "fixtures", "smollm2", "pirate_peft_reference.json")
QUESTION = [{"role": "user", "content": "Where is the treasure buried?"}]


def cli(*args):
    return subprocess.run([GRAFT, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def model():
    return graft.load(MODEL, lora={"pirate": PEFT}, threads=2)


def test_greedy_text_equals_the_cli(model):
    for lora, flags in ((None, ["--lora", PEFT]), ({}, [])):
        out = model.generate(QUESTION, temperature=0, max_tokens=24, lora=lora)
        r = cli("generate", "-m", MODEL, "--chat", "-p", QUESTION[0]["content"], "--temp", "0", "-n", "24",
                "-t", "2", *flags)
        assert r.returncode == 0, r.stderr
        assert r.stdout == out + "\n", (lora, r.stdout, out)
        assert len(out.tokens) == 24 and out.finish_reason == "limit"
        assert model.detokenize(out.tokens) == out
    pieces = list(model.generate(QUESTION, temperature=0, max_tokens=24, stream=True))
    assert len(pieces) > 1 and "".join(pieces) == model.generate(QUESTION, temperature=0, max_tokens=24)


def test_logits_rank_the_peft_reference_first():
    ref = json.load(open(REFERENCE))
    m = graft.load(MODEL, lora={"pirate": PEFT}, activations="f32", threads=2)
    for p in ref["prompts"]:
        for lora, greedy in ((None, p["greedy"]), ({}, p["base_greedy"])):
            ids = p["ids"] + greedy[:-1]
            logits = m.logits(ids, lora=lora)
            assert logits.shape == (len(ids), m.vocab_size) and logits.dtype == np.float32
            assert not logits.flags.owndata  # a view over graft's buffer
            picked = logits[len(p["ids"]) - 1:].argmax(axis=1).tolist()
            assert picked == greedy, (lora, p["text"][:40])


def test_adapters_mix_per_call_and_load_at_run_time(model):
    base = model.generate(QUESTION, temperature=0, max_tokens=16, lora={})
    full = model.generate(QUESTION, temperature=0, max_tokens=16)
    assert full != base
    assert model.generate(QUESTION, temperature=0, max_tokens=16, lora={"pirate": 0.0}) == base
    model.load_lora(MLX, name="mlx", scale=0.0)
    try:
        assert [a["name"] for a in model.loras] == ["pirate", "mlx"]
        assert model.generate(QUESTION, temperature=0, max_tokens=16) == full  # mlx at its default 0
        assert model.generate(QUESTION, temperature=0, max_tokens=16, lora={"mlx": 1.0}) not in (base, full)
    finally:
        model.unload_lora("mlx")
    assert [a["name"] for a in model.loras] == ["pirate"]


def test_errors_carry_the_cli_kind_and_change_nothing(model, tmp_path):
    before = model.generate(QUESTION, temperature=0, max_tokens=8)
    with pytest.raises(graft.BadArgumentError, match="--dtype") as e:
        graft.load(MODEL, dtype="F7")
    assert e.value.exit_code == cli("generate", "-m", MODEL, "-p", "x", "--dtype", "F7").returncode == 2
    with pytest.raises(graft.BadInputError, match="does not exist"):
        graft.load(os.path.join(tmp_path, "missing.gguf"))
    with pytest.raises(ValueError, match="temperature"):
        model.generate("x", temperature=-1)
    with pytest.raises(graft.BadArgumentError, match="no adapter named 'nope'"):
        model.generate("x", lora={"nope": 1.0})
    bad = tmp_path / "bad-adapter"
    bad.mkdir()
    (bad / "adapter_config.json").write_text("{not json")
    with pytest.raises(graft.BadInputError, match="adapter_config.json"):
        model.load_lora(str(bad))
    with pytest.raises(graft.BadArgumentError):
        model.unload_lora("nope")
    with pytest.raises(graft.Error):
        model.logits([model.vocab_size])  # a token id outside the vocabulary
    assert [a["name"] for a in model.loras] == ["pirate"]
    assert model.generate(QUESTION, temperature=0, max_tokens=8) == before


def test_text_helpers_match_the_model(model):
    ids = model.tokenize("The capital of France is")
    assert model.detokenize(ids) == "The capital of France is"
    text = model.apply_chat_template(QUESTION)
    assert text.startswith("<|im_start|>") and text.endswith("<|im_start|>assistant\n")
    assert model.apply_chat_template(QUESTION, tokenize=True) == model.tokenize(text, parse_special=True)
    assert model.context == 4096


def test_commands_in_process_equal_the_cli(tmp_path):
    r = cli("inspect", PEFT, "--base", MODEL, "--json")
    assert r.returncode == 0, r.stderr
    assert graft.inspect(PEFT, base=MODEL) == json.loads(r.stdout)
    ours, theirs = tmp_path / "api.gguf", tmp_path / "cli.gguf"
    graft.convert(PEFT, base=MODEL, out=ours)
    r = cli("convert", "--adapter", PEFT, "--base", MODEL, "--out", str(theirs))
    assert r.returncode == 0, r.stderr
    assert ours.read_bytes() == theirs.read_bytes()
    with pytest.raises(graft.BadArgumentError, match="exists; refusing to overwrite"):
        graft.convert(PEFT, base=MODEL, out=ours)  # refused: the file is kept as it was
    assert ours.read_bytes() == theirs.read_bytes()
    with pytest.raises(graft.BadArgumentError, match="--out"):
        graft.fuse(MODEL, PEFT, out="")
