#!/usr/bin/env bash
# Decode speed at a long context by KV cache type (--cache-type): a ~1,500-token prompt (the first
# 4,250 bytes of README.md + docs/ADAPTERS.md + docs/SERVER.md), 128 generated tokens, greedy,
# the types interleaved in each round; prints each run and the medians (min-max) per type.
# Usage: bench/kv_cache.sh GRAFT MODEL [ROUNDS=5] [THREADS=2] [TYPES="f32 f16 bf16"]
set -eu
GRAFT=$1 MODEL=$2 ROUNDS=${3:-5} THREADS=${4:-2} TYPES=${5:-"f32 f16 bf16"}
SRC=$(cd "$(dirname "$0")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat "$SRC/README.md" "$SRC/docs/ADAPTERS.md" "$SRC/docs/SERVER.md" | head -c 4250 >"$TMP/prompt.txt"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  for t in $TYPES; do
    line=$("$GRAFT" generate -m "$MODEL" -f "$TMP/prompt.txt" -n 128 --ignore-eos --temp 0 -t "$THREADS" \
      --cache-type "$t" 2>&1 >/dev/null | grep '^prompt:')
    pp=$(echo "$line" | sed -E 's/.*prompt: ([0-9]+) tokens, ([0-9.]+) tokens\/s.*/\2/')
    tg=$(echo "$line" | sed -E 's/.*generated: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/')
    echo "round $r $t: $line"
    echo "$pp $tg" >>"$TMP/$t"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in $TYPES; do
  python3 - "$TMP/$t" "$t" <<'PY'
import statistics, sys
rows = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
for i, name in ((0, "prompt tok/s"), (1, "decode tok/s")):
    v = [r[i] for r in rows]
    print(f"{sys.argv[2]:>5} {name}: median {statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})")
PY
done
