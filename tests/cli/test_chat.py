"""graft chat driven through a pseudo-terminal, as a person types into it, on the demo model with the
pirate adapter: each reply equals `graft generate --chat` on the same conversation (greedy), the
adapter's live scale changes the next reply, /save writes the conversation, /reset forgets it,
Ctrl-D ends with exit 0.

Run by ctest (cli_chat) as: .venv/bin/python -m pytest tests/cli/test_chat.py, with GRAFT_BIN and
GRAFT_SRC set; skipped without the demo model (`make models`).
"""
import json
import os
import pty
import select
import subprocess
import time

import pytest

GRAFT = os.environ["GRAFT_BIN"]
SRC = os.environ["GRAFT_SRC"]
MODEL = os.path.join(SRC, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
PIRATE = os.path.join(SRC, "demo", "adapters", "pirate-peft")
N = "12"

pytestmark = pytest.mark.skipif(not os.path.exists(MODEL), reason="the demo model: run `make models`")


class Terminal:
    """graft chat on a pseudo-terminal: stdin and stdout are the terminal, stderr a pipe."""

    def __init__(self, *args):
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen([GRAFT, "chat", "-m", MODEL, "--temp", "0", "-n", N, *args], stdin=slave,
                                     stdout=slave, stderr=subprocess.PIPE, close_fds=True)
        os.close(slave)
        self.seen = ""

    def read_until_prompt(self, timeout=120):
        """What the terminal shows up to the next "> " prompt (the prompt left out)."""
        deadline = time.time() + timeout
        while not self.seen.endswith("> "):
            assert time.time() < deadline, f"no prompt; the terminal shows: {self.seen!r}"
            if select.select([self.master], [], [], 1)[0]:
                self.seen += os.read(self.master, 4096).decode(errors="replace")
        out, self.seen = self.seen[:-2], ""
        return out.replace("\r\n", "\n")

    def say(self, line):
        os.write(self.master, (line + "\n").encode())
        return self.read_until_prompt().split("\n", 1)[1]  # the terminal echoes the line first

    def end(self):
        os.write(self.master, b"\x04")  # Ctrl-D on an empty line: end of input
        rc = self.proc.wait(timeout=60)
        err = self.proc.stderr.read().decode()
        os.close(self.master)
        return rc, err


def generate(question, *args):
    """The greedy reply of `graft generate --chat` to a first question."""
    p = subprocess.run([GRAFT, "generate", "-m", MODEL, "--chat", "-p", question, "--temp", "0", "-n", N, *args],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_chat_in_a_terminal(tmp_path):
    t = Terminal("--lora", PIRATE)
    t.read_until_prompt()
    question = "What is the capital of France?"
    pirate = t.say(question)
    assert pirate == generate(question, "--lora", PIRATE), pirate
    t.say("/adapters")  # (the list goes to stderr, checked at the end)
    t.say("/reset")
    t.say("/adapter pirate-peft 0")
    plain = t.say(question)
    assert plain == generate(question), plain
    assert plain != pirate
    t.say("/adapter nope 1")
    saved = tmp_path / "chat.json"
    t.say(f"/save {saved}")
    rc, err = t.end()
    assert rc == 0, err
    doc = json.loads(saved.read_text())
    assert doc["adapters"] == {"pirate-peft": 0}
    assert [m["role"] for m in doc["messages"]] == ["user", "assistant"]
    assert doc["messages"][0]["content"] == question and doc["messages"][1]["content"] == plain.rstrip("\n")
    assert "pirate-peft" in err and "(conversation cleared)" in err and "no adapter 'nope'" in err, err


def test_chat_refuses_a_model_without_a_template():
    tiny = os.path.join(SRC, "tests", "fixtures", "models", "llama_f32")
    p = subprocess.run([GRAFT, "chat", "-m", tiny], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "has no chat template" in p.stderr, p.stderr
