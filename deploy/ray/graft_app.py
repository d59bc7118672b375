#!/usr/bin/env python3
"""Ray Serve in front of `graft serve` replicas: Ray's multiplexed routing places LoRA adapters.

Pieces (docs/DEPLOY.md, "Ray Serve"):

- GraftReplica (a deployment, R replicas): each replica starts its own `graft serve` on a free
  loopback port (`--port 0`, the port read from graft's "listening on" line), waits for
  `GET /health` 200, forwards requests to it, and stops it when the replica stops (SIGTERM, then
  SIGKILL; the child also gets SIGKILL from the kernel if the replica's process dies first). Its
  `check_health` fails once the graft process has exited, so Ray replaces the replica.
- A `@serve.multiplexed(max_num_models_per_replica=N)` loader per replica: loading model id NAME is
  `POST /v1/load_lora_adapter {"lora_name": NAME, "lora_path": NAME}` (the path relative to
  `--lora-root`); the model object Ray evicts from its LRU unloads it again
  (`/v1/unload_lora_adapter`) once the requests using it have finished. graft runs with
  `--max-loras-resident N`, the same N, so Ray's LRU and graft's budget agree.
- GraftIngress (FastAPI): `POST /v1/completions`, `POST /v1/chat/completions`, `GET /v1/models`,
  `GET /health`. The request's OpenAI `model` becomes the multiplexed model id
  (`handle.options(multiplexed_model_id=...)`), except for the base model's names (the alias, the
  model file's name, or no `model`), which go without one. Streams (SSE) are passed through chunk by
  chunk. Every answer from a replica carries `x-graft-replica: <Ray replica id>`. A request whose
  replica or graft died before answering is retried on another pick for up to `retry_timeout_s`;
  a stream that breaks after its first byte ends with an OpenAI-style `data: {"error": ...}` event.

Routing modes: `multiplex` (default) as above; `plain` (multiplex=false): no multiplexed id (Ray's
power-of-two-choices over queue lengths alone), graft started with `--lora-dir LORA_ROOT` and
resolving the `model` itself (its own LRU under `--max-loras-resident`).

Start it:

  python deploy/ray/graft_app.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --lora-root demo/adapters --replicas 3 --max-loras 2 --port 8000
  serve run deploy.ray.graft_app:build_app model=models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      lora_root=demo/adapters replicas=3 max_loras=2          # from the repository root
  serve run deploy.ray.graft_app:app                         # config from GRAFT_* variables

On a Ray cluster the same: each replica's graft listens on its own node's loopback only; the
binary, the model and the adapter root must exist at the same paths on every node. The module
registers itself to be pickled by value, so worker nodes need not have this file.
"""
import argparse
import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import aiohttp
import ray
from fastapi import FastAPI, Request
from ray import serve
from starlette.responses import JSONResponse, Response, StreamingResponse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Every setting, its default and type (builder arguments from `serve run` arrive as strings).
DEFAULTS = {
    "graft": os.environ.get("GRAFT_BIN", os.path.join(ROOT, "build", "graft")),
    "model": os.environ.get("GRAFT_MODEL", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")),
    "alias": os.environ.get("GRAFT_ALIAS", ""),
    "lora_root": os.environ.get("GRAFT_LORA_ROOT", ""),
    "replicas": int(os.environ.get("GRAFT_REPLICAS", "3")),
    "max_loras": int(os.environ.get("GRAFT_MAX_LORAS", "4")),  # Ray's N and graft's --max-loras-resident
    "parallel": 4,  # graft --parallel
    "threads": 0,  # graft --threads (0: graft's default)
    "ctx_size": 0,  # graft --ctx-size (0: graft's default)
    "graft_args": "",  # more `graft serve` options, one shell-quoted string
    "multiplex": True,  # False: plain routing (no multiplexed id; graft resolves `model` via --lora-dir)
    "max_ongoing_requests": 0,  # per GraftReplica (0: 2 x parallel)
    "ingress_replicas": 1,
    "ingress_max_ongoing_requests": 256,
    "replica_num_cpus": 0.0,  # Ray CPUs reserved per GraftReplica (graft's threads are not Ray's)
    "health_check_period_s": 2.0,
    "health_check_timeout_s": 10.0,
    "graceful_shutdown_timeout_s": 15.0,
    "start_timeout_s": 300.0,  # graft's /health must answer 200 within this
    "request_timeout_s": 600.0,  # one request to graft
    "retry_timeout_s": 30.0,  # how long the ingress retries a request whose replica or graft died
    "log_dir": "",  # graft's output, one file per replica (default: a temporary directory)
    "debug": False,  # also answer x-graft-pid and x-graft-port (the graft process behind the replica)
}

_RETRYABLE_RAY_ERRORS = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.RpcError,
                         serve.exceptions.BackPressureError, serve.exceptions.DeploymentUnavailableError)
