"""Models and adapters from the Hugging Face Hub by name (graft/hub/hub.h), against a loopback
stand-in for the Hub's file routes (hub_standin.py) that the real huggingface_hub client downloads
from too: each finds the other's downloads in the shared cache; a second run works offline; a
truncated transfer, a wrong checksum, a missing file and a private repo without a token are refused
with nothing cached where a whole file is expected.

Run by ctest (cli_hub) as: .venv/bin/python -m pytest tests/cli/test_hub.py, with GRAFT_BIN and
GRAFT_SRC set.
"""
import os
import subprocess

import pytest

from hub_standin import HubStandIn, Repo, cache_files

GRAFT = os.environ["GRAFT_BIN"]
SRC = os.environ["GRAFT_SRC"]
MODEL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PEFT = os.path.join(SRC, "demo", "adapters", "pirate-peft")
TINY = os.path.join(SRC, "tests", "fixtures", "models", "llama_f32")  # a Hugging Face model directory


def files_of(directory):
    return {n: os.path.join(directory, n) for n in sorted(os.listdir(directory))
            if os.path.isfile(os.path.join(directory, n))}


@pytest.fixture
def hub(tmp_path):
    repos = {
        "graft-test/smol-gguf": Repo({"SmolLM2-135M-Instruct.Q4_1.gguf": MODEL, "README.md": b"# smol\n"}),
        "graft-test/tiny": Repo(files_of(TINY)),
        "graft-test/pirate": Repo(files_of(PEFT)),
        "graft-test/private": Repo({"tiny-Q4_1.gguf": MODEL}, private=True),
        "graft-test/two-quants": Repo({"m-Q4_1.gguf": MODEL, "m-Q4_K.gguf": MODEL, "m-Q4_K_M.gguf": MODEL}),
    }
    h = HubStandIn(repos)
    h.env = dict(os.environ, HF_ENDPOINT=h.url, HF_HOME=str(tmp_path / "hf"), HF_TOKEN="", HF_HUB_OFFLINE="0")
    h.cache = str(tmp_path / "hf" / "hub")
    yield h
    h.close()


def graft(hub, *args, env=None):
    return subprocess.run([GRAFT, *args], capture_output=True, text=True, timeout=300, env={**hub.env, **(env or {})})


def generate(hub, *model_args, env=None, n="6"):
    r = graft(hub, "generate", *model_args, "-p", "The capital of France is", "--temp", "0", "-n", n, "-t", "2", env=env)
    return r


