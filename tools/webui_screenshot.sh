#!/usr/bin/env bash
# Retakes docs/webui.png, the web page's picture in README.md and docs/SERVER.md: the browser test's
# base-vs-adapted step (tests/server/test_webui.py, headless Chromium) with longer answers, its
# screenshot reduced to a 128-colour PNG.
# Usage: tools/webui_screenshot.sh [GRAFT_BINARY]   (default build/graft; needs `make pyenv`, chromium)
set -eu
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export GRAFT_BIN=$(realpath "${1:-build/graft}") GRAFT_SRC=$PWD
export GRAFT_REQUIRE_BROWSER=1 GRAFT_WEBUI_MAX_TOKENS=64 GRAFT_WEBUI_SCREENSHOT=$PWD/docs/webui.png
cd tests/server
"$PY" -m pytest -q -x -p no:cacheprovider "test_webui.py::test_compare_mode_shows_base_and_adapted_side_by_side"
ls -l "$GRAFT_WEBUI_SCREENSHOT"
