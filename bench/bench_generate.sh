#!/usr/bin/env bash
# End-to-end prompt processing and decode speed of `graft generate` at batch 1 on SmolLM2-135M,
# with the weights as F32 (the Q4_1 GGUF dequantized) and as BF16, plus the machine's streaming-read
# bandwidth and the resulting decode ceiling (weight bytes per token / bandwidth).
# Usage: bench/bench_generate.sh [BUILD_DIR] [THREADS]
set -euo pipefail
BUILD=${1:-build}
THREADS=${2:-$(nproc)}
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
PROMPT="$(printf 'The history of computing is long and varied. %.0s' {1..12})"
bw=$("$BUILD/graft_bench" --benchmark_filter="BM_StreamRead/$THREADS/" --benchmark_format=json 2>/dev/null \
     | python3 -c 'import json,sys; b=json.load(sys.stdin)["benchmarks"]; print(b[0]["bytes_per_second"]/1e9)')
echo "streaming read bandwidth, $THREADS thread(s): ${bw} GB/s"
for dtype in F32 BF16; do
  best_tg=0; best_pp=0
  for run in 1 2 3; do
    line=$("$BUILD/graft" generate -m "$MODEL" --dtype $dtype -p "$PROMPT" --temp 0 -n 64 --ignore-eos -t "$THREADS" 2>&1 >/dev/null | tail -1)
    pp=$(sed -E 's/.*prompt: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/' <<<"$line")
    tg=$(sed -E 's/.*generated: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/' <<<"$line")
    mb=$(sed -E 's/.*weights read per token: ([0-9.]+) MB.*/\1/' <<<"$line")
    best_pp=$(python3 -c "print(max($best_pp, $pp))"); best_tg=$(python3 -c "print(max($best_tg, $tg))")
  done
  ceiling=$(python3 -c "print(round($bw * 1e3 / $mb, 1))")
  pct=$(python3 -c "print(round(100 * $best_tg / $ceiling))")
  echo "SmolLM2-135M $dtype: prompt $best_pp tok/s, decode $best_tg tok/s; $mb MB/token -> ceiling $ceiling tok/s; decode at $pct% of ceiling"
done