if hasattr(serve.exceptions, "ReplicaUnavailableError"):
    _RETRYABLE_RAY_ERRORS += (serve.exceptions.ReplicaUnavailableError,)


def make_config(args=None):
    """DEFAULTS updated from `args` (a dict; strings are converted to each default's type), with the
    binary, model, adapter root and log directory made absolute (taken from the current directory)."""
    cfg = dict(DEFAULTS)
    for key, value in (args or {}).items():
        key = key.replace("-", "_")
        if key not in cfg:
            raise ValueError(f"unknown setting {key!r} (known: {', '.join(sorted(cfg))})")
        kind = type(DEFAULTS[key])
        if isinstance(value, str) and kind is bool:
            value = value.strip().lower() in ("1", "true", "yes", "on")
        elif value is not None:
            value = kind(value)
        cfg[key] = value
    for key in ("graft", "model", "lora_root", "log_dir"):
        if cfg[key]:
            cfg[key] = os.path.abspath(os.path.expanduser(cfg[key]))
    if cfg["max_loras"] < 1:
        raise ValueError("max_loras must be at least 1")
    return cfg


def base_model_names(cfg):
    """The `model` values that mean the base model (no multiplexed id): none, the alias, the model
    file's name with or without `.gguf` (graft's default id)."""
    name = os.path.basename(cfg["model"].rstrip("/"))
    names = {"", name, name[:-len(".gguf")] if name.endswith(".gguf") else name}
    if cfg["alias"]:
        names.add(cfg["alias"])
    return names


def graft_command(cfg):
    cmd = [cfg["graft"], "serve", "-m", cfg["model"], "--host", "127.0.0.1", "--port", "0", "--metrics",
           "--parallel", str(cfg["parallel"]), "--max-loras-resident", str(cfg["max_loras"])]
    if cfg["alias"]:
        cmd += ["--alias", cfg["alias"]]
    if cfg["threads"]:
        cmd += ["--threads", str(cfg["threads"])]
    if cfg["ctx_size"]:
        cmd += ["--ctx-size", str(cfg["ctx_size"])]
    if cfg["lora_root"]:
        cmd += ["--allow-runtime-lora", "--lora-root", cfg["lora_root"]]
        if not cfg["multiplex"]:
            cmd += ["--lora-dir", cfg["lora_root"]]
    return cmd + shlex.split(cfg["graft_args"])


def _die_with_parent():
    """A command prefix that makes the child get SIGKILL when the thread that started it dies
    (Linux's PR_SET_PDEATHSIG, through util-linux's setpriv), so a replica killed without running
    its destructor leaves no graft behind. Not a preexec_fn: Python code between fork and exec in a
    Ray worker (gRPC and Ray's threads, Ray's fatal-signal handler) is not safe there; one such
    child crashed before exec and its inherited alarm() later killed graft with SIGALRM."""
    setpriv = shutil.which("setpriv") if sys.platform.startswith("linux") else None
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


_LISTENING = re.compile(r"graft serve: listening on http://([^:\s]+):(\d+)")


