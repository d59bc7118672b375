#!/usr/bin/env python3
"""A Dynamo worker (ai-dynamo >= 1.6, the unified `LLMEngine` backend) that fronts one `graft serve`.

Dynamo's frontend templates and tokenizes each request, its KV router picks a worker, and the worker's
generate() sends the token ids to graft's `POST /completion` (`prompt` = the ids, `stream: true`) and
streams graft's `tokens` back. With graft's `--kv-events`, the worker relays graft's vLLM-format
KV events to the router (a `ZmqSource`), so the router knows which replica holds which prefix.

The worker starts its own graft (`--graft-bin`, `--model`, `--graft-arg ...`) or fronts a running
one (`--graft-url`, with `--kv-events` naming that graft's PUB endpoint). The frontend needs the
model's tokenizer as Hugging Face files: `--hf-dir`, or else exported from the GGUF (gguf_hf.py).
Adapters: `--lora NAME` (or `--lora auto`: every adapter graft lists) registers NAME in discovery as a
LoRA of the base, so `model: NAME` reaches only workers that hold it; the request then goes to graft
with `model: NAME` (graft's adapter by name).

  python graft_worker.py --graft-bin build/graft --model models/SmolLM2-135M-Instruct.Q4_1.gguf \
      --discovery-backend file --graft-arg=--threads --graft-arg=1
See deploy/dynamo/README.md for the frontend and a three-replica launch.
"""
import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import aiohttp
from dynamo.common.backend import EngineConfig, LLMEngine, LlmRegistration, WorkerConfig
from dynamo.common.backend.publisher import ZmqSource
from dynamo.common.backend.run import run
from dynamo.llm import ModelInput, ModelType, WorkerType, register_model, unregister_model
from dynamo.llm.exceptions import EngineShutdown, InvalidArgument, StreamIncomplete

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_hf  # noqa: E402

log = logging.getLogger("graft_worker")
SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p", "seed": "seed",
            "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty",
            "repetition_penalty": "repeat_penalty"}
