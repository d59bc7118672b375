"""The progress bar (src/cli/progress.h) as a person sees it: on a terminal, once the work has taken
longer than GRAFT_PROGRESS_AFTER_MS (default 1000; 0 here), a one-line bar that reaches 100 % and is
cleared before the command's summary line; never when stderr is not a terminal (logs, pipes). Driven
through `graft convert` on the tiny committed fixtures (no demo model needed).

Run by ctest (cli_progress) as: .venv/bin/python -m pytest tests/cli/test_progress.py, with GRAFT_BIN
and GRAFT_SRC set.
"""
import os
import pty
import subprocess

GRAFT = os.environ["GRAFT_BIN"]
SRC = os.environ["GRAFT_SRC"]
BASE = os.path.join(SRC, "tests", "fixtures", "models", "llama_f32")
LORA = os.path.join(SRC, "tests", "fixtures", "engine_adapters", "llama_f32", "peft_lora")


def convert(out, tty, after_ms):
    """graft convert's stderr, on a pseudo-terminal or a pipe."""
    cmd = [GRAFT, "convert", "--base", BASE, "--adapter", LORA, "--out", out]
    env = dict(os.environ, GRAFT_PROGRESS_AFTER_MS=str(after_ms))
    if not tty:
        p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        assert p.returncode == 0, p.stderr
        return p.stderr.decode()
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=slave, close_fds=True)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    assert p.wait(timeout=120) == 0, seen
    return seen.decode()


def test_bar_on_a_terminal_reaches_100_and_is_cleared(tmp_path):
    err = convert(str(tmp_path / "a.gguf"), tty=True, after_ms=0)
    assert "writing " in err and "] 100%" in err, repr(err)
    bar_end = err.rindex("] 100%")
    summary = err.index("wrote ")
    assert bar_end < summary and "\r\x1b[K" in err[bar_end:summary], repr(err)


def test_no_bar_for_quick_work_or_without_a_terminal(tmp_path):
    assert "[" not in convert(str(tmp_path / "b.gguf"), tty=True, after_ms=60000).split("wrote ")[0]
    err = convert(str(tmp_path / "c.gguf"), tty=False, after_ms=0)
    assert "100%" not in err and "\x1b[K" not in err and err.startswith("wrote "), repr(err)
