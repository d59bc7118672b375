"""graft serve with adapters at fleet scale (vLLM's runtime LoRA API and resolvers): POST
/v1/load_lora_adapter and /v1/unload_lora_adapter confined to --lora-root, "model": <adapter name>,
--lora-dir (load on first use), named --lora NAME=DIR, a budget of resident adapters
(--max-loras-resident) and the metrics a router reads (vllm:lora_requests_info, residency,
per-adapter counters). The real binary on loopback; greedy decoding, so every comparison is exact
token equality. The adapters are copies of the committed PEFT pirate adapter with their lora_B
tensors scaled (adapter_files.py), written under pytest's tmp dirs.
"""
import json
import os
import re
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

import adapter_files as af
from conftest import BIN, MLX, MODEL, PEFT, SRC, Server, free_port, open_raw_stream

GGUF_PIRATE = f"{SRC}/tests/fixtures/gguf_adapters/smollm2_pirate.q8_0.gguf"
BASE_ID = "smol-fleet"
PROMPT = "The three most important things about sailing are"
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
PREAMBLE = ("A preamble shared by several requests, about harbours, charts, knots and the tides that "
            "sailors learn before they ever leave port. ") * 3


# ---- helpers ----------------------------------------------------------------------------------


def error_of(r, status, type_):
    assert r.status_code == status, (r.status_code, r.text)
    e = r.json()["error"]
    assert e["code"] == status and e["type"] == type_, e
    return e["message"]


def toks(s, prompt=PROMPT, n=16, **fields):
    """Greedy tokens of /completion, without the prompt cache unless asked."""
    fields.setdefault("cache_prompt", False)
    return s.complete(prompt, n=n, **fields)["tokens"]


def load(s, name, path, inplace=None):
    body = {"lora_name": name, "lora_path": path}
    if inplace is not None:
        body["load_inplace"] = inplace
    return s.post("/v1/load_lora_adapter", body)


def loaded(s, name, path, inplace=None):
    r = load(s, name, path, inplace)
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("text/plain"), r.headers
    assert r.text == f"Success: LoRA adapter '{name}' added successfully.", r.text


def unloaded(s, name):
    r = s.post("/v1/unload_lora_adapter", {"lora_name": name})
    assert r.status_code == 200, (r.status_code, r.text)
    assert r.headers["Content-Type"].startswith("text/plain"), r.headers
    assert r.text == f"Success: LoRA adapter '{name}' removed successfully.", r.text


def adapters(s):
    """GET /lora-adapters by name."""
    got = s.get("/lora-adapters").json()
    by_name = {a["name"]: a for a in got}
    assert len(by_name) == len(got), f"two adapters share a name: {got}"
    return by_name


def models(s):
    """GET /v1/models' entries by id."""
    m = s.get("/v1/models").json()
    assert m["object"] == "list"
    return {e["id"]: e for e in m["data"]}


def state(s):
    return s.get("/lora-adapters").json(), s.get("/v1/models").json()


def make(root, name, factor=1.0, src=PEFT):
    """root/name: a copy of `src` with lora_B scaled by `factor` (made once per root)."""
    path = os.path.join(root, name)
    if not os.path.exists(path):
        af.scaled_copy(src, path, factor) if factor != 1.0 else af.plain_copy(src, path)
    return path


def scrape(s):
    r = s.get("/metrics")
    assert r.status_code == 200, r.text
    return {f.name: f for f in text_string_to_metric_families(r.text)}


def samples_named(fams, name):
    return [x for f in fams.values() for x in f.samples if x.name == name]


def value(fams, name, **labels):
    """The value of the one sample of `name` whose labels include `labels`; None if there is none."""
    got = [x for x in samples_named(fams, name) if all(x.labels.get(k) == v for k, v in labels.items())]
    assert len(got) <= 1, got
    return got[0].value if got else None


def lora_info(fams):
    got = samples_named(fams, "vllm:lora_requests_info")
    assert len(got) == 1, got
    return got[0]


def names_of(label):
    return [n for n in label.split(",") if n]


def loaded_levels(fams):
    """adapter_name -> level, from vllm:lora_adapter_loaded."""
    out = {}
    for x in samples_named(fams, "vllm:lora_adapter_loaded"):
        assert x.value == 1, x
        assert x.labels["adapter_name"] not in out, f"{x.labels['adapter_name']} listed twice"
        out[x.labels["adapter_name"]] = x.labels["level"]
    return out


# ---- servers ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """The --lora-root of the runtime-loading servers (symlinks resolved, as the server sees it)."""
    return os.path.realpath(str(tmp_path_factory.mktemp("lora-root")))


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    """An adapter outside every --lora-root."""
    d = os.path.realpath(str(tmp_path_factory.mktemp("outside")))
    return af.plain_copy(PEFT, os.path.join(d, "stray"))


