"""OpenAI's other sampling options end to end, through the `openai` client and `requests`:
presence/frequency penalties, logit_bias, logprobs (chat and completions, whole and streamed) and
n > 1 choices (with the prompt's KV shared). Greedy decoding and short outputs throughout, so every
comparison is exact; the sampled ones use fixed seeds (choice i of n runs with seed + i).
"""
import math

import openai
import pytest

from conftest import Server

PROMPT = "The three most important things about sailing are"
CHAT = [{"role": "user", "content": "Name three fruits."}]


@pytest.fixture(scope="module")
def srv():
    s = Server("--parallel", "4", "--ctx-size", "4096", "--metrics")
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def client(srv):
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="unused", max_retries=0)


def native(srv, prompt=PROMPT, n=8, **fields):
    r = srv.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "cache_prompt": False, **fields})
    assert r.status_code == 200, r.text
    return r.json()


def error_of(r, status, type_="invalid_request_error"):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert e["code"] == status and e["type"] == type_, e
    return e["message"]


def token_id(srv, text):
    ids = srv.post("/tokenize", {"content": text}).json()["tokens"]
    assert len(ids) == 1, ids
    return ids[0]


def metric(srv, name):
    for line in srv.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(name)


# ---- presence / frequency penalties -------------------------------------------------------


def check_penalized_greedy(run, presence, frequency):
    """Each greedy token is the argmax of raw logprob - frequency * count - presence * (count > 0)
    over the top candidates, counting only the tokens generated before it (not the prompt)."""
    counts = {}
    for i, step in enumerate(run["completion_probabilities"]):
        def score(t):
            c = counts.get(t["id"], 0)
            return t["logprob"] - frequency * c - presence * (c > 0)
        top = step["top_logprobs"]
        best = max(score(t) for t in top)
        chosen = [t for t in top if t["id"] == step["id"]]
        assert chosen, (i, step)  # the drawn token is among the candidates
        assert score(chosen[0]) >= best - 1e-4, (i, step["token"], [(t["token"], score(t)) for t in top])
        counts[step["id"]] = counts.get(step["id"], 0) + 1


def test_penalties_follow_openai_semantics(srv):
    prompt = "List: apple, apple, apple, apple, apple,"
    base = native(srv, prompt, n=12, n_probs=40)
    pen = native(srv, prompt, n=12, n_probs=40, frequency_penalty=1.5, presence_penalty=0.5)
    assert pen["tokens"] != base["tokens"]
    check_penalized_greedy(pen, 0.5, 1.5)
    assert pen["generation_settings"]["frequency_penalty"] == 1.5
    # Only generated tokens count: the first token is never penalized, whatever the prompt holds.
    assert pen["tokens"][0] == base["tokens"][0]
    # The most repeated token of the unpenalized run repeats less under the penalty.
    top = max(set(base["tokens"]), key=base["tokens"].count)
    assert pen["tokens"].count(top) < base["tokens"].count(top)
    neg = native(srv, prompt, n=12, n_probs=40, presence_penalty=-2)
    check_penalized_greedy(neg, -2, 0)


def test_penalties_on_the_openai_routes_match_completion(srv, client):
    fields = dict(frequency_penalty=1.0, presence_penalty=0.7)
    want = native(srv, n=10, **fields)["content"]
    r = client.completions.create(model="m", prompt=PROMPT, max_tokens=10, temperature=0, **fields)
    assert r.choices[0].text == want
    plain = client.completions.create(model="m", prompt=PROMPT, max_tokens=10, temperature=0)
    assert plain.choices[0].text == native(srv, n=10)["content"] != want
    c = client.chat.completions.create(model="m", messages=CHAT, max_tokens=10, temperature=0, **fields)
    assert c.choices[0].message.content


@pytest.mark.parametrize("field", ["presence_penalty", "frequency_penalty"])
@pytest.mark.parametrize("value", [2.5, -2.01, "x"])
def test_penalty_range_is_checked(srv, client, field, value):
    for path, body in (("/completion", {"prompt": PROMPT}), ("/v1/completions", {"prompt": PROMPT}),
                       ("/v1/chat/completions", {"messages": CHAT})):
        r = srv.post(path, {**body, "max_tokens": 2, field: value})
        assert f"'{field}'" in error_of(r, 400), path
    with pytest.raises(openai.BadRequestError, match=field):
        client.chat.completions.create(model="m", messages=CHAT, max_tokens=2, **{field: value})


# ---- logit_bias -----------------------------------------------------------------------------


