#!/usr/bin/env bash
# A short side-by-side (minutes, not bench/vs_llamacpp.sh's half hour): graft generate against
# llama-bench, interleaved per round, on the files bench/vs_llamacpp.sh made. Per round and thread
# count: BF16 prompt 512 (graft, GRAFT_BEFORE if set, llama.cpp), then mlx affine 4/8-bit g64 (the
# demo GGUF quantized at load) against llama.cpp's Q4_0/Q8_0: prompt 512 and decode 128. llama.cpp's
# prompt runs use --repack 0 (its AMX path crashed at batch > 1 in these VMs), decode its default.
#
#   LLAMA_BIN=<llama.cpp build>/bin bench/quick_vs_llamacpp.sh [ROUNDS]
# Environment: WORK (default /tmp/graft-vs-llamacpp, its models/), GRAFT (default build/graft),
# GRAFT_BEFORE (a second graft binary for the BF16 rows), PYTHON (default python3).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${1:-3}
M=${WORK:-/tmp/graft-vs-llamacpp}/models
G=${GRAFT:-$ROOT/build/graft}
PY=${PYTHON:-python3}
DEMO=$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf
P=$(printf 'The history of computing is long and varied, and every machine has its story. %.0s' {1..32})
pp() { "$@" -p "$P" --temp 0 -n 1 2>&1 >/dev/null | tail -1 | sed -E 's/.*prompt: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/'; }
tg() { "$@" -p "Once upon a time" --temp 0 -n 128 --ignore-eos 2>&1 >/dev/null | tail -1 |
  sed -E 's/.*generated: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/'; }
lb() { "$LLAMA_BIN/llama-bench" -m "$M/$1.gguf" -t "$2" -p "$3" -n "$4" -r 1 --repack "$5" -o json 2>/dev/null |
  "$PY" -c 'import json,sys; print(round(json.load(sys.stdin)[0]["avg_ts"], 1))'; }
echo "start $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  for t in 1 2; do
    before=${GRAFT_BEFORE:+before $(pp "$GRAFT_BEFORE" generate -m "$M/bf16.gguf" -t "$t")}
    echo "r$r t$t bf16 pp: $before after $(pp "$G" generate -m "$M/bf16.gguf" -t "$t") llama $(lb bf16 "$t" 512 0 1)"
    for b in 4 8; do
      f=$([ $b = 4 ] && echo Q4_0 || echo Q8_0)
      echo "r$r t$t mlx$b pp $(pp "$G" generate -m "$DEMO" --q-bits $b --q-group-size 64 -t "$t")" \
        "tg $(tg "$G" generate -m "$DEMO" --q-bits $b --q-group-size 64 -t "$t") | $f pp $(lb $f "$t" 512 0 0)" \
        "tg $(lb $f "$t" 0 128 1)"
    done
  done
done
echo "end $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)"
