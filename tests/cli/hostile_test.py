#!/usr/bin/env python3
"""Hostile inputs through the graft binary (tools/gen_hostile_inputs.py writes them): each must end
with the exit code of its error kind, one message naming the file and field, no signal, no output on
stdout, within a time limit and under a memory limit (prlimit --as, except under ASan, whose shadow
memory needs the address space; there the peak RSS is checked instead).

Usage: hostile_test.py GRAFT_BINARY SOURCE_DIR [--sanitized]
"""
import os
import resource
import subprocess
import sys
import tempfile
import time

SRC = os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(SRC, "tools"))
import gen_hostile_inputs  # noqa: E402

GRAFT = os.path.abspath(sys.argv[1])
SANITIZED = "--sanitized" in sys.argv[3:]
MEMORY_LIMIT = 1 << 30  # the acceptance: under 1 GiB
# The acceptance is 2 s on a quiet machine; CI and shared machines are slower, ASan ~3x more.
TIME_LIMIT = 60.0 if SANITIZED else 10.0
SLOW_WARNING = 2.0


def run(case, tmp):
    argv = [GRAFT, *case.argv]
    if not SANITIZED:
        argv = ["prlimit", f"--as={MEMORY_LIMIT}", "--", *argv]
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            cwd=tmp, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIME_LIMIT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        return [f"did not finish within {TIME_LIMIT:.0f} s"], time.monotonic() - t0
    elapsed = time.monotonic() - t0
    err = err.decode(errors="replace")
    problems = []
    if proc.returncode < 0:
        problems.append(f"killed by signal {-proc.returncode}")
    elif proc.returncode not in case.codes:
        problems.append(f"exit code {proc.returncode}, expected {' or '.join(map(str, case.codes))}")
    for fragment in case.fragment:
        if fragment not in err:
            problems.append(f"stderr lacks '{fragment}'")
    if "\nerror: " not in "\n" + err and "--help" not in err:  # info lines (load summary) may come first
        problems.append("stderr has no 'error: ' line")
    if len(err) > 20000:  # the CLI cuts messages at 16 KiB
        problems.append(f"message is {len(err)} bytes (input echoed unbounded?)")
    if out:
        problems.append(f"wrote {len(out)} bytes to stdout")
    if "Sanitizer" in err or "runtime error" in err or "terminate called" in err:
        problems.append("sanitizer report or terminate")
    if problems:
        problems.append("stderr: " + err[:600])
    return problems, elapsed


def main():
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        cases = gen_hostile_inputs.make_cases(os.path.join(tmp, "inputs"), SRC)
        start_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        for case in cases:
            problems, elapsed = run(case, tmp)
            note = " (slow)" if elapsed > SLOW_WARNING else ""
            if problems:
                failures += 1
                print(f"FAIL {case.name} ({elapsed:.2f} s): " + "; ".join(problems))
            else:
                print(f"ok   {case.name} ({elapsed:.2f} s){note}")
        # ru_maxrss of children is the largest of any child so far.
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        if SANITIZED is False and peak > MEMORY_LIMIT:
            failures += 1
            print(f"FAIL peak RSS {peak >> 20} MiB exceeds {MEMORY_LIMIT >> 20} MiB")
        print(f"{len(cases)} cases, {failures} failed; largest child RSS {peak >> 20} MiB (start {start_rss >> 10} MiB)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