@pytest.fixture(scope="module")
def fleet(root):
    """Runtime loading in `root`, one named startup adapter ("pirate", id 0, default scale 0)."""
    s = Server("--lora", f"pirate={PEFT}", "--allow-runtime-lora", "--lora-root", root, "--metrics",
               "--parallel", "4", "--ctx-size", "2048", "--alias", BASE_ID)
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def lora_dir(root):
    """A --lora-dir inside `root` (so that the fleet server can load the same files explicitly)."""
    d = os.path.join(root, "lora-dir")
    os.makedirs(d, exist_ok=True)
    make(d, "alpha", 1.5)
    make(d, "beta", 1.0, src=MLX)
    shutil.copyfile(GGUF_PIRATE, os.path.join(d, "pirate.gguf"))
    make(root, "x")  # lora-dir/../x exists: "../x" must still not load
    return d


@pytest.fixture(scope="module")
def dir_server(lora_dir, outside):
    link = os.path.join(lora_dir, "escape")
    if not os.path.lexists(link):
        os.symlink(outside, link)
    s = Server("--lora-dir", lora_dir, "--metrics", "--parallel", "2", "--ctx-size", "2048")
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def single_slot():
    """One slot; the startup forms: named, named with a scale, positional twice (one name taken, so
    the second gets -<id>). Adapters go by name here, so every --lora starts at scale 0."""
    s = Server("--lora", f"a={PEFT}", "--lora", f"b={MLX}", "--lora-scaled", f"c={PEFT}:0.5", "--lora", MLX,
               "--lora", MLX, "--parallel", "1", "--metrics")
    yield s
    assert s.stop() == 0, s.output()


# ---- load, use, unload, reload ----------------------------------------------------------------


def test_load_use_unload_reload(fleet, root):
    path = make(root, "cap-a")
    base = toks(fleet, lora=[])
    loaded(fleet, "cap-a", path)
    try:
        ads = adapters(fleet)
        a, pirate = ads["cap-a"], ads["pirate"]
        assert set(a) >= {"id", "name", "path", "scale", "task_name", "prompt_prefix", "generation", "resident",
                          "digest"}, a
        assert a["path"] == path and a["scale"] == 0.0, a
        assert isinstance(a["id"], int) and a["id"] > pirate["id"] == 0, ads
        assert a["digest"] == pirate["digest"], "the same files have different digests"
        m = models(fleet)
        assert list(m)[0] == BASE_ID
        b = m[BASE_ID]
        assert b["object"] == "model" and b["parent"] is None and b["root"] == MODEL and "meta" in b, b
        e = m["cap-a"]
        assert e["object"] == "model" and e["owned_by"] == "graft" and e["root"] == path, e
        assert e["parent"] == BASE_ID and isinstance(e["created"], int), e

        by_name = fleet.complete(PROMPT, n=16, model="cap-a", cache_prompt=False)
        assert by_name["model"] == "cap-a"
        by_id = toks(fleet, lora=[{"id": a["id"], "scale": 1}])
        assert by_name["tokens"] == by_id, '"model": name is not the adapter by id at scale 1'
        assert by_id != base, "the pirate adapter did not change the greedy output"
        assert by_id == toks(fleet, lora=[{"id": 0, "scale": 1}]), "same files as the startup adapter, other tokens"
        assert toks(fleet) == base, "a runtime-loaded adapter is applied to requests that do not ask for it"
        assert toks(fleet, model=BASE_ID) == base
        # "model" with "lora": the list sets the scales, the named adapter's too.
        assert toks(fleet, model="cap-a", lora=[{"id": a["id"], "scale": 0.5}]) == \
            toks(fleet, lora=[{"id": 0, "scale": 0.5}])
        assert toks(fleet, model="cap-a", lora=[{"id": 0, "scale": 1}]) == \
            toks(fleet, lora=[{"id": a["id"], "scale": 1}, {"id": 0, "scale": 1}])

        client = openai.OpenAI(base_url=fleet.url + "/v1", api_key="unused")
        assert "cap-a" in [x.id for x in client.models.list().data]
        c = client.completions.create(model="cap-a", prompt=PROMPT, max_tokens=16, temperature=0)
        assert c.model == "cap-a"
        assert c.choices[0].text == by_name["content"]
        chat_a = client.chat.completions.create(model="cap-a", messages=CHAT, max_tokens=12, temperature=0)
        chat_base = client.chat.completions.create(model=BASE_ID, messages=CHAT, max_tokens=12, temperature=0)
        assert chat_a.model == "cap-a"
        assert chat_a.choices[0].message.content != chat_base.choices[0].message.content
    finally:
        unloaded(fleet, "cap-a")

    assert "cap-a" not in models(fleet) and "cap-a" not in adapters(fleet)
    r = fleet.post("/completion", {"prompt": PROMPT, "n_predict": 4, "model": "cap-a"})
    assert "cap-a" in error_of(r, 404, "not_found_error")
    r = fleet.post("/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "model": "cap-a"})
    error_of(r, 404, "not_found_error")
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="cap-a", prompt=PROMPT, max_tokens=4, temperature=0)
    r = fleet.post("/v1/unload_lora_adapter", {"lora_name": "cap-a"})
    error_of(r, 404, "not_found_error")

    loaded(fleet, "cap-a", "cap-a")  # relative to --lora-root
    try:
        again = adapters(fleet)["cap-a"]
        assert again["id"] > a["id"], "an adapter id was reused"
        assert os.path.realpath(os.path.join(root, again["path"])) == path, again
        assert toks(fleet, model="cap-a") == by_name["tokens"]
    finally:
        unloaded(fleet, "cap-a")