def test_gguf_by_name_downloads_once_and_then_runs_offline(hub):
    local = generate(hub, "-m", MODEL)
    assert local.returncode == 0, local.stderr
    r = generate(hub, "-hf", "graft-test/smol-gguf:Q4_1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == local.stdout
    gets = [x for x in hub.log if x[0] == "GET" and x[1].startswith("/cdn/")]
    assert len(gets) == 1
    # The layout huggingface_hub reads: the real client finds graft's download without the network.
    from huggingface_hub import hf_hub_download, try_to_load_from_cache
    path = try_to_load_from_cache("graft-test/smol-gguf", "SmolLM2-135M-Instruct.Q4_1.gguf", cache_dir=hub.cache)
    assert path and os.path.samefile(path, MODEL) is False and open(path, "rb").read(4) == b"GGUF"
    assert hf_hub_download("graft-test/smol-gguf", "SmolLM2-135M-Instruct.Q4_1.gguf", cache_dir=hub.cache,
                           local_files_only=True) == path
    # Second run: the Hub gone, HF_HUB_OFFLINE set; same answer, no request.
    hub.close()
    before = len(hub.log)
    r = generate(hub, "-hf", "graft-test/smol-gguf:Q4_1", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == local.stdout and len(hub.log) == before
    # And without HF_HUB_OFFLINE: the Hub unreachable, the cached file still serves.
    r = generate(hub, "-hf", "graft-test/smol-gguf", "--hf-file", "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert r.returncode == 0, r.stderr


def test_adapter_fetched_by_huggingface_hub_is_used_by_graft_offline(hub):
    from huggingface_hub import hf_hub_download
    for name in os.listdir(PEFT):
        hf_hub_download("graft-test/pirate", name, cache_dir=hub.cache, endpoint=hub.url)
    local = generate(hub, "-m", MODEL, "--lora", PEFT)
    assert local.returncode == 0, local.stderr
    r = generate(hub, "-m", MODEL, "--lora", "hf:graft-test/pirate", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == local.stdout


def test_safetensors_repo_by_name_is_its_snapshot(hub):
    local = generate(hub, "-m", TINY, n="4")
    assert local.returncode == 0, local.stderr
    r = generate(hub, "-hf", "graft-test/tiny", n="4")
    assert r.returncode == 0, r.stderr
    assert r.stdout == local.stdout
    r = generate(hub, "-hf", "graft-test/tiny:Q4_K_M", n="4")
    assert r.returncode == 2 and "no GGUF file" in r.stderr, r.stderr


def test_quant_tags_pick_one_file(hub):
    for tag, ok in (("Q4_1", True), ("q4_k_m", True), ("Q4_K", True), ("Q8_0", False)):
        r = generate(hub, "-hf", f"graft-test/two-quants:{tag}", n="2")
        assert (r.returncode == 0) == ok, (tag, r.stderr)
    assert "m-Q4_1.gguf" in r.stderr and "m-Q4_K_M.gguf" in r.stderr  # the refusal lists the files


def test_refusals_cache_nothing(hub):
    # A truncated transfer: refused (exit 5); the partial bytes wait as .incomplete, never as the blob
    # or the snapshot's file; the next run resumes with a Range request.
    hub.fault = "truncate"
    r = generate(hub, "-hf", "graft-test/smol-gguf:Q4_1")
    assert r.returncode == 5 and "transfer ended" in r.stderr, r.stderr
    assert all(f.endswith(".incomplete") or "/refs/" in f or f.startswith(".locks") for f in cache_files(hub.cache)), \
        cache_files(hub.cache)
    r = generate(hub, "-hf", "graft-test/smol-gguf:Q4_1")
    assert r.returncode == 0, r.stderr
    assert any(x[2] and x[2].startswith("bytes=") for x in hub.log), "the second run did not resume"
    # A wrong checksum: refused, the download discarded.
    hub.fault = "corrupt"
    r = graft(hub, "generate", "-m", MODEL, "--lora", "hf:graft-test/pirate", "-p", "x", "-n", "1")
    assert r.returncode == 5 and "checksum mismatch" in r.stderr, r.stderr
    assert not [f for f in cache_files(hub.cache) if "models--graft-test--pirate/snapshots" in f and "safetensors" in f]
    assert not [f for f in cache_files(hub.cache) if f.endswith(".incomplete") and "pirate" in f]
    # A missing file, an unknown repo, a private repo without its token: bad arguments, nothing cached.
    before = cache_files(hub.cache)
    r = generate(hub, "-hf", "graft-test/smol-gguf", "--hf-file", "missing.gguf")
    assert r.returncode == 2 and "not found" in r.stderr and "EntryNotFound" in r.stderr, r.stderr
    r = generate(hub, "-hf", "graft-test/nope:Q4_1")
    assert r.returncode == 2 and "RepoNotFound" in r.stderr, r.stderr
    r = generate(hub, "-hf", "graft-test/private:Q4_1")
    assert r.returncode == 2 and "HF_TOKEN" in r.stderr, r.stderr
    assert cache_files(hub.cache) == before
    r = generate(hub, "-hf", "graft-test/private:Q4_1", env={"HF_TOKEN": hub.token})
    assert r.returncode == 0, r.stderr
    # Offline with nothing cached: refused, naming the cache.
    r = generate(hub, "-hf", "graft-test/two-quants:Q4_1", env={"HF_HUB_OFFLINE": "1"})
    assert r.returncode == 5 and "not in the cache" in r.stderr, r.stderr


def test_bad_names_are_bad_arguments(hub):
    for spec in ("no-slash", "a/b/c", "../x", "a/--b"):
        r = generate(hub, "-hf", spec)
        assert r.returncode == 2 and "repo id" in r.stderr, (spec, r.stderr)
    r = generate(hub, "-m", MODEL, "-hf", "graft-test/smol-gguf")
    assert r.returncode == 2, r.stderr


def serve(hub, *args, env=None):
    """graft serve on a free port until /health answers 200; returns (process, base URL)."""
    import socket
    import time
    import requests
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([GRAFT, "serve", *args, "--port", str(port), "-t", "2", "--log-format", "none"],
                         env={**hub.env, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        assert p.poll() is None, p.stderr.read()
        try:
            if requests.get(url + "/health", timeout=2).status_code == 200:
                return p, url
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    p.kill()
    raise AssertionError("graft serve did not become ready")


def stop(p):
    p.terminate()
    assert p.wait(timeout=60) == 0


def test_serve_by_name_and_runtime_adapters_from_the_hub(hub, tmp_path):
    import requests
    root = str(tmp_path / "hf")  # --lora-root holds the Hugging Face cache: runtime hf: paths allowed
    p, url = serve(hub, "-hf", "graft-test/smol-gguf:Q4_1", "--allow-runtime-lora", "--lora-root", root)
    try:
        assert [m["id"] for m in requests.get(url + "/v1/models").json()["data"]] == ["graft-test/smol-gguf"]
        r = requests.post(url + "/v1/load_lora_adapter", json={"lora_name": "pirate", "lora_path": "hf:graft-test/pirate"})
        assert r.status_code == 200, r.text
        r = requests.post(url + "/v1/completions", json={"model": "pirate", "prompt": "Ahoy", "max_tokens": 4})
        assert r.status_code == 200, r.text
    finally:
        stop(p)
    # Elsewhere the cache is outside --lora-root: refused before anything is fetched.
    other = tmp_path / "adapters"
    other.mkdir()
    p, url = serve(hub, "-hf", "graft-test/smol-gguf:Q4_1", "--allow-runtime-lora", "--lora-root", str(other))
    try:
        r = requests.post(url + "/v1/load_lora_adapter", json={"lora_name": "x", "lora_path": "hf:graft-test/tiny"})
        assert r.status_code == 403 and "--lora-root" in r.text, r.text
        assert not os.path.exists(os.path.join(hub.cache, "models--graft-test--tiny"))
    finally:
        stop(p)
    # Downloaded once: the second start works with the Hub gone.
    fetched = len([x for x in hub.log if x[1].startswith("/cdn/")])
    hub.close()
    p, url = serve(hub, "-hf", "graft-test/smol-gguf:Q4_1", "--lora", "hf:graft-test/pirate",
                   env={"HF_HUB_OFFLINE": "1"})
    try:  # a startup adapter by Hub name is named NAME, not by its snapshot's commit
        assert requests.get(url + "/lora-adapters").json()[0]["name"] == "pirate"
    finally:
        stop(p)
    assert len([x for x in hub.log if x[1].startswith("/cdn/")]) == fetched


def test_python_package_loads_by_name(hub):
    # The module the Release build makes (none under the sanitizers, where this is skipped).
    module_dir = os.path.join(os.path.dirname(GRAFT), "python")
    if not os.path.isdir(os.path.join(module_dir, "graft")):
        pytest.skip("no Python module in this build (sanitizer builds make none)")
    import sys
    code = ("import graft; m = graft.load('hf:graft-test/smol-gguf:Q4_1', lora=['hf:graft-test/pirate'], threads=2); "
            "print(m.loras[0]['name']); print(m.generate('Ahoy', max_tokens=3, temperature=0).tokens)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**hub.env, "PYTHONPATH": module_dir})
    assert r.returncode == 0, r.stderr
    name, tokens = r.stdout.splitlines()
    assert name == "pirate" and len(eval(tokens)) == 3


def test_bases_by_name_in_inspect(hub):
    import json
    local = graft(hub, "inspect", PEFT, "--base", MODEL, "--json")
    assert local.returncode == 0, local.stderr
    r = graft(hub, "inspect", "hf:graft-test/pirate", "--base", "hf:graft-test/smol-gguf:Q4_1", "--json")
    assert r.returncode == 0, r.stderr
    def without_paths(x):  # the same facts but for where the files are
        if isinstance(x, dict):
            return {k: without_paths(v) for k, v in x.items() if k not in ("adapter", "base", "file", "path")}
        return [without_paths(v) for v in x] if isinstance(x, list) else x
    assert without_paths(json.loads(r.stdout)) == without_paths(json.loads(local.stdout))