def start_graft(cfg, log_path):
    """Starts `graft serve` with its output in `log_path`; returns (process, port) once /health is 200."""
    log = open(log_path, "wb")
    proc = subprocess.Popen(_die_with_parent() + graft_command(cfg), stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    log.close()
    deadline = time.monotonic() + cfg["start_timeout_s"]
    port = None
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"graft serve exited with {proc.returncode}: {_tail(log_path)}")
            if port is None:
                with open(log_path, errors="replace") as f:
                    m = _LISTENING.search(f.read())
                if m:
                    port = int(m.group(2))
            if port is not None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        if r.status == 200:
                            return proc, port
                except (urllib.error.URLError, OSError):
                    pass  # 503 while loading, or not yet accepting
            time.sleep(0.05)
        raise RuntimeError(f"graft serve did not become ready in {cfg['start_timeout_s']} s: {_tail(log_path)}")
    except BaseException:
        stop_process(proc)
        raise


def stop_process(proc, timeout=10.0):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout)


def _tail(path, n=3000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


def _error_body(status, message, kind):
    """graft's (and llama-server's / OpenAI's) error envelope."""
    return json.dumps({"error": {"code": status, "message": message, "type": kind}}).encode()


def _sse_error(message):
    return b"data: " + _error_body(503, message, "unavailable_error") + b"\n\n"


class AdapterLoadError(Exception):
    """graft refused to load an adapter; carries graft's answer."""

    def __init__(self, status, body, content_type):
        super().__init__(f"load_lora_adapter answered {status}: {body[:300]!r}")
        self.status, self.body, self.content_type = status, body, content_type


class LoadedAdapter:
    """Ray's model object for one adapter registered in this replica's graft. Ray calls `__del__`
    when its LRU evicts the adapter: wait for the requests using it, then unload it from graft."""

    def __init__(self, replica, name):
        self.replica, self.name = replica, name
        self.inflight = 0  # requests holding it (changed on the replica's event loop only)
        self.done = False

    def __del__(self):
        if self.done:
            return
        self.done = True
        replica = self.replica
        if replica.closing or replica.proc.poll() is not None:
            return
        deadline = time.monotonic() + replica.cfg["request_timeout_s"]
        while self.inflight > 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        try:
            replica.post_blocking("/v1/unload_lora_adapter", {"lora_name": self.name})
        except Exception as e:  # noqa: BLE001 - graft may be gone; nothing more to release
            print(f"graft_app: unloading {self.name!r} failed: {e}", file=sys.stderr)


class ReplicaCore:
    """One graft serve process and the requests forwarded to it: everything GraftReplica does but Ray's
    multiplexed loader, whose N is fixed when the deployment class is made (_replica_deployment)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.closing = False
        self.replica_id = serve.get_replica_context().replica_id.unique_id
        log_dir = cfg["log_dir"] or tempfile.mkdtemp(prefix="graft-ray-")
        os.makedirs(log_dir, exist_ok=True)
        self.log_path = os.path.join(log_dir, f"graft-{self.replica_id}.log")
        self.proc, self.port = start_graft(cfg, self.log_path)
        self.url = f"http://127.0.0.1:{self.port}"
        self.session = None
        self.headers = {"x-graft-replica": self.replica_id}
        if cfg["debug"]:
            self.headers.update({"x-graft-pid": str(self.proc.pid), "x-graft-port": str(self.port)})

    async def load_adapter(self, name: str):
        """Ray's multiplexed loader (GraftReplica.get_adapter): registers `name` from the adapter root in
        graft; raises AdapterLoadError with graft's answer when graft refuses it."""
        if "/" in name or name in (".", "..") or not self.cfg["lora_root"]:
            raise AdapterLoadError(404, _error_body(404, f"unknown model '{name}'", "not_found_error"),
                                   "application/json")
        async with self._session().post(self.url + "/v1/load_lora_adapter",
                                        json={"lora_name": name, "lora_path": name},
                                        timeout=aiohttp.ClientTimeout(total=self.cfg["request_timeout_s"])) as r:
            body = await r.read()
            if r.status != 200:
                raise AdapterLoadError(r.status, body, r.headers.get("Content-Type", "application/json"))
        return LoadedAdapter(self, name)

    def _session(self):
        if self.session is None:
            self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self.session

    def _post(self, path, body):
        return self._session().post(self.url + path, data=body, headers={"Content-Type": "application/json"},
                                    timeout=aiohttp.ClientTimeout(total=self.cfg["request_timeout_s"]))

    def post_blocking(self, path, body):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status

    def _gone(self, what):
        """The answer when graft cannot be reached: 503, marked for the ingress to retry."""
        rc = self.proc.poll()
        state = f"exited with {rc}" if rc is not None else "not answering"
        msg = f"graft replica {self.replica_id}: graft {state} ({what})"
        return {"status": 503, "content_type": "application/json", "retry": True,
                "body": _error_body(503, msg, "unavailable_error"), "headers": self.headers}

    async def _adapter(self):
        """(adapter or None, error answer or None) for this request's multiplexed model id."""
        name = serve.get_multiplexed_model_id()
        if not name:
            return None, None
        try:
            return await self.get_adapter(name), None
        except AdapterLoadError as e:
            return None, {"status": e.status, "content_type": e.content_type, "body": e.body,
                          "headers": self.headers}
        except aiohttp.ClientError as e:
            return None, self._gone(f"loading adapter {name}: {e}")

    async def forward(self, path: str, body: bytes):
        """One request to graft; the whole answer as {status, content_type, body, headers}."""
        adapter, err = await self._adapter()
        if err:
            return err
        if adapter:
            adapter.inflight += 1
        try:
            async with self._post(path, body) as r:
                return {"status": r.status, "content_type": r.headers.get("Content-Type", "application/json"),
                        "body": await r.read(), "headers": self.headers}
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            return self._gone(f"{type(e).__name__}: {e}")
        finally:
            if adapter:
                adapter.inflight -= 1

    async def forward_stream(self, path: str, body: bytes):
        """The same as a stream: first a dict {status, content_type, headers}, then the body's chunks
        as graft sends them."""
        adapter, err = await self._adapter()
        if err:
            yield err
            return
        if adapter:
            adapter.inflight += 1
        started = False
        try:
            async with self._post(path, body) as r:
                yield {"status": r.status, "content_type": r.headers.get("Content-Type", "application/json"),
                       "headers": self.headers}
                started = True
                async for chunk in r.content.iter_any():
                    yield chunk
        except (aiohttp.ClientError, asyncio.TimeoutError) as e:
            gone = self._gone(f"{type(e).__name__}: {e}")
            if not started:
                yield gone
            else:
                yield _sse_error(json.loads(gone["body"])["error"]["message"])
        finally:
            if adapter:
                adapter.inflight -= 1

    async def models(self):
        """OpenAI /v1/models: graft's base model entry, then every entry of the adapter root."""
        async with self._session().get(self.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=30)) as r:
            data = await r.json(content_type=None)
        base = [m for m in data.get("data", []) if m.get("owned_by") != "graft"][:1]
        base_id = base[0]["id"] if base else None
        created = base[0].get("created", 0) if base else 0
        adapters = []
        if self.cfg["lora_root"]:
            for name in sorted(os.listdir(self.cfg["lora_root"])):
                if not name.startswith("."):
                    adapters.append({"id": name, "object": "model", "created": created, "owned_by": "graft",
                                     "root": os.path.join(self.cfg["lora_root"], name), "parent": base_id})
        return {"object": "list", "data": base + adapters}

    def info(self):
        """This replica: its id, graft's pid and port, the adapters Ray holds here (LRU order)."""
        wrapper = getattr(self, "__serve_multiplex_wrapper", None)
        return {"replica": self.replica_id, "pid": self.proc.pid, "port": self.port,
                "node": ray.util.get_node_ip_address(), "alive": self.proc.poll() is None,
                "adapters": list(wrapper.models) if wrapper else []}

    async def check_health(self):
        rc = self.proc.poll()
        if rc is not None:
            raise RuntimeError(f"graft serve exited with {rc}: {_tail(self.log_path, 1000)}")

    def __del__(self):
        self.closing = True
        proc = getattr(self, "proc", None)
        if proc is not None:
            stop_process(proc)
        session = getattr(self, "session", None)
        if session is not None and not session.closed:
            try:
                asyncio.get_running_loop().create_task(session.close())
            except RuntimeError:
                pass