def test_lora_adapters_digest(fleet, root):
    loaded(fleet, "digest-a", make(root, "digest-a", 1.5))
    try:
        ads = adapters(fleet)
        assert ads["digest-a"]["digest"] != ads["pirate"]["digest"], "other files, the same digest"
        # docs/SERVER.md: "digest: sha256:<hex> of the adapter's files".
        for a in ads.values():
            assert re.fullmatch(r"sha256:[0-9a-f]{64}", a["digest"]), a["digest"]
    finally:
        unloaded(fleet, "digest-a")


def test_startup_named_adapter(fleet):
    p = adapters(fleet)["pirate"]
    assert p["id"] == 0 and p["scale"] == 0.0 and p["path"] == PEFT, p
    base = toks(fleet, lora=[])
    assert toks(fleet) == base, "a named --lora adapter must default to scale 0"
    named = fleet.complete(PROMPT, n=16, model="pirate", cache_prompt=False)
    assert named["model"] == "pirate"
    assert named["tokens"] == toks(fleet, lora=[{"id": 0, "scale": 1}]) != base
    e = models(fleet)["pirate"]
    assert e["parent"] == BASE_ID and e["root"] == PEFT and e["owned_by"] == "graft", e


# The positional --lora entries start where the named ones do (issue 36: one starting scale per
# server, whatever an argument's form).
SINGLE_SLOT_ADAPTERS = [("a", PEFT, 0.0), ("b", MLX, 0.0), ("c", PEFT, 0.5), ("pirate-mlx", MLX, 0.0),
                        ("pirate-mlx-{id}", MLX, 0.0)]


def test_startup_adapter_forms(single_slot):
    ads = adapters(single_slot)
    assert len(ads) == 5, ads
    second = [n for n in ads if n.startswith("pirate-mlx-")]
    assert len(second) == 1 and second[0] == f"pirate-mlx-{ads[second[0]]['id']}", ads
    for name, path, scale in SINGLE_SLOT_ADAPTERS:
        name = name.format(id=ads[second[0]]["id"])
        assert (ads[name]["path"], ads[name]["scale"]) == (path, scale), (name, ads[name])
    ids = {n: a["id"] for n, a in ads.items()}
    defaults = [{"id": ids[n], "scale": a["scale"]} for n, a in ads.items() if a["scale"]]
    assert len(defaults) == 1
    assert toks(single_slot, n=8) == toks(single_slot, n=8, lora=defaults)
    # The startup line says it: each adapter's default scale, and what a request gets.
    line = next(l for l in single_slot.output().splitlines() if l.startswith("graft serve: adapters: "))
    listed = ", ".join(f"{n} (id {a['id']}, scale {a['scale']:g})" for n, a in sorted(ads.items(), key=lambda x: x[1]["id"]))
    assert line.startswith("graft serve: adapters: " + listed + ";"), line
    assert "c (id 4, scale 0.5)" in line, line
    assert line.endswith('a request gets the adapters it names ("model") or lists ("lora")'), line
    assert toks(single_slot, n=8, model="c") == toks(single_slot, n=8, lora=[{"id": ids["c"], "scale": 1}])
    assert toks(single_slot, n=8, model=second[0]) == toks(single_slot, n=8, lora=[{"id": ids[second[0]], "scale": 1}])
    assert toks(single_slot, n=8, model="c") != toks(single_slot, n=8, model="b")
    # Adapters to pick by `model`, runtime loading off: an unknown name is still a 404 naming the
    # known ones (one rule whether or not runtime LoRA is on), and the base's id is the file's stem.
    r = single_slot.post("/completion", {"prompt": PROMPT, "n_predict": 2, "model": "no-such-model"})
    assert r.status_code == 404 and "does not exist" in r.json()["error"]["message"], r.text
    assert "known: SmolLM2-135M-Instruct.Q4_1, a, b, pirate-mlx" in r.json()["error"]["message"], r.text
    assert toks(single_slot, n=8, model="SmolLM2-135M-Instruct.Q4_1") == toks(single_slot, n=8)
    assert single_slot.get("/v1/models").json()["data"][0]["id"] == "SmolLM2-135M-Instruct.Q4_1"


