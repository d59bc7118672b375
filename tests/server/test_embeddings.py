"""Embeddings end to end (graft serve --embeddings), through the `openai` client and `requests`:
OpenAI's /v1/embeddings shape, unit norm, batch and token-array inputs equal to single text inputs,
adapters changing the vector, base64 equal to the float list, llama-server's native /embedding
(pooled and per-token), the errors each naming its field, and embeddings sharing steps with a
generation without changing it. The hidden states themselves are checked against transformers in
tests/engine/embedding_test.cpp; here every comparison is between graft's own routes, exact where
the arithmetic is the same (a row's result does not depend on the other rows of its step).
"""
import base64
import concurrent.futures
import math
import struct

import openai
import pytest

from conftest import PEFT, Server

# The base model's id (no --alias: the file's name without .gguf). A server with adapters to pick by
# `model` refuses any other name.
BASE = "SmolLM2-135M-Instruct.Q4_1"

DIM = 576  # SmolLM2-135M's hidden size
TEXTS = ["The sea was calm.", "Ahoy, matey! Where be the treasure buried?", "Sailing is the art of the wind."]


@pytest.fixture(scope="module")
def srv():
    # 4 slots x 256 tokens: a 300-token input is too long.
    s = Server("--embeddings", "--lora", f"pirate={PEFT}", "--parallel", "4", "--ctx-size", "1024")
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)


def embed(client, inp, **kw):
    return client.embeddings.create(model=BASE, input=inp, **kw)


def tokens(srv, text):
    return srv.post("/tokenize", {"content": text}).json()["tokens"]


def error_of(r, status, type_="invalid_request_error"):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert e["code"] == status and e["type"] == type_, e
    return e["message"]


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def test_shape_norm_and_usage(srv, client):
    r = embed(client, TEXTS[0])
    assert r.object == "list" and r.model == BASE
    assert len(r.data) == 1 and r.data[0].object == "embedding" and r.data[0].index == 0
    v = r.data[0].embedding
    assert len(v) == DIM
    assert abs(norm(v) - 1.0) < 1e-5  # L2-normalized (embd_normalize 2, llama-server's default)
    n = len(tokens(srv, TEXTS[0]))
    assert r.usage.prompt_tokens == n and r.usage.total_tokens == n


def test_batch_equals_single_inputs(client):
    batch = embed(client, TEXTS)
    assert [d.index for d in batch.data] == [0, 1, 2]
    for i, t in enumerate(TEXTS):
        assert batch.data[i].embedding == embed(client, t).data[0].embedding, i
    # Different texts, different vectors.
    assert batch.data[0].embedding != batch.data[1].embedding
    assert batch.usage.prompt_tokens == sum(embed(client, t).usage.prompt_tokens for t in TEXTS)


def test_token_arrays_equal_text(srv, client):
    ids = [tokens(srv, t) for t in TEXTS[:2]]
    assert embed(client, ids[0]).data[0].embedding == embed(client, TEXTS[0]).data[0].embedding
    both = embed(client, ids)
    for i in range(2):
        assert both.data[i].embedding == embed(client, TEXTS[i]).data[0].embedding


def test_adapter_changes_the_vector(client):
    base = embed(client, TEXTS[1]).data[0].embedding
    by_name = client.embeddings.create(model="pirate", input=TEXTS[1])
    assert by_name.model == "pirate"
    pirate = by_name.data[0].embedding
    assert max(abs(a - b) for a, b in zip(base, pirate)) > 1e-3
    assert abs(norm(pirate) - 1.0) < 1e-5
    by_lora = embed(client, TEXTS[1], extra_body={"lora": [{"id": 0, "scale": 1.0}]}).data[0].embedding
    assert by_lora == pirate
    off = embed(client, TEXTS[1], extra_body={"lora": [{"id": 0, "scale": 0.0}]}).data[0].embedding
    assert off == base


def test_base64_decodes_to_the_float_list(srv):
    f = srv.post("/v1/embeddings", {"input": TEXTS[2], "encoding_format": "float"})
    b = srv.post("/v1/embeddings", {"input": TEXTS[2], "encoding_format": "base64"})
    assert f.status_code == 200 and b.status_code == 200, (f.text, b.text)
    raw = base64.b64decode(b.json()["data"][0]["embedding"])
    assert len(raw) == 4 * DIM
    assert list(struct.unpack(f"<{DIM}f", raw)) == f.json()["data"][0]["embedding"]


