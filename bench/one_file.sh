#!/usr/bin/env bash
# Prompt 512 and decode of one GGUF file, graft against llama-bench, interleaved per round and
# thread count: llama-bench pp512 with --repack 0 (its AMX path dies at batch > 1 in these VMs),
# graft generate on the 513-token prompt with -n 1 (its prompt tokens/s), llama-bench tgN (its
# default repacking), graft generate -n N --ignore-eos (decode tokens/s). For a file too large for
# bench/prefill_3b.sh's full round (the 8B shape: minutes a run); prints one line per measurement.
#
#   LLAMA=<llama.cpp build>/bin bench/one_file.sh FILE.gguf [ROUNDS] [N]     (defaults: 1 round, N 64)
# Environment: GRAFT (default build/graft), THREADS (default "1 2").
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
MODEL=$1; ROUNDS=${2:-1}; N=${3:-64}
G=${GRAFT:-$ROOT/build/graft}
P=$(bench_prompt)
echo "start $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)"
"$G" generate -m "$MODEL" -p hi -n 1 2>&1 >/dev/null | head -1
for r in $(seq "$ROUNDS"); do
  for t in ${THREADS:-1 2}; do
    echo "round $r t$t pp512 llama $(llama_bench_ts "$LLAMA" "$MODEL" "$t" 512 0 --repack 0)"
    echo "round $r t$t pp512 graft $("$G" generate -m "$MODEL" -p "$P" --temp 0 -n 1 -t "$t" 2>&1 >/dev/null | tail -1 | field prompt)"
    echo "round $r t$t tg$N llama $(llama_bench_ts "$LLAMA" "$MODEL" "$t" 0 "$N")"
    echo "round $r t$t tg$N graft $("$G" generate -m "$MODEL" -p "Once upon a time" --temp 0 -n "$N" --ignore-eos -t "$t" 2>&1 >/dev/null | tail -1 | field generated)"
    echo "  (load $(cut -d' ' -f1 /proc/loadavg))"
  done
done
echo "end $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)"