FINISH = {"eos": "stop", "word": "stop", "limit": "length", "none": "cancelled"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class GraftEngine(LLMEngine):
    def __init__(self, args):
        self.args = args
        self.url = args.graft_url.rstrip("/") if args.graft_url else None
        self.proc = None
        self.session = None
        self.tmp = None
        self.kv_endpoint = None if args.kv_events == "none" else args.kv_events
        self.base = None  # graft's base model id (its /v1/models first entry)
        self.served = args.served_model_name
        self.hf_dir = args.hf_dir
        self.loras = []
        self.watchdog = None
        self.endpoint = None

    @classmethod
    async def from_args(cls, argv=None):
        p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        p.add_argument("--graft-url", help="a running graft serve (else one is started)")
        p.add_argument("--graft-bin", default=os.environ.get("GRAFT_BIN") or shutil.which("graft") or "graft")
        p.add_argument("--model", help="the GGUF (graft's -m; also where the tokenizer comes from)")
        p.add_argument("--graft-port", type=int, default=0, help="0: a free loopback port")
        p.add_argument("--graft-arg", action="append", default=[], help="passed to graft serve (repeat)")
        p.add_argument("--graft-log", help="graft's output goes here (default: this process's stderr)")
        p.add_argument("--hf-dir", help="Hugging Face tokenizer/config files (default: exported from --model)")
        p.add_argument("--served-model-name", help="default: graft's base id (its /v1/models)")
        p.add_argument("--kv-events", default="auto",
                       help="graft's KV-event PUB endpoint; auto: an ipc:// one for the graft started here "
                            "(none with --graft-url); none: no events (the router predicts)")
        p.add_argument("--kv-block-size", type=int, default=16)
        p.add_argument("--lora", action="append", default=[],
                       help="an adapter name graft serves, registered in discovery (repeat); auto: all")
        p.add_argument("--namespace", default=os.environ.get("DYN_NAMESPACE", "dynamo"))
        p.add_argument("--component", default="graft")
        p.add_argument("--endpoint", default="generate")
        p.add_argument("--discovery-backend", default=os.environ.get("DYN_DISCOVERY_BACKEND", "file"))
        p.add_argument("--request-plane", default=os.environ.get("DYN_REQUEST_PLANE", "tcp"))
        p.add_argument("--event-plane", default=os.environ.get("DYN_EVENT_PLANE", "zmq"))
        args = p.parse_args(argv)
        if not args.graft_url and not args.model:
            p.error("--model is required unless --graft-url is given")
        if not args.hf_dir and not args.model:
            p.error("--hf-dir or --model is needed for the frontend's tokenizer")
        if args.kv_events == "auto" and args.graft_url:
            args.kv_events = "none"
        engine = cls(args)
        if not args.hf_dir:
            engine.hf_dir = gguf_hf.cached_export(args.model)
        # The worker's model path is the tokenizer directory; the name the frontend lists is set in start().
        cfg = WorkerConfig(namespace=args.namespace, component=args.component, endpoint=args.endpoint,
                           model_name=engine.hf_dir, served_model_name=args.served_model_name,
                           model_input=ModelInput.Tokens, discovery_backend=args.discovery_backend,
                           request_plane=args.request_plane, event_plane=args.event_plane,
                           enable_kv_routing=True)
        return engine, cfg

    def _start_graft(self):
        a = self.args
        port = a.graft_port or free_port()
        self.url = f"http://127.0.0.1:{port}"
        cmd = [a.graft_bin, "serve", "-m", a.model, "--host", "127.0.0.1", "--port", str(port), *a.graft_arg]
        if self.kv_endpoint == "auto":
            self.tmp = tempfile.mkdtemp(prefix="graft-dynamo-")
            self.kv_endpoint = f"ipc://{self.tmp}/kv-events"  # graft binds an ipc:// endpoint
        if self.kv_endpoint:
            cmd += ["--kv-events", self.kv_endpoint, "--kv-block-size", str(a.kv_block_size)]
        out = open(a.graft_log, "ab") if a.graft_log else None
        log.info("starting %s", " ".join(cmd))
        self.proc = subprocess.Popen(cmd, stdout=out or sys.stderr, stderr=subprocess.STDOUT)

    async def _get(self, path):
        async with self.session.get(self.url + path, timeout=aiohttp.ClientTimeout(total=10)) as r:
            return r.status, (await r.json(content_type=None) if r.status == 200 else await r.text())

    async def start(self, worker_id):
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        if not self.url:
            self._start_graft()
        deadline = time.monotonic() + 600
        while True:  # graft answers 503 while it loads
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"graft serve exited with {self.proc.returncode}")
            try:
                if (await self._get("/health"))[0] == 200:
                    break
            except (aiohttp.ClientError, asyncio.TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"graft at {self.url} did not become ready")
            await asyncio.sleep(0.1)
        models = (await self._get("/v1/models"))[1]["data"]
        props = (await self._get("/props"))[1]
        self.base = models[0]["id"]
        self.served = self.served or self.base
        graft_loras = [m["id"] for m in models[1:]]
        self.loras = graft_loras if "auto" in self.args.lora else self.args.lora
        n_ctx = props["default_generation_settings"]["n_ctx"]
        slots = props.get("total_slots", 1)
        bs = self.args.kv_block_size
        self.watchdog = asyncio.get_running_loop().create_task(self._watch())
        log.info("graft at %s: base %s, adapters %s, %d slots of %d tokens, KV events %s", self.url, self.base,
                 graft_loras, slots, n_ctx, self.kv_endpoint)
        return EngineConfig(model=self.hf_dir, served_model_name=self.served,
                            llm=LlmRegistration(context_length=n_ctx, kv_cache_block_size=bs,
                                                total_kv_blocks=slots * n_ctx // bs, max_num_seqs=slots,
                                                max_gpu_lora_count=len(self.loras) or None))

    async def _watch(self):
        # A worker whose graft is gone leaves discovery (SIGTERM: the Rust Worker unregisters, drains
        # and exits), so the router stops choosing it; requests caught in between fail over by the
        # frontend's --migration-limit.
        misses = 0
        while True:
            await asyncio.sleep(1.0)
            if self.proc is not None and self.proc.poll() is not None:
                misses = 3
            else:
                try:
                    misses = 0 if (await self._get("/health"))[0] == 200 else misses + 1
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    misses += 1
            if misses >= 3:
                log.error("graft at %s is gone: this worker leaves", self.url)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    async def kv_event_sources(self):
        return [ZmqSource(endpoint=self.kv_endpoint)] if self.kv_endpoint else []

    async def on_endpoint_ready(self, endpoint):
        self.endpoint = endpoint
        for name in self.loras:
            await self._register_lora(name)

    async def _register_lora(self, name):
        # An adapter is a model card of its own on this endpoint, as Dynamo's vLLM worker registers a
        # loaded LoRA (lora_name + base_model_path): the frontend lists it and, with DYN_LORA_ENABLED,
        # sends its requests only to the workers that registered it.
        await register_model(ModelInput.Tokens, ModelType.Chat | ModelType.Completions, self.endpoint, self.hf_dir,
                             name, worker_type=WorkerType.Aggregated, kv_cache_block_size=self.args.kv_block_size,
                             user_data={"lora_adapter": True}, lora_name=name, base_model_path=self.hf_dir,
                             ignore_weights=True)
        log.info("registered adapter %s", name)

    def supported_updates(self):
        return {"load_lora", "unload_lora"}

    async def engine_update(self, update, body):
        """POST /engine/update/load_lora {"lora_name", "lora_path"} (or unload_lora {"lora_name"}) on the
        worker's system port (DYN_SYSTEM_PORT): graft's vLLM route, then the discovery card."""
        name = body.get("lora_name")
        if not isinstance(name, str) or not name:
            return {"status": "error", "message": "lora_name is required"}
        route = "/v1/load_lora_adapter" if update == "load_lora" else "/v1/unload_lora_adapter"
        async with self.session.post(self.url + route, json=body) as r:
            text = await r.text()
        if r.status != 200:
            return {"status": "error", "message": f"graft: {r.status} {text}"}
        if update == "load_lora":
            await self._register_lora(name)
            self.loras.append(name)
        else:
            await unregister_model(self.endpoint, lora_name=name)
            self.loras = [n for n in self.loras if n != name]
        return {"status": "success", "message": text, "lora_name": name}

    def _body(self, request):
        so = request.get("sampling_options") or {}
        sc = request.get("stop_conditions") or {}
        body = {"prompt": list(request["token_ids"]), "stream": True, "cache_prompt": True,
                "n_predict": sc.get("max_tokens") if sc.get("max_tokens") is not None else -1}
        for key, graft_key in SAMPLING.items():
            if so.get(key) is not None:
                body[graft_key] = so[key]
        if body.get("top_k") is not None and body["top_k"] < 0:
            body["top_k"] = 0
        if body.get("temperature") is None:
            body["temperature"] = 1.0  # OpenAI's default (graft's native route defaults to 0.8)
        if sc.get("ignore_eos"):
            body["ignore_eos"] = True
        model = request.get("model")
        if model and model not in (self.served, self.base):
            body["model"] = model  # an adapter: graft applies it by name
        return body

    async def generate(self, request, context):
        body = self._body(request)
        stop_ids = set(((request.get("stop_conditions") or {}).get("stop_token_ids")) or [])
        n_out = 0
        try:
            r = await self.session.post(self.url + "/completion", json=body)
        except aiohttp.ClientConnectionError as e:
            raise EngineShutdown(f"graft at {self.url}: {e}") from e
        async with r:
            if r.status != 200:
                text = (await r.text())[:500]
                raise (InvalidArgument if 400 <= r.status < 500 else EngineShutdown)(f"graft: {r.status} {text}")
            try:
                async for raw in r.content:
                    line = raw.strip()
                    if not line.startswith(b"data: "):
                        continue
                    ev = json.loads(line[6:])
                    toks = ev.get("tokens") or []
                    if stop_ids and any(t in stop_ids for t in toks):  # graft has no stop-token list
                        toks = toks[: next(i for i, t in enumerate(toks) if t in stop_ids) + 1]
                        n_out += len(toks)
                        yield {"token_ids": toks, "index": 0, "finish_reason": "stop",
                               "completion_usage": usage(len(body["prompt"]), n_out, None)}
                        return
                    n_out += len(toks)
                    if not ev.get("stop"):
                        if toks:
                            yield {"token_ids": toks, "index": 0}
                        continue
                    yield {"token_ids": toks, "index": 0, "finish_reason": FINISH.get(ev.get("stop_type"), "stop"),
                           "completion_usage": usage(ev.get("tokens_evaluated", len(body["prompt"])),
                                                     ev.get("tokens_predicted", n_out), ev.get("tokens_cached"))}
                    return
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as e:
                raise StreamIncomplete(f"graft at {self.url}: {e}") from e
        raise StreamIncomplete("graft's stream ended without its final event")

    async def cleanup(self):
        if self.watchdog is not None:
            self.watchdog.cancel()
            self.watchdog = None
        if self.session is not None:
            await self.session.close()
            self.session = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None


def usage(prompt, completion, cached):
    u = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached is not None:
        u["prompt_tokens_details"] = {"cached_tokens": cached}
    return u


if __name__ == "__main__":
    run(GraftEngine)