def test_startup_adapter_ids_follow_command_line_order(single_slot):
    # docs/SERVER.md: the --lora entries in order, then the --lora-scaled ones; a taken name gets -<id>.
    got = [(a["id"], a["name"]) for a in single_slot.get("/lora-adapters").json()]
    assert got == [(0, "a"), (1, "b"), (2, "pirate-mlx"), (3, "pirate-mlx-3"), (4, "c")], got


@pytest.mark.parametrize("args,fragment", [
    (["--allow-runtime-lora"], "--lora-root"),
    (["--allow-runtime-lora", "--lora-root", "{tmp}", "--lora-fuse", "--lora", PEFT], "--lora-fuse"),
])
def test_runtime_lora_startup_errors(tmp_path, args, fragment):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    out = subprocess.run([BIN, "serve", "-m", MODEL, "--port", str(free_port()), *args], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert fragment in out.stderr and "listening" not in out.stderr, out.stderr


def test_disabled_without_allow_runtime_lora(server):
    # The session server (tests/server/conftest.py): positional --lora PEFT --lora MLX, no --allow-runtime-lora.
    before = state(server)
    r = server.post("/v1/load_lora_adapter", {"lora_name": "x", "lora_path": PEFT})
    error_of(r, 501, "not_supported_error")
    r = server.post("/v1/unload_lora_adapter", {"lora_name": "pirate-peft"})
    error_of(r, 501, "not_supported_error")
    assert state(server) == before
    ads = adapters(server)
    assert ads["pirate-peft"]["id"] == 0 and ads["pirate-mlx"]["id"] == 1, ads
    # "model": an adapter's name selects it alone at scale 1, on a plain server too.
    got = server.complete(PROMPT, n=8, model="pirate-mlx", cache_prompt=False)
    assert got["model"] == "pirate-mlx"
    assert got["tokens"] == toks(server, n=8, lora=[{"id": 1, "scale": 1}])


# ---- path confinement and bad bodies ----------------------------------------------------------


def _confinement_cases():
    # (id, path builder (root, outside) -> lora_path, status, type)
    return [
        ("outside", lambda root, out: out, 403, "permission_error"),
        ("dotdot-escape", lambda root, out: os.path.join(root, "..", os.path.relpath(out, os.path.dirname(root))),
         403, "permission_error"),
        ("dotdot-inside", lambda root, out: os.path.join(root, "conf-ok", "..", "conf-ok"), 403, "permission_error"),
        ("dotdot-relative", lambda root, out: "../" + os.path.basename(root) + "/conf-ok", 403, "permission_error"),
        ("symlink-dir", lambda root, out: os.path.join(root, "conf-link"), 403, "permission_error"),
        ("symlink-file", lambda root, out: os.path.join(root, "conf-link.gguf"), 403, "permission_error"),
        ("missing", lambda root, out: os.path.join(root, "no-such-adapter"), 404, "not_found_error"),
        ("missing-relative", lambda root, out: "no-such-adapter", 404, "not_found_error"),
    ]


@pytest.mark.parametrize("case", _confinement_cases(), ids=[c[0] for c in _confinement_cases()])
def test_path_confinement(fleet, root, outside, case):
    _, build, status, type_ = case
    make(root, "conf-ok")
    for link, target in (("conf-link", outside), ("conf-link.gguf", GGUF_PIRATE)):
        if not os.path.lexists(os.path.join(root, link)):
            os.symlink(target, os.path.join(root, link))
    before = state(fleet)
    r = load(fleet, "confined", build(root, outside))
    error_of(r, status, type_)
    assert state(fleet) == before, "a refused load changed /lora-adapters or /v1/models"
    assert "confined" not in adapters(fleet)


def test_relative_path_and_symlink_inside_root_load(fleet, root):
    make(root, "conf-ok")
    link = os.path.join(root, "conf-inner-link")
    if not os.path.lexists(link):
        os.symlink(os.path.join(root, "conf-ok"), link)
    for path in ("conf-ok", link):
        loaded(fleet, "conf-fine", path)
        try:
            assert toks(fleet, n=8, model="conf-fine") == toks(fleet, n=8, model="pirate")
        finally:
            unloaded(fleet, "conf-fine")


@pytest.mark.parametrize("body,fragment", [
    ({"lora_path": "conf-ok"}, "lora_name"),
    ({"lora_name": "n"}, "lora_path"),
    ({"lora_name": "", "lora_path": "conf-ok"}, "lora_name"),
    ({"lora_name": 7, "lora_path": "conf-ok"}, "lora_name"),
    ({"lora_name": "n", "lora_path": ["conf-ok"]}, "lora_path"),
    ({"lora_name": "n", "lora_path": "conf-ok", "load_inplace": "yes"}, "load_inplace"),
])
def test_load_body_errors(fleet, root, body, fragment):
    make(root, "conf-ok")
    before = state(fleet)
    assert fragment in error_of(fleet.post("/v1/load_lora_adapter", body), 400, "invalid_request_error")
    assert state(fleet) == before


def test_bad_adapters_are_refused_and_nothing_is_loaded(fleet, root):
    trunc = os.path.join(root, "bad-truncated")
    if not os.path.exists(trunc):
        af.truncated_copy(PEFT, trunc)
    shape = os.path.join(root, "bad-shape")
    tensor = "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight"
    if not os.path.exists(shape):
        _, tensor = af.wrong_shape_copy(PEFT, shape)
    before = state(fleet)
    msg = error_of(load(fleet, "bad", trunc), 400, "invalid_request_error")
    assert "adapter_model.safetensors" in msg, f"the message does not name the file: {msg}"
    assert state(fleet) == before
    msg = error_of(load(fleet, "bad", shape), 400, "invalid_request_error")
    assert "layers.3.self_attn.q_proj" in msg, f"the message does not name the tensor: {msg}"
    assert state(fleet) == before
    r = fleet.post("/completion", {"prompt": PROMPT, "n_predict": 4, "model": "bad"})
    error_of(r, 404, "not_found_error")
    # The name was not taken by the failed loads.
    loaded(fleet, "bad", make(root, "conf-ok"))
    unloaded(fleet, "bad")


# ---- in flight, reload, prompt cache ----------------------------------------------------------


def test_unload_while_in_flight_finishes_with_its_weights(fleet, root):
    loaded(fleet, "inflight", make(root, "inflight", 1.5))
    body = {"prompt": PROMPT, "n_predict": 96, "temperature": 0, "ignore_eos": True, "model": "inflight",
            "cache_prompt": False}
    solo = fleet.post("/completion", body)
    assert solo.status_code == 200, solo.text
    solo = solo.json()["tokens"]
    assert len(solo) == 96 and solo != toks(fleet, n=96, ignore_eos=True)
    r = requests.post(fleet.url + "/completion", json={**body, "stream": True}, stream=True, timeout=300)
    assert r.status_code == 200, r.text
    lines = r.iter_lines()
    got, final = [], None
    for line in lines:
        if line:
            ev = json.loads(line[6:])
            assert not ev["stop"], "the stream ended before its first token"
            got += ev["tokens"]
            break
    try:
        unloaded(fleet, "inflight")
        # Unloaded while its generation is under way: the request still holds it (it is in a slot).
        running = names_of(lora_info(scrape(fleet)).labels["running_lora_adapters"])
        assert "inflight" in running, f"the stream was no longer running at the unload: {running}"
    except AssertionError:
        r.close()
        raise
    assert "inflight" not in models(fleet) and "inflight" not in adapters(fleet)
    for line in lines:
        if not line:
            continue
        assert line.startswith(b"data: "), line
        ev = json.loads(line[6:])
        assert "error" not in ev, ev
        if ev["stop"]:
            final = ev
        else:
            got += ev["tokens"]
    assert final is not None and final["stop_type"] == "limit", final
    assert got == solo, "the unload changed a generation already running with the adapter"
    r = fleet.post("/completion", {"prompt": PROMPT, "n_predict": 4, "model": "inflight"})
    error_of(r, 404, "not_found_error")


def test_reload_in_place_never_reuses_the_old_prefix(fleet, root):
    path = make(root, "reload-me")  # the PEFT pirate's files
    loaded(fleet, "reload-me", path)
    try:
        prompt = PREAMBLE + "The reload test. " + PROMPT
        before = adapters(fleet)["reload-me"]
        r1 = fleet.complete(prompt, n=16, model="reload-me", cache_prompt=True)
        r2 = fleet.complete(prompt, n=16, model="reload-me", cache_prompt=True)
        assert r2["tokens_cached"] > 0 and r2["timings"]["cache_n"] == r2["tokens_cached"], r2
        assert r2["tokens"] == r1["tokens"]

        for inplace in (None, False):
            msg = error_of(load(fleet, "reload-me", path, inplace), 400, "invalid_request_error")
            assert re.search(r"already (been )?loaded", msg), msg  # vLLM: "... has already been loaded"
        assert adapters(fleet)["reload-me"] == before

        af.rewrite_scaled(path, PEFT, 0.5)  # same name, same path, other weights (B x 0.5)
        loaded(fleet, "reload-me", path, inplace=True)
        after = adapters(fleet)["reload-me"]
        assert after["id"] == before["id"], "an in-place reload must keep the id"
        assert after["generation"] > before["generation"], (before, after)
        assert after["digest"] != before["digest"], "new files, same digest"

        r3 = fleet.complete(prompt, n=16, model="reload-me", cache_prompt=True)
        assert r3["tokens_cached"] == 0 and r3["timings"]["cache_n"] == 0, \
            "the first request after a reload reused KV computed with the old weights"
        fresh = toks(fleet, prompt, model="reload-me")
        assert r3["tokens"] == fresh
        assert fresh != r1["tokens"], "the reloaded weights did not change the output"
        # B x 0.5 is exact in BF16: the new files at scale 1 are the old ones at scale 0.5.
        assert fresh == toks(fleet, prompt, lora=[{"id": 0, "scale": 0.5}])
        r4 = fleet.complete(prompt, n=16, model="reload-me", cache_prompt=True)
        assert r4["tokens_cached"] > 0 and r4["tokens"] == fresh
    finally:
        unloaded(fleet, "reload-me")


# ---- --lora-dir -------------------------------------------------------------------------------


def test_lora_dir_loads_on_first_use(dir_server, fleet, lora_dir):
    assert not {"alpha", "beta", "pirate.gguf"} & set(models(dir_server))
    base = toks(dir_server, lora=[])
    assert base == toks(fleet, lora=[]), "two servers disagree on the base model"
    first = dir_server.complete(PROMPT, n=16, model="alpha", cache_prompt=False)
    assert first["model"] == "alpha"
    a = adapters(dir_server)["alpha"]
    assert os.path.realpath(a["path"]) == os.path.join(lora_dir, "alpha") and a["scale"] == 0.0, a
    e = models(dir_server)["alpha"]
    assert e["parent"] == "SmolLM2-135M-Instruct.Q4_1" and e["owned_by"] == "graft", e  # no --alias: the file stem
    assert toks(dir_server) == base, "a --lora-dir adapter must default to scale 0"
    assert toks(dir_server, model="alpha") == first["tokens"]
    for name in ("alpha", "beta", "pirate.gguf"):
        loaded(fleet, f"{name}-explicit", os.path.join(lora_dir, name))
    try:
        assert first["tokens"] == toks(fleet, model="alpha-explicit") != base
        client = openai.OpenAI(base_url=dir_server.url + "/v1", api_key="unused")
        beta = client.completions.create(model="beta", prompt=PROMPT, max_tokens=16, temperature=0)
        assert beta.model == "beta"
        assert beta.choices[0].text == fleet.complete(PROMPT, n=16, model="beta-explicit")["content"]
        g = dir_server.complete(PROMPT, n=16, model="pirate.gguf", cache_prompt=False)
        assert g["tokens"] == toks(fleet, model="pirate.gguf-explicit")
    finally:
        for name in ("alpha", "beta", "pirate.gguf"):
            unloaded(fleet, f"{name}-explicit")
    assert {"alpha", "beta", "pirate.gguf"} <= set(models(dir_server))
    assert list(models(dir_server))[0] == "SmolLM2-135M-Instruct.Q4_1" and models(dir_server)["beta"]["parent"] == "SmolLM2-135M-Instruct.Q4_1"


# Each name but "gamma" names an adapter that exists on disk (outside the dir, or through a path).
@pytest.mark.parametrize("name", ["gamma", "../x", "alpha/../beta", "./beta", "escape", "{outside}"])
def test_lora_dir_refuses_unknown_and_escaping_names(dir_server, outside, name):
    name = name.replace("{outside}", outside)
    before = state(dir_server)
    r = dir_server.post("/completion", {"prompt": PROMPT, "n_predict": 4, "model": name})
    assert r.status_code in (403, 404), (r.status_code, r.text)
    error_of(r, r.status_code, "not_found_error" if r.status_code == 404 else "permission_error")
    assert state(dir_server) == before


# ---- the memory budget ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def budget(root):
    s = Server("--max-loras-resident", "2", "--allow-runtime-lora", "--lora-root", root, "--metrics",
               "--parallel", "2", "--ctx-size", "1024")
    yield s
    assert s.stop() == 0, s.output()


BUDGET_FACTORS = [1.0, 0.5, 1.5, 1.25, 2.0]


def test_memory_budget_evicts_idle_adapters_and_rebuilds_them(budget, root):
    names = [f"budget-{i}" for i in range(len(BUDGET_FACTORS))]
    for name, f in zip(names, BUDGET_FACTORS):
        loaded(budget, name, make(root, name, f))
    try:
        solo = {n: toks(budget, model=n) for n in names}  # one at a time
        assert len({tuple(t) for t in solo.values()}) == len(names), f"the adapters are not distinct: {solo}"
        jobs = names * 2
        with ThreadPoolExecutor(3) as pool:
            got = list(pool.map(lambda n: (n, toks(budget, model=n)), jobs))
        for n, t in got:
            assert t == solo[n], f"{n}: {t} after eviction and rebuild, {solo[n]} alone"
        assert toks(budget, model=names[0]) == solo[names[0]]

        fams = scrape(budget)
        assert value(fams, "graft:lora_adapter_evictions_total") > 0
        levels = loaded_levels(fams)
        assert set(levels) == set(names) and set(levels.values()) <= {"gpu", "cpu"}, levels
        gpu = [n for n, l in levels.items() if l == "gpu"]
        assert 1 <= len(gpu) <= 2, levels
        assert value(fams, "vllm:num_gpu_loaded_lora_adapters") == len(gpu)
        assert value(fams, "vllm:num_cpu_loaded_lora_adapters") == len(names) - len(gpu)
        assert value(fams, "vllm:max_gpu_lora_adapters") == 2
        assert lora_info(fams).labels["max_lora"] == "2"
        assert value(fams, "graft:lora_adapters_registered") == len(names)
        assert value(fams, "graft:lora_adapter_loads_total") >= len(names)
        resident = sorted(a["name"] for a in adapters(budget).values() if a["resident"])
        assert resident == sorted(gpu), (resident, levels)
        for n in names:
            runs = 1 + jobs.count(n) + (n == names[0])
            assert value(fams, "graft:lora_adapter_requests_total", adapter_name=n) == runs, n
            assert value(fams, "graft:lora_adapter_generation_tokens_total", adapter_name=n) == \
                runs * len(solo[n]), n
    finally:
        for n in names:
            unloaded(budget, n)


# ---- metrics ----------------------------------------------------------------------------------

DOCUMENTED = {
    # name: type per docs (None: not checked)
    "llamacpp:prompt_tokens_total": "counter", "llamacpp:prompt_seconds_total": "counter",
    "llamacpp:tokens_predicted_total": "counter", "llamacpp:tokens_predicted_seconds_total": "counter",
    "llamacpp:n_decode_total": "counter", "llamacpp:prompt_tokens_seconds": "gauge",
    "llamacpp:predicted_tokens_seconds": "gauge", "llamacpp:kv_cache_usage_ratio": "gauge",
    "llamacpp:kv_cache_tokens": "gauge", "llamacpp:requests_processing": "gauge",
    "llamacpp:requests_deferred": "gauge", "llamacpp:n_tokens_max": None,
    "vllm:num_requests_running": "gauge", "vllm:num_requests_waiting": "gauge", "vllm:kv_cache_usage_perc": "gauge",
    "vllm:lora_requests_info": "gauge", "vllm:cache_config_info": "gauge", "vllm:lora_adapter_loaded": "gauge",
    "vllm:num_gpu_loaded_lora_adapters": "gauge", "vllm:num_cpu_loaded_lora_adapters": "gauge",
    "vllm:max_gpu_lora_adapters": "gauge", "vllm:lora_adapter_load_seconds": "histogram",
    "graft:lora_adapter_requests_total": "counter", "graft:lora_adapter_prompt_tokens_total": "counter",
    "graft:lora_adapter_generation_tokens_total": "counter", "graft:lora_adapters_registered": "gauge",
    "graft:lora_adapter_resident_bytes": "gauge", "graft:lora_adapter_loads_total": "counter",
    "graft:lora_adapter_evictions_total": "counter", "graft:batch_steps_mixed_adapters_total": "counter",
    "graft:requests_total": "counter", "graft:requests_cancelled_total": "counter",
    "graft:adapter_requests_total": "counter", "graft:requests_waiting_for_adapter": "gauge",
}


def test_every_metric_in_docs_server_md_is_listed_here():
    """The names above are exactly those of docs/SERVER.md's Metrics section (so the scrape test below
    checks every documented name, and a name documented but not served fails)."""
    text = open(os.path.join(SRC, "docs", "SERVER.md")).read()
    section = text[text.index("## Metrics (`--metrics`)"):text.index("## Not yet")]
    documented = set(re.findall(r"`((?:llamacpp|vllm|graft):[a-z_]+)", section))
    assert documented == set(DOCUMENTED), (documented ^ set(DOCUMENTED))


def family(fams, name):
    """The family of a documented name: prometheus_client strips a counter's `_total`."""
    if name in fams:
        return fams[name]
    if name.endswith("_total") and name[:-6] in fams:
        return fams[name[:-6]]
    return None


def test_metrics_documented_names(fleet, root):
    loaded(fleet, "metrics-a", make(root, "metrics-a", 1.5))
    try:
        toks(fleet, n=4, model="metrics-a", ignore_eos=True)
        toks(fleet, n=4, model="pirate")
        toks(fleet, n=4)
        fams = scrape(fleet)
        missing = [n for n in DOCUMENTED if family(fams, n) is None or not family(fams, n).samples]
        assert not missing, f"documented metrics missing: {missing}"
        for name, typ in DOCUMENTED.items():
            if typ:
                assert family(fams, name).type == typ, (name, family(fams, name).type)
        h = family(fams, "vllm:lora_adapter_load_seconds")
        count = [x.value for x in h.samples if x.name == h.name + "_count"]
        inf = [x.value for x in h.samples if x.name == h.name + "_bucket" and x.labels.get("le") == "+Inf"]
        assert len(count) == 1 and count[0] >= 1 and inf == count, h.samples
        assert [x for x in h.samples if x.name == h.name + "_sum"], h.samples

        info = lora_info(fams)
        assert abs(info.value - time.time()) < 60, info
        assert set(info.labels) == {"max_lora", "running_lora_adapters", "waiting_lora_adapters"}, info.labels
        assert info.labels["max_lora"] == "4"  # --parallel, no --max-loras-resident
        loaded_ = {x.labels["adapter_name"]: x for x in samples_named(fams, "vllm:lora_adapter_loaded")}
        assert set(loaded_) == set(adapters(fleet)), (loaded_, adapters(fleet))
        m = loaded_["metrics-a"]
        assert set(m.labels) == {"adapter_name", "level", "pinned", "rank"} and m.labels["rank"] == "8", m
        assert m.labels["level"] == "gpu" and m.value == 1, m  # no budget: every adapter stays built
        assert value(fams, "graft:lora_adapters_registered") == len(adapters(fleet))
        assert value(fams, "vllm:num_gpu_loaded_lora_adapters") == len(adapters(fleet))
        assert value(fams, "graft:lora_adapter_requests_total", adapter_name="metrics-a") == 1
        assert value(fams, "graft:lora_adapter_generation_tokens_total", adapter_name="metrics-a") == 4
        assert value(fams, "graft:lora_adapter_prompt_tokens_total", adapter_name="metrics-a") > 0
        assert value(fams, "graft:adapter_requests_total", id="0", path=PEFT) >= 1
    finally:
        unloaded(fleet, "metrics-a")
    fams = scrape(fleet)
    assert "metrics-a" not in loaded_levels(fams)
    assert value(fams, "graft:lora_adapters_registered") == len(adapters(fleet))


def test_running_and_waiting_adapters_in_lora_requests_info(single_slot):
    s = single_slot
    b_solo = toks(s, n=8, model="b")
    sock = open_raw_stream(s.port, {"prompt": PROMPT, "n_predict": 4000, "stream": True, "temperature": 0,
                                    "ignore_eos": True, "model": "a", "cache_prompt": False})
    with ThreadPoolExecutor(1) as pool:
        queued = pool.submit(lambda: toks(s, n=8, model="b"))
        try:
            seen = None
            deadline = time.time() + 120
            while time.time() < deadline and not queued.done():
                fams = scrape(s)
                info = lora_info(fams)
                if "b" in names_of(info.labels["waiting_lora_adapters"]):
                    seen = (info.labels, value(fams, "vllm:num_requests_running"),
                            value(fams, "vllm:num_requests_waiting"))
                    break
                time.sleep(0.02)
            assert seen, "the queued request's adapter never showed in waiting_lora_adapters"
            labels, running, waiting = seen
            assert names_of(labels["running_lora_adapters"]) == ["a"], labels
            assert labels["max_lora"] == "1", labels  # --parallel 1
            assert running == 1 and waiting >= 1, seen
        finally:
            sock.close()  # frees the slot
        assert queued.result() == b_solo
    deadline = time.time() + 60
    while True:
        info = lora_info(scrape(s))
        if not info.labels["running_lora_adapters"] and not info.labels["waiting_lora_adapters"]:
            break
        assert time.time() < deadline, f"at rest the adapters are still listed: {info.labels}"
        time.sleep(0.05)


# ---- load and unload under traffic ------------------------------------------------------------


def test_load_unload_under_traffic_changes_no_other_request(fleet, root):
    cases = [(PROMPT, {}), ("Once upon a time", {"model": "pirate"}),
             ("The ocean is", {"lora": [{"id": 0, "scale": 0.5}]}), ("Ahoy, matey! Where is", {"model": BASE_ID})]
    solo = [toks(fleet, p, n=8, **f) for p, f in cases]
    path = make(root, "churn", 1.25)
    done = threading.Event()

    def client(k):
        out, i = [], k
        while not done.is_set() or len(out) < 4:
            p, f = cases[i % len(cases)]
            out.append((i % len(cases), toks(fleet, p, n=8, **f)))
            i += 1
        return out

    churn = []
    with ThreadPoolExecutor(3) as pool:
        futures = [pool.submit(client, k) for k in range(3)]
        try:
            for _ in range(3):
                loaded(fleet, "churn", path)
                churn.append(toks(fleet, "The ocean is", n=8, model="churn"))
                unloaded(fleet, "churn")
        finally:
            done.set()
        results = [r for f in futures for r in f.result()]
    for idx, got in results:
        assert got == solo[idx], f"case {cases[idx]}: {got} under load/unload traffic, {solo[idx]} alone"
    assert len(results) >= 12
    assert churn[0] == churn[1] == churn[2] and churn[0] != toks(fleet, "The ocean is", n=8, lora=[])
    assert "churn" not in models(fleet)
