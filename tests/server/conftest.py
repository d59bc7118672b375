"""Starts real `graft serve` processes on free loopback ports for the end-to-end tests.

GRAFT_BIN (the binary) and GRAFT_SRC (the source tree, for the demo model and adapters) come from
tests/server/run_server_tests.sh, which ctest runs with the Release and the ASan+UBSan binaries.
"""
import json
import os
import signal
import socket
import subprocess
import time

import pytest
import requests

SRC = os.environ.get("GRAFT_SRC", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BIN = os.environ.get("GRAFT_BIN", os.path.join(SRC, "build", "graft"))
MODEL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PEFT = os.path.join(SRC, "demo", "adapters", "pirate-peft")
MLX = os.path.join(SRC, "demo", "adapters", "pirate-mlx")
# Under ASan a load takes several times longer; generous, the tests never wait on it needlessly.
START_TIMEOUT = float(os.environ.get("GRAFT_START_TIMEOUT", "240"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def open_raw_stream(port, body):
    """A streamed POST /completion on a bare socket (so a test can drop it mid-stream), read until its
    first server-sent event; returns the socket."""
    sock = socket.create_connection(("127.0.0.1", port))
    data = json.dumps(body)
    sock.sendall(f"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n{data}".encode())
    got = b""
    while b"data: " not in got:
        chunk = sock.recv(4096)
        assert chunk, "the stream ended before its first event"
        got += chunk
    return sock


class Server:
    def __init__(self, *args, api_key=None, model=MODEL):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.api_key = api_key
        self.log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"graft-serve-{self.port}.log"), "w+")
        cmd = [BIN, "serve", "-m", model, "--port", str(self.port), "--threads", "2", *args]
        if api_key:
            cmd += ["--api-key", api_key]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + START_TIMEOUT
        saw_loading = False
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"graft serve exited with {self.proc.returncode}: {self.output()}")
            try:
                r = requests.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    break
                if r.status_code == 503:
                    saw_loading = r.json()["error"]["type"] == "unavailable_error"
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        else:
            raise RuntimeError("graft serve did not become ready: " + self.output())
        self.saw_loading = saw_loading

    def headers(self):
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def get(self, path, **kw):
        return requests.get(self.url + path, headers=self.headers(), timeout=300, **kw)

    def post(self, path, body=None, **kw):
        if body is not None:
            kw["json"] = body
        return requests.post(self.url + path, headers=self.headers(), timeout=300, **kw)

    def complete(self, prompt, n=16, **fields):
        r = self.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, **fields})
        assert r.status_code == 200, r.text
        return r.json()

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        out = self.output()
        assert "Sanitizer" not in out and "runtime error" not in out, out
        return self.proc.returncode


@pytest.fixture(scope="session")
def server():
    """Two unfused adapters (ids 0: PEFT pirate, 1: mlx pirate), 8 slots, metrics, small body limit."""
    s = Server("--lora", PEFT, "--lora", MLX, "--parallel", "8", "--ctx-size", "4096", "--metrics",
               "--body-limit", "65536", "--alias", "smollm2-test")
    yield s
    assert s.stop() == 0, s.output()