def _replica_deployment(cfg):
    """The GraftReplica deployment for `cfg`: ReplicaCore with Ray's multiplexed adapter loader."""

    @serve.deployment(
        name="GraftReplica",
        num_replicas=cfg["replicas"],
        max_ongoing_requests=cfg["max_ongoing_requests"] or 2 * cfg["parallel"],
        health_check_period_s=cfg["health_check_period_s"],
        health_check_timeout_s=cfg["health_check_timeout_s"],
        graceful_shutdown_timeout_s=cfg["graceful_shutdown_timeout_s"],
        graceful_shutdown_wait_loop_s=0.5,
        ray_actor_options={"num_cpus": cfg["replica_num_cpus"]},
    )
    class GraftReplica(ReplicaCore):
        @serve.multiplexed(max_num_models_per_replica=cfg["max_loras"])
        async def get_adapter(self, name: str):
            return await self.load_adapter(name)

    return GraftReplica


def _ingress_deployment(cfg):
    api = FastAPI(title="graft on Ray Serve")
    base_names = base_model_names(cfg)

    def error(status, message, kind):
        return Response(_error_body(status, message, kind), status_code=status, media_type="application/json")

    @serve.deployment(name="GraftIngress", num_replicas=cfg["ingress_replicas"],
                      max_ongoing_requests=cfg["ingress_max_ongoing_requests"], ray_actor_options={"num_cpus": 0})
    @serve.ingress(api)
    class GraftIngress:
        def __init__(self, replicas, cfg):
            self.replicas = replicas
            self.cfg = cfg

        def _handle(self, model):
            if not self.cfg["multiplex"] or model in base_names:
                return self.replicas
            return self.replicas.options(multiplexed_model_id=model)

        async def _proxy(self, request: Request, path: str):
            raw = await request.body()
            try:
                body = json.loads(raw)
            except ValueError as e:
                return error(400, f"the request body is not JSON: {e}", "invalid_request_error")
            if not isinstance(body, dict):
                return error(400, "the request body must be a JSON object", "invalid_request_error")
            model = body.get("model") or ""
            if not isinstance(model, str):
                return error(400, "field 'model' must be a string", "invalid_request_error")
            handle = self._handle(model)
            deadline = time.monotonic() + self.cfg["retry_timeout_s"]
            delay = 0.1
            while True:
                try:
                    if body.get("stream") is True:
                        gen = handle.options(stream=True).forward_stream.remote(path, raw)
                        head = await gen.__anext__()
                        if head.get("retry") and time.monotonic() < deadline:
                            gen.cancel()
                        else:
                            return self._stream_response(head, gen)
                    else:
                        res = await handle.forward.remote(path, raw)
                        if not (res.get("retry") and time.monotonic() < deadline):
                            return Response(res["body"], status_code=res["status"], media_type=res["content_type"],
                                            headers=res["headers"])
                except _RETRYABLE_RAY_ERRORS as e:
                    if time.monotonic() >= deadline:
                        return error(503, f"no graft replica answered: {type(e).__name__}: {e}", "unavailable_error")
                await asyncio.sleep(delay)
                delay = min(1.0, delay * 2)

        def _stream_response(self, head, gen):
            if head.get("body") is not None:  # the replica's own answer (graft unreachable, a refused adapter)
                return Response(head["body"], status_code=head["status"], media_type=head["content_type"],
                                headers=head["headers"])
            if head["status"] != 200 or "text/event-stream" not in head["content_type"]:
                async def whole():  # graft's error answer: passed on as it comes
                    async for chunk in gen:
                        yield chunk
                return StreamingResponse(whole(), status_code=head["status"], media_type=head["content_type"],
                                         headers=head["headers"])

            async def chunks():
                try:
                    async for chunk in gen:
                        yield chunk
                except _RETRYABLE_RAY_ERRORS as e:
                    yield _sse_error(f"the graft replica died mid-stream: {type(e).__name__}")

            return StreamingResponse(chunks(), status_code=200, media_type=head["content_type"],
                                     headers={**head["headers"], "Cache-Control": "no-cache"})

        @api.post("/v1/completions")
        async def completions(self, request: Request):
            return await self._proxy(request, "/v1/completions")

        @api.post("/v1/chat/completions")
        async def chat_completions(self, request: Request):
            return await self._proxy(request, "/v1/chat/completions")

        @api.get("/v1/models")
        async def models(self):
            try:
                return JSONResponse(await self.replicas.models.remote())
            except _RETRYABLE_RAY_ERRORS as e:
                return error(503, f"no graft replica answered: {type(e).__name__}", "unavailable_error")

        @api.get("/health")
        async def health(self):
            return {"status": "ok"}

    return GraftIngress