def test_logit_bias_bans_a_token_greedy_would_pick(srv, client):
    base = native(srv, n=10)
    banned = base["tokens"][0]
    assert banned in base["tokens"]
    # OpenAI's form with -100 (through the client), llama-server's array form with false: the same
    # answer, without the banned token.
    r = client.completions.create(model="m", prompt=PROMPT, max_tokens=10, temperature=0,
                                  logit_bias={str(banned): -100})
    arr = native(srv, n=10, logit_bias=[[banned, False]])
    obj = native(srv, n=10, logit_bias={str(banned): -100})
    assert banned not in arr["tokens"] and banned not in obj["tokens"]
    assert arr["tokens"] == obj["tokens"]
    assert r.choices[0].text == arr["content"] != base["content"]
    c = client.chat.completions.create(model="m", messages=CHAT, max_tokens=8, temperature=0)
    first = srv.post("/tokenize", {"content": c.choices[0].message.content}).json()["tokens"][0]
    c2 = client.chat.completions.create(model="m", messages=CHAT, max_tokens=8, temperature=0,
                                        logit_bias={str(first): -100}, logprobs=True)
    assert c2.choices[0].message.content != c.choices[0].message.content
    ids = srv.post("/tokenize", {"content": c2.choices[0].message.content}).json()["tokens"]
    assert first not in ids


def test_logit_bias_lifts_a_token(srv, client):
    banana = token_id(srv, " banana")
    run = native(srv, n=5, logit_bias=[[banana, 100]])
    assert run["tokens"] == [banana] * 5
    r = client.completions.create(model="m", prompt=PROMPT, max_tokens=3, temperature=0, logit_bias={str(banana): 100})
    assert r.choices[0].text == " banana" * 3
    # A string in the array form biases its tokens (llama-server).
    assert native(srv, n=3, logit_bias=[[" banana", 100]])["tokens"] == [banana] * 3


def test_logit_bias_refusals_name_the_key(srv):
    for bias, key in (({"abc": 1}, "'abc'"), ({"5": 101}, "'5'"), ({"7": -100.5}, "'7'"), ({"99999999": 1}, "out of range"),
                      ({"3": "x"}, "'3'")):
        for path, body in (("/v1/completions", {"prompt": PROMPT}), ("/v1/chat/completions", {"messages": CHAT}),
                           ("/completion", {"prompt": PROMPT})):
            r = srv.post(path, {**body, "max_tokens": 2, "logit_bias": bias})
            assert key in error_of(r, 400), (path, bias)
    for bias in ([[1]], [["a", "b"]], [[99999999, 1]], "x"):
        r = srv.post("/completion", {"prompt": PROMPT, "n_predict": 2, "logit_bias": bias})
        assert "logit_bias" in error_of(r, 400), bias


# ---- logprobs -------------------------------------------------------------------------------


def test_chat_logprobs_parse_in_the_client(srv, client):
    r = client.chat.completions.create(model="m", messages=CHAT, max_tokens=6, temperature=0, logprobs=True,
                                       top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 6
    assert "".join(t.token for t in content) == r.choices[0].message.content
    for t in content:
        assert t.bytes == list(t.token.encode())
        assert len(t.top_logprobs) == 3
        lps = [x.logprob for x in t.top_logprobs]
        assert lps == sorted(lps, reverse=True) and lps[0] <= 0
        assert sum(math.exp(x) for x in lps) <= 1 + 1e-5
        # Greedy: the drawn token is the most likely one, with its logprob.
        assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob
    none = client.chat.completions.create(model="m", messages=CHAT, max_tokens=2, temperature=0)
    assert none.choices[0].logprobs is None
    zero = client.chat.completions.create(model="m", messages=CHAT, max_tokens=2, temperature=0, logprobs=True)
    assert [t.top_logprobs for t in zero.choices[0].logprobs.content] == [[], []]
    assert [t.logprob for t in zero.choices[0].logprobs.content] == [t.logprob for t in content[:2]]


def test_chat_logprobs_stream_carry_their_tokens(client):
    kw = dict(model="m", messages=CHAT, max_tokens=6, temperature=0, logprobs=True, top_logprobs=2)
    whole = client.chat.completions.create(**kw)
    got = []
    for chunk in client.chat.completions.create(stream=True, **kw):
        for ch in chunk.choices:
            if ch.logprobs and ch.logprobs.content:
                got += ch.logprobs.content
    assert [t.model_dump() for t in got] == [t.model_dump() for t in whole.choices[0].logprobs.content]


def test_drawn_token_logprob_outside_the_top_k(srv, client):
    # The 8th most likely first token, forced by a bias: its own logprob (of the raw logits) is
    # reported although it is not among the top 3.
    step = native(srv, n=1, n_probs=8)["completion_probabilities"][0]["top_logprobs"]
    forced = step[7]
    r = client.completions.create(model="m", prompt=PROMPT, max_tokens=1, temperature=0, logprobs=3,
                                  logit_bias={str(forced["id"]): 100})
    lp = r.choices[0].logprobs
    assert lp.tokens == [forced["token"]]
    assert lp.token_logprobs[0] == pytest.approx(forced["logprob"], abs=1e-6)
    assert lp.top_logprobs[0] == pytest.approx({t["token"]: t["logprob"] for t in step[:3]} |
                                               {forced["token"]: forced["logprob"]}, abs=1e-6)
    # /completion reports it too (not only when it is among the n_probs).
    nat = native(srv, n=1, n_probs=3, logit_bias=[[forced["id"], 100]])["completion_probabilities"][0]
    assert nat["id"] == forced["id"] and nat["logprob"] == pytest.approx(forced["logprob"], abs=1e-6)


def test_completions_logprobs_shape_and_values(srv, client):
    r = client.completions.create(model="m", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    nat = native(srv, n=6, n_probs=2)["completion_probabilities"]
    assert lp.tokens == [s["token"] for s in nat]
    assert lp.token_logprobs == pytest.approx([s["logprob"] for s in nat], abs=1e-6)
    assert lp.top_logprobs == [pytest.approx({t["token"]: t["logprob"] for t in s["top_logprobs"]}, abs=1e-6) for s in nat]
    assert lp.text_offset == [sum(len(t.encode()) for t in lp.tokens[:i]) for i in range(6)]
    assert "".join(lp.tokens) == r.choices[0].text
    # Streamed: the chunks' logprobs, joined, are the whole response's.
    toks, offs = [], []
    for chunk in client.completions.create(model="m", prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2,
                                           stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            toks += chunk.choices[0].logprobs.tokens
            offs += chunk.choices[0].logprobs.text_offset
    assert toks == lp.tokens and offs == lp.text_offset


def test_logprobs_ranges(srv):
    for body in ({"messages": CHAT, "logprobs": True, "top_logprobs": 21},
                 {"messages": CHAT, "top_logprobs": 2}, {"messages": CHAT, "logprobs": 1}):
        r = srv.post("/v1/chat/completions", {**body, "max_tokens": 2})
        assert "logprobs" in error_of(r, 400), body
    r = srv.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "logprobs": 6})
    assert "'logprobs'" in error_of(r, 400)


# ---- n > 1 ----------------------------------------------------------------------------------


def test_n_greedy_choices_are_equal(client):
    one = client.chat.completions.create(model="m", messages=CHAT, max_tokens=8, temperature=0)
    r = client.chat.completions.create(model="m", messages=CHAT, max_tokens=8, temperature=0, n=3)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.message.content for c in r.choices] == [one.choices[0].message.content] * 3
    assert r.usage.completion_tokens == 3 * one.usage.completion_tokens
    assert r.usage.prompt_tokens == one.usage.prompt_tokens
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_n_sampled_choice_i_uses_seed_plus_i(client):
    kw = dict(model="m", prompt=PROMPT, max_tokens=8, temperature=1.0, top_p=1.0)
    r = client.completions.create(n=3, seed=42, **kw)
    singles = [client.completions.create(seed=42 + i, **kw).choices[0].text for i in range(3)]
    assert [c.text for c in r.choices] == singles
    assert len(set(singles)) > 1  # distinct seeds, distinct answers


