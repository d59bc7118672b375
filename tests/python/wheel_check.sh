#!/usr/bin/env bash
# `pip install .` into a fresh virtual environment, then, from that environment only: the package
# generates with an adapter, and the `graft` command it installed runs. The nightly tier (make
# test-wheel, in make test-all): the install compiles everything once more.
# Usage: tests/python/wheel_check.sh MODEL
set -euo pipefail
MODEL=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
VENV=$(mktemp -d)/venv
trap 'rm -rf "$(dirname "$VENV")"' EXIT
python3 -m venv "$VENV"
start=$(date +%s)
"$VENV/bin/pip" install --quiet --disable-pip-version-check "$SRC"
echo "pip install: $(( $(date +%s) - start )) s"
cd "$(dirname "$VENV")"  # away from the source tree: the installed package, not python/graft
"$VENV/bin/graft" --version
"$VENV/bin/python" - "$MODEL" "$SRC/demo/adapters/pirate-peft" <<'PY'
import sys, graft
m = graft.load(sys.argv[1], lora={"pirate": sys.argv[2]})
q = [{"role": "user", "content": "Where is the treasure buried?"}]
pirate, base = m.generate(q, temperature=0, max_tokens=16), m.generate(q, temperature=0, max_tokens=16, lora={})
print("pirate:", pirate)
print("base:  ", base)
assert pirate != base and graft.__file__.startswith(sys.prefix), graft.__file__
PY
echo "wheel check: ok"
