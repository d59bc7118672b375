#!/usr/bin/env bash
# Two graft builds on the same model files, interleaved run by run: for a change that should not
# move speed (a refactor), or one that should (a kernel), measured the same way. Per round, thread
# count and file: build A then build B (the order alternates each round so neither always runs on a
# warmer machine), `graft generate` on the bench prompt (bench/lib.sh) with -n N --ignore-eos;
# prompt and decode tokens/s from its last stderr line. Prints medians with min–max and the load.
#
#   bench/before_after.sh A_BIN B_BIN ROUNDS N "THREADS" MODEL...
#   e.g. git worktree add /tmp/before <rev> && cmake -S /tmp/before -B /tmp/before/build \
#          -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/before/build --target graft
#        bench/before_after.sh /tmp/before/build/graft build/graft 5 128 "1 2" models/*.gguf
#   EXTRA="--lora DIR --lora-dtype q8_0": more options for every graft generate run.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
if [ $# -lt 6 ]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
A=$1 B=$2 ROUNDS=$3 N=$4 THREADS=$5
shift 5
read -r -a EXTRA <<<"${EXTRA:-}"
P=${PROMPT:-$(bench_prompt)}  # PROMPT=... for a shorter one on big models
OUT=${OUT:-/tmp/before_after.tsv}
: >"$OUT"
echo "start $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    for m in "$@"; do
      order="A B"; [ $((r % 2)) -eq 0 ] && order="B A"
      for which in $order; do
        bin=$A; [ "$which" = B ] && bin=$B
        line=$(timeout 600 "$bin" generate -m "$m" -p "$P" --temp 0 -n "$N" --ignore-eos -t "$t" "${EXTRA[@]}" 2>&1 >/dev/null | tail -1)
        pp=$(sed -E 's/.*prompt: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/' <<<"$line")
        tg=$(sed -E 's/.*generated: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/' <<<"$line")
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$t" "$(basename "$m")" "$which" "$pp" "$tg" >>"$OUT"
      done
    done
  done
done
echo "end $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$OUT" "$A" "$B" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
keys = sorted({(r[2], r[1]) for r in rows})
def cell(vals):
    v = sorted(float(x) for x in vals)
    return f"{statistics.median(v):.2f} ({v[0]:.2f}–{v[-1]:.2f})"
print(f"A = {sys.argv[2]}\nB = {sys.argv[3]}\n")
print("| file | threads | prompt A | prompt B | decode A | decode B | decode B/A |")
print("|---|---|---|---|---|---|---|")
for f, t in keys:
    sel = lambda w, i: [r[i] for r in rows if r[2] == f and r[1] == t and r[3] == w]
    ratio = statistics.median(map(float, sel("B", 5))) / statistics.median(map(float, sel("A", 5)))
    print(f"| {f} | {t} | {cell(sel('A', 4))} | {cell(sel('B', 4))} | {cell(sel('A', 5))} | {cell(sel('B', 5))} | {ratio:.3f} |")
EOF
