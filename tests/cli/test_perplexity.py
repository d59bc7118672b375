"""graft perplexity against a Python reference of the same formulas (llama-perplexity's), on the tiny
fixture models, with no numeric library: the expected numbers come from the transformers logits
committed in tests/fixtures/models/<model>/reference.safetensors (tools/gen_model_fixtures.py) and
from a base file written here by an independent implementation of llama-perplexity's format.

Tolerances: graft's F32 logits match transformers' within ~1e-5 (tests/engine), so statistics of
them agree within 1e-4 relative; log-probabilities read back from a saved file are within half a
16-bit step (16/131070 nats) of the written ones.

Run by ctest (cli_perplexity) as: .venv/bin/python -m pytest tests/cli/test_perplexity.py, with
GRAFT_BIN and GRAFT_SRC set.
"""
import array
import json
import math
import os
import struct
import subprocess

import pytest

GRAFT = os.environ["GRAFT_BIN"]
SRC = os.environ["GRAFT_SRC"]
MODELS = os.path.join(SRC, "tests", "fixtures", "models")
LLAMA = os.path.join(MODELS, "llama_f32")
STEP = 16 / 65535  # the widest a stored log-probability's 16-bit step can be


def run(*args, expect=0):
    p = subprocess.run([GRAFT, "perplexity", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == expect, f"exit {p.returncode}, expected {expect}\nstderr: {p.stderr}"
    return p


def summary(*args):
    return json.loads(run(*args, "--json").stdout)


def read_logits(model):
    """The committed transformers logits: name -> list of rows."""
    with open(os.path.join(MODELS, model, "reference.safetensors"), "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        values = array.array("f", blob[8 + n + begin:8 + n + end])
        rows, vocab = t["shape"]
        out[name] = [list(values[r * vocab:(r + 1) * vocab]) for r in range(rows)]
    return out


def log_softmax(row):
    m = max(row)
    lse = m + math.log(sum(math.exp(x - m) for x in row))
    return [x - lse for x in row]


# --- llama-perplexity's saved log-probabilities, written and read independently of graft ---

def encode_record(log_probs):
    top = max(log_probs)
    low = max(min(log_probs), top - 16)
    scale = (top - low) / 65535
    codes = [0 if lp <= low or scale == 0 else min(65535, round((lp - low) / scale)) for lp in log_probs]
    codes += [0] * (len(codes) % 2)
    return struct.pack("<ff", scale, low) + struct.pack(f"<{len(codes)}H", *codes)


def write_base(path, n_ctx, vocab, chunks, records):
    with open(path, "wb") as f:
        f.write(b"_logits_" + struct.pack("<Iii", n_ctx, vocab, len(chunks)))
        for tokens in chunks:
            f.write(struct.pack(f"<{n_ctx}i", *tokens))
        for r in records:
            f.write(encode_record(r))


def read_base(path):
    blob = open(path, "rb").read()
    assert blob[:8] == b"_logits_"
    n_ctx, vocab, n_chunk = struct.unpack("<Iii", blob[8:20])
    tokens = list(struct.unpack(f"<{n_ctx * n_chunk}i", blob[20:20 + 4 * n_ctx * n_chunk]))
    words = 2 * ((vocab + 1) // 2) + 4
    at, records = 20 + 4 * n_ctx * n_chunk, []
    while at < len(blob):
        scale, low = struct.unpack("<ff", blob[at:at + 8])
        codes = struct.unpack(f"<{vocab}H", blob[at + 8:at + 8 + 2 * vocab])
        records.append([low + scale * q for q in codes])
        at += 2 * words
    assert at == len(blob) and len(records) == n_chunk * (n_ctx - 1 - n_ctx // 2)
    return n_ctx, vocab, tokens, records


def expected_stats(q_rows, base_rows, next_tokens):
    """llama-perplexity's statistics of Q's log-probabilities against the base's (lists of rows)."""
    n = len(q_rows)
    nll = [-q[t] for q, t in zip(q_rows, next_tokens)]
    nll_base = [-b[t] for b, t in zip(base_rows, next_tokens)]
    kld = [sum(math.exp(lb) * (lb - lq) for lb, lq in zip(b, q) if lb > -16) for q, b in zip(q_rows, base_rows)]
    p_diff = [math.exp(-a) - math.exp(-b) for a, b in zip(nll, nll_base)]
    same = [q.index(max(q)) == b.index(max(b)) for q, b in zip(q_rows, base_rows)]
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    return {"ppl": math.exp(mean(nll)), "ppl_base": math.exp(mean(nll_base)), "kld": mean(kld),
            "kld_max": max(kld), "kld_min": min(kld), "p_diff": mean(p_diff), "same_top": mean(same), "count": n}


def close(a, b, rel=1e-4, abs_=1e-6):
    return abs(a - b) <= abs_ + rel * abs(b)


def test_kl_divergence_matches_python_reference(tmp_path):
    # Two chunks of 24 tokens: the 30- and 24-token fixture prompts (logits of a prefix do not depend
    # on what follows it). The base is a deliberately different distribution (scaled and shifted
    # transformers logits), so every statistic is far from its trivial value.
    ref = json.load(open(os.path.join(LLAMA, "reference.json")))
    logits = read_logits("llama_f32")
    n_ctx, vocab = 24, ref["vocab_size"]
    chunks = [ref["prompts"][1]["ids"][:n_ctx], ref["prompts"][2]["ids"][:n_ctx]]
    first = n_ctx // 2
    q_rows, base_rows, next_tokens = [], [], []
    for c, name in enumerate(["logits_1", "logits_2"]):
        for j in range(first, n_ctx - 1):
            row = logits[name][j]
            q_rows.append(log_softmax(row))
            base_rows.append(log_softmax([0.7 * x + 0.5 * math.sin(7 * i + j) for i, x in enumerate(row)]))
            next_tokens.append(chunks[c][j + 1])
    base = tmp_path / "base.bin"
    write_base(base, n_ctx, vocab, chunks, base_rows)
    _, _, _, stored = read_base(base)  # what graft reads: the 16-bit rounded base
    want = expected_stats(q_rows, stored, next_tokens)
    # An F32 KV cache, as the logits fixtures' own tests use (the default F16 one moves logits ~1e-3).
    got = summary("-m", LLAMA, "--kl-divergence-base", str(base), "--kl-divergence", "--cache-type", "f32")
    assert got["scored_tokens"] == want["count"] == 22 and got["chunks"] == 2 and got["ctx_size"] == n_ctx
    assert close(got["ppl"]["value"], want["ppl"]), (got["ppl"], want["ppl"])
    assert close(got["ppl_base"]["value"], want["ppl_base"]), (got["ppl_base"], want["ppl_base"])
    assert close(got["kld"]["value"], want["kld"]), (got["kld"], want["kld"])
    assert close(got["kld_percentiles"]["100"], want["kld_max"])
    assert close(got["kld_percentiles"]["0"], want["kld_min"])
    assert close(got["p_diff"]["value"], want["p_diff"], abs_=1e-5)
    assert got["same_top"]["value"] == pytest.approx(want["same_top"], abs=1e-12)
    assert 0 < want["same_top"] < 1 and want["kld"] > 0.05  # the test can fail: nothing is trivial
    # The per-chunk progress and the text report carry the same numbers.
    text = run("-m", LLAMA, "--kl-divergence-base", str(base), "--kl-divergence", "--cache-type", "f32").stdout
    assert f"Mean    KLD: {got['kld']['value']:10.6f}" in text
    assert f"Same top p: {100 * got['same_top']['value']:6.3f}" in text


def test_saved_reference_is_the_runs_own_log_probabilities(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("Hello world. " * 40 + "The quick brown fox jumps over the lazy dog. " * 20)
    base = tmp_path / "ref.bin"
    got = summary("-m", LLAMA, "-f", str(text), "-c", "16", "--chunks", "5", "--kl-divergence-base", str(base))
    n_ctx, vocab, tokens, records = read_base(base)
    assert (n_ctx, vocab, got["chunks"], got["ctx_size"]) == (16, 384, 5, 16) and len(tokens) == 80
    first, nll = n_ctx // 2, []
    for c in range(5):
        for j in range(first, n_ctx - 1):
            rec = records[c * (n_ctx - 1 - first) + j - first]
            # A record holds log-probabilities: they sum to 1 as probabilities.
            assert abs(sum(math.exp(lp) for lp in rec) - 1) < 1e-3
            nll.append(-rec[tokens[c * n_ctx + j + 1]])
    ppl = math.exp(sum(nll) / len(nll))
    assert got["scored_tokens"] == len(nll) == 35
    assert abs(got["ppl"]["value"] - ppl) <= 2 * STEP * ppl
    # Against its own reference a run differs only by the storage's rounding.
    again = summary("-m", LLAMA, "--kl-divergence-base", str(base), "--kl-divergence")
    assert again["kld"]["value"] < 1e-6 and again["same_top"]["value"] == 1
    assert abs(again["ppl"]["value"] - got["ppl"]["value"]) < 1e-9 * got["ppl"]["value"]


def test_refusals_name_the_file_and_change_nothing(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("Hello world. " * 40)
    assert "drop -f" in run("-m", LLAMA, "-f", str(text), "--kl-divergence", expect=2).stderr
    assert "--kl-divergence-base" in run("-m", LLAMA, "--kl-divergence", expect=2).stderr
    # The default chunk: 512 tokens, or the model's context (256 here) where that is shorter.
    assert "one chunk needs 256" in run("-m", LLAMA, "-f", str(text), expect=2).stderr
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a log-probability file at all")
    assert "bad.bin' is not a saved log-probability file" in run(
        "-m", LLAMA, "--kl-divergence-base", str(bad), "--kl-divergence", expect=1).stderr
    base = tmp_path / "ref.bin"
    run("-m", LLAMA, "-f", str(text), "-c", "16", "--kl-divergence-base", str(base))
    cut = tmp_path / "cut.bin"
    cut.write_bytes(base.read_bytes()[:-3])
    err = run("-m", LLAMA, "--kl-divergence-base", str(cut), "--kl-divergence", expect=1).stderr
    assert "cut.bin'" in err and "truncated" in err
    err = run("-m", os.path.join(MODELS, "mistral_f32"), "--kl-divergence-base", str(base), "--kl-divergence",
              expect=1).stderr
    assert "vocabulary of 384" in err and "446" in err
    assert "differs from the 16" in run("-m", LLAMA, "--kl-divergence-base", str(base), "--kl-divergence", "-c", "32",
                                         expect=2).stderr
    # A run that fails leaves no file where its reference would go.
    nowhere = tmp_path / "missing-dir" / "ref.bin"
    run("-m", LLAMA, "-f", str(text), "-c", "16", "--kl-divergence-base", str(nowhere), expect=5)
    assert not nowhere.parent.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.bin", "cut.bin", "ref.bin", "text.txt"]
