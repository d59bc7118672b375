#!/usr/bin/env bash
# ctest entry for the server's end-to-end tests: pytest from the project's virtual environment
# (.venv, made by `make pyenv` with requests, openai and pytest), on the given graft binary.
# Usage: run_server_tests.sh GRAFT_BINARY SOURCE_DIR [PYTEST_ARGS...] (default: every test here)
set -eu
export GRAFT_BIN=$1 GRAFT_SRC=$2
PY=$GRAFT_SRC/.venv/bin/python
if [ ! -x "$PY" ]; then
  echo "missing $PY: run 'make pyenv' (make test does)" >&2
  exit 1
fi
cd "$GRAFT_SRC/tests/server"
shift 2
exec "$PY" -m pytest -q -x -p no:cacheprovider "${@:-.}"
