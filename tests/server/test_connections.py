"""HTTP connections of `graft serve` (server/connections.h): a fixed set of worker threads, with
connections parked between requests. A thousand idle keep-alive sockets (silent ones and ones holding
half a request line) cost no thread and are still open while real requests are answered; a parked
connection's next request, sent later, byte by byte, or pipelined behind another, is answered; idle
and stalled connections are closed after --timeout-keep-alive and the read timeout."""
import json
import resource
import socket
import time

import pytest
import requests

from conftest import Server

PROMPT = "The capital of France is"


def threads_of(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("Threads:")))


def still_open(sock):
    """True while the server has neither closed nor answered the socket."""
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) is None
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


def answer(sock, n=1):
    """Reads n whole HTTP responses (Content-Length bodies) from sock; returns their status lines."""
    sock.settimeout(60)
    got, lines = b"", []
    while len(lines) < n:
        head_end = got.find(b"\r\n\r\n")
        if head_end >= 0:
            head = got[:head_end].decode("latin-1")
            length = int(next(h.split(":")[1] for h in head.split("\r\n") if h.lower().startswith("content-length:")))
            if len(got) >= head_end + 4 + length:
                lines.append(head.split("\r\n")[0])
                got = got[head_end + 4 + length:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"closed after {len(lines)} of {n} answers"
        got += chunk
    return lines


HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def srv():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1400:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    s = Server("--timeout-keep-alive", "60", "--timeout", "60")
    yield s
    assert s.stop() == 0, s.output()


def test_a_thousand_idle_connections_cost_no_thread(srv):
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < 1200:
        pytest.skip("needs 1,200 open files (ulimit -n)")
    threads = threads_of(srv.proc.pid)
    idle = []
    for i in range(1000):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        if i % 2:
            s.sendall(b"GET /health HT")  # half a request line, left hanging
        idle.append(s)
    try:
        with requests.Session() as sess:
            for _ in range(3):
                r = sess.post(srv.url + "/completion", json={"prompt": PROMPT, "n_predict": 4, "temperature": 0},
                              timeout=60)
                assert r.status_code == 200, r.text
            assert sess.get(srv.url + "/health", timeout=10).status_code == 200
        # Workers are a fixed set: the thousand sockets added none (graft had 2 x (4 + 64) + 1032 before).
        assert threads_of(srv.proc.pid) == threads, "idle connections started threads"
        assert threads < 150, threads
        assert sum(still_open(s) for s in idle) == 1000, "idle connections were closed within the timeouts"
        # A parked connection is answered when its request arrives: the rest of a started one, or a
        # whole one on a silent one.
        idle[1].sendall(b"TP/1.1\r\nHost: x\r\n\r\n")
        idle[0].sendall(HEALTH)
        assert answer(idle[1]) == ["HTTP/1.1 200 OK"] and answer(idle[0]) == ["HTTP/1.1 200 OK"]
    finally:
        for s in idle:
            s.close()


def test_keep_alive_pipelining_and_slow_requests(srv):
    s = socket.create_connection(("127.0.0.1", srv.port))
    try:
        s.sendall(HEALTH + HEALTH + HEALTH)  # pipelined: three answers in order on one connection
        assert answer(s, 3) == ["HTTP/1.1 200 OK"] * 3
        body = json.dumps({"prompt": PROMPT, "n_predict": 2, "temperature": 0}).encode()
        req = (b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
        for i in range(0, len(req), 7):  # byte by byte, as a slow client (the worker never waits on it)
            s.sendall(req[i:i + 7])
            time.sleep(0.002)
        assert answer(s) == ["HTTP/1.1 200 OK"]
        time.sleep(0.5)  # the same connection later, after being parked idle
        s.sendall(HEALTH)
        assert answer(s) == ["HTTP/1.1 200 OK"]
    finally:
        s.close()
    # Expect: 100-continue (curl's way for large bodies) goes to a worker at its head.
    big = {"prompt": PROMPT, "n_predict": 1, "temperature": 0, "pad": "x" * 1_200_000}
    r = requests.post(srv.url + "/completion", data=json.dumps(big),
                      headers={"Expect": "100-continue", "Content-Type": "application/json"}, timeout=60)
    assert r.status_code == 200, r.text


def test_idle_and_stalled_connections_are_closed():
    s = Server("--timeout-keep-alive", "1", "--timeout", "4")
    try:
        silent = socket.create_connection(("127.0.0.1", s.port))
        stalled = socket.create_connection(("127.0.0.1", s.port))
        stalled.sendall(b"GET /health HT")
        used = socket.create_connection(("127.0.0.1", s.port))
        used.sendall(HEALTH)
        assert answer(used) == ["HTTP/1.1 200 OK"]
        time.sleep(0.5)
        assert still_open(silent) and still_open(stalled) and still_open(used)
        time.sleep(1.5)  # past --timeout-keep-alive 1: the idle ones are closed, the started request not yet
        assert not still_open(silent) and not still_open(used) and still_open(stalled)
        time.sleep(3)  # past the read timeout (min(--timeout, 10) = 4 s since its last byte)
        assert not still_open(stalled)
        assert requests.get(s.url + "/health", timeout=10).status_code == 200
    finally:
        assert s.stop() == 0, s.output()