def build_app(args=None):
    """The application (a Serve app builder: `serve run deploy.ray.graft_app:build_app key=value ...`)."""
    cfg = make_config(args)
    if __name__ != "__main__":
        # Workers unpickle the deployments without importing this file (a cluster's other nodes
        # need not have it).
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    replicas = _replica_deployment(cfg).bind(cfg)
    return _ingress_deployment(cfg).bind(replicas, cfg)


# `serve run deploy.ray.graft_app:app`: configured by GRAFT_BIN, GRAFT_MODEL, GRAFT_ALIAS,
# GRAFT_LORA_ROOT, GRAFT_REPLICAS and GRAFT_MAX_LORAS.
app = build_app()


def main():
    ap = argparse.ArgumentParser(description="graft replicas behind Ray Serve (multiplexed LoRA routing)")
    ap.add_argument("--model", default=DEFAULTS["model"])
    ap.add_argument("--graft", default=DEFAULTS["graft"], help="the graft binary")
    ap.add_argument("--lora-root", default=DEFAULTS["lora_root"], help="adapters: <root>/<name> is model <name>")
    ap.add_argument("--alias", default="")
    ap.add_argument("--replicas", type=int, default=DEFAULTS["replicas"])
    ap.add_argument("--max-loras", type=int, default=DEFAULTS["max_loras"],
                    help="adapters per replica: Ray's max_num_models_per_replica and graft's --max-loras-resident")
    ap.add_argument("--parallel", type=int, default=DEFAULTS["parallel"])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--ctx-size", type=int, default=0)
    ap.add_argument("--graft-args", default="", help="more `graft serve` options")
    ap.add_argument("--plain", action="store_true", help="no multiplexed routing (graft --lora-dir resolves models)")
    ap.add_argument("--debug", action="store_true", help="answer x-graft-pid / x-graft-port too")
    ap.add_argument("--host", default="127.0.0.1", help="the Serve HTTP proxy's address")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--address", default=None, help="a running Ray cluster (e.g. auto); default: start one here")
    ap.add_argument("--num-cpus", type=int, default=None, help="CPUs of the local Ray instance")
    a = ap.parse_args()
    cfg = {"model": a.model, "graft": a.graft, "lora_root": a.lora_root, "alias": a.alias, "replicas": a.replicas,
           "max_loras": a.max_loras, "parallel": a.parallel, "threads": a.threads, "ctx_size": a.ctx_size,
           "graft_args": a.graft_args, "multiplex": not a.plain, "debug": a.debug}
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if a.address:
        ray.init(address=a.address)
    else:
        ray.init(num_cpus=a.num_cpus, include_dashboard=False)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        serve.start(http_options={"host": a.host, "port": a.port})
        serve.run(build_app(cfg), name="graft", route_prefix="/")
        print(f"graft_app: ready on http://{a.host}:{a.port} ({a.replicas} replicas, "
              f"{'multiplexed' if not a.plain else 'plain'} routing)", flush=True)
        stop.wait()
    finally:
        serve.shutdown()
        ray.shutdown()


if __name__ == "__main__":
    main()