def test_n_streamed_with_index_and_logprobs(client):
    kw = dict(model="m", messages=CHAT, max_tokens=6, temperature=0.9, seed=7, n=2, logprobs=True)
    whole = client.chat.completions.create(**kw)
    text, lps, finish, usage = ["", ""], [[], []], [None, None], None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.usage:
            usage = chunk.usage
        for ch in chunk.choices:
            text[ch.index] += ch.delta.content or ""
            if ch.logprobs and ch.logprobs.content:
                lps[ch.index] += [t.logprob for t in ch.logprobs.content]
            if ch.finish_reason:
                finish[ch.index] = ch.finish_reason
    assert text == [c.message.content for c in whole.choices]
    assert lps == [[t.logprob for t in c.logprobs.content] for c in whole.choices]
    assert finish == [c.finish_reason for c in whole.choices]
    assert usage.completion_tokens == whole.usage.completion_tokens


def test_n_is_bounded_by_parallel(srv, client):
    for n in (5, 0, 1.5):
        r = srv.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": 2, "n": n})
        assert "'n'" in error_of(r, 400), n
    with pytest.raises(openai.BadRequestError, match="'n'"):
        client.completions.create(model="m", prompt=PROMPT, max_tokens=2, n=5)
    # /completion has no `n` (llama-server's): still one answer.
    r = srv.post("/completion", {"prompt": PROMPT, "n_predict": 2, "temperature": 0, "n": 3})
    assert r.status_code == 200 and len(r.json()["tokens"]) == 2


def test_n_shares_the_prompt_kv(srv, client):
    # A prompt no earlier request used, and cache_prompt off: only the KV computed by this request's
    # choice 0 can be reused. n = 4 evaluates the prompt once plus one token per later choice.
    prompt = "Sharing test: the quick brown fox jumps over the lazy dog, " * 4
    before = metric(srv, "llamacpp:prompt_tokens_total")
    r = client.completions.create(model="m", prompt=prompt, max_tokens=4, temperature=0, n=4,
                                  extra_body={"cache_prompt": False})
    shared = metric(srv, "llamacpp:prompt_tokens_total") - before
    p = r.usage.prompt_tokens
    before = metric(srv, "llamacpp:prompt_tokens_total")
    singles = [client.completions.create(model="m", prompt=prompt, max_tokens=4, temperature=0,
                                         extra_body={"cache_prompt": False}) for _ in range(4)]
    separate = metric(srv, "llamacpp:prompt_tokens_total") - before
    print(f"prompt of {p} tokens: n=4 evaluated {shared:.0f} prompt tokens, 4 requests {separate:.0f}")
    assert shared == p + 3
    assert separate == 4 * p
    assert [c.text for c in r.choices] == [s.choices[0].text for s in singles]