def test_native_route_shape(srv, client):
    want = embed(client, TEXTS[0]).data[0].embedding
    for path, field in (("/embedding", "content"), ("/embeddings", "input")):
        r = srv.post(path, {field: TEXTS[0]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert isinstance(body, list) and len(body) == 1 and body[0]["index"] == 0
        assert body[0]["embedding"] == [want]  # llama-server: a list of vectors, one when pooled
    # embd_normalize -1: the raw last hidden state, which L2-normalizes to the default answer.
    raw = srv.post("/embedding", {"content": TEXTS[0], "embd_normalize": -1}).json()[0]["embedding"][0]
    n = norm(raw)
    assert n > 2.0  # not already unit length (the final norm's weights scale it)
    assert max(abs(x / n - y) for x, y in zip(raw, want)) < 1e-6


def test_errors_name_their_field(srv):
    def bad(body, field, status=400, type_="invalid_request_error", path="/v1/embeddings"):
        msg = error_of(srv.post(path, body), status, type_)
        assert f"'{field}'" in msg, msg
        return msg

    bad({"input": []}, "input")
    bad({"input": ""}, "input")
    bad({"input": ["fine", ""]}, "input[1]")
    bad({"model": BASE}, "input")
    bad({"input": 3}, "input")
    bad({"input": [1, -2]}, "input")
    bad({"input": ["ok", "word " * 300]}, "input[1]", type_="exceed_context_size_error")
    assert "dimensions" in bad({"input": "a", "dimensions": 3}, "dimensions")
    bad({"input": "a", "encoding_format": "hex"}, "encoding_format")
    bad({"input": "a", "lora": {"id": 0}}, "lora")
    # The full size is accepted as `dimensions`.
    assert srv.post("/v1/embeddings", {"input": "a", "dimensions": DIM}).status_code == 200
    # An unknown adapter id in `lora` is refused before anything runs.
    assert srv.post("/v1/embeddings", {"input": "a", "lora": [{"id": 7, "scale": 1}]}).status_code == 400
    # The server keeps serving.
    assert srv.post("/v1/embeddings", {"input": "a"}).status_code == 200


def test_embeddings_share_steps_with_a_generation(srv):
    body = {"prompt": "Once upon a time", "n_predict": 24, "temperature": 0, "cache_prompt": False}
    alone = srv.post("/completion", body).json()["content"]
    long_inputs = [f"{t} " * 15 for t in TEXTS] * 3  # 9 inputs of ~100-180 tokens, in turns of 4
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        gen = ex.submit(srv.post, "/completion", body)
        emb = ex.submit(srv.post, "/v1/embeddings", {"input": long_inputs})
        assert emb.result().status_code == 200, emb.result().text
        assert gen.result().json()["content"] == alone
    data = emb.result().json()["data"]
    assert [d["index"] for d in data] == list(range(9))
    assert data[0]["embedding"] == data[3]["embedding"] == data[6]["embedding"]


def test_pooling_none_is_per_token_and_refused_by_openai(srv, client):
    s = Server("--embeddings", "--pooling", "none", "--parallel", "2", "--ctx-size", "512")
    try:
        msg = error_of(s.post("/v1/embeddings", {"input": TEXTS[0]}), 400)
        assert "Pooling type 'none' is not OAI compatible" in msg
        ids = tokens(s, TEXTS[0])
        rows = s.post("/embedding", {"content": TEXTS[0]}).json()[0]["embedding"]
        assert len(rows) == len(ids) and all(len(r) == DIM for r in rows)
        # The last token's raw row, L2-normalized, is the default (last) pooling's answer.
        last = embed(client, TEXTS[0]).data[0].embedding
        n = norm(rows[-1])
        assert max(abs(x / n - y) for x, y in zip(rows[-1], last)) < 1e-6
    finally:
        assert s.stop() == 0, s.output()


def test_without_the_flag_the_routes_say_how_to_enable_them():
    s = Server("--parallel", "1", "--ctx-size", "256")
    try:
        for path in ("/v1/embeddings", "/embedding"):
            msg = error_of(s.post(path, {"input": "a"}), 501, "not_supported_error")
            assert "--embeddings" in msg
    finally:
        assert s.stop() == 0, s.output()
