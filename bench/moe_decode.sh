#!/usr/bin/env bash
# Decode of a mixture-of-experts GGUF against llama.cpp (issue 21): a Qwen3-30B-A3B-shaped file with
# fewer layers (bench/synthetic_model.py --family qwen3_moe --layers 8 --vocab 151936, converted by
# llama.cpp's convert_hf_to_gguf.py to BF16 and by its llama-quantize to Q4_K_M), the same file for
# both engines. Interleaved run by run; per round and thread count:
#   llama-bench pp512 and tg128 (its defaults: repacked CPU weights, mmap),
#   graft generate on a 513-token prompt, -n 1 (its prompt tokens/s),
#   graft generate -n 128 --ignore-eos (decode tokens/s), the base alone and with the rank-16 PEFT
#   LoRA on every expert and q/k/v/o held unfused (--lora; its cost is the decode ratio).
# Each round is its own `flock -x /tmp/bench.lock` (a round is about 2 minutes), so builds can run
# between rounds; the engines alternate which goes first from round to round.
#
#   M=<dir with Q4_K_M.gguf> LLAMA=<llama.cpp build>/bin [LORA=<PEFT dir>] bench/moe_decode.sh [ROUNDS] [FILE]
#       (defaults: 3 rounds, Q4_K_M)
# Env: LORA_OPTS (more options with --lora, e.g. "--lora-dtype q8_0"), GRAFT (default build/graft), GRAFT_B (a second graft binary, e.g. the branch point: its
# decode rows, base and LoRA, as "graft-b" in the same rounds), THREADS (default "1 2"), OUT (default /tmp/moe_decode.tsv),
# LOCK (default /tmp/bench.lock; empty: no lock). Writes one line per measurement (round, threads,
# metric, engine, value) into $OUT, graft's first stderr line and weights-read figure into $OUT.load,
# and prints a Markdown summary (medians, min–max, ratios) with the load at start and end.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
ONE=""; [ "${1:-}" = --round ] && { ONE=$2; shift 2; }  # one round (what each locked call runs)
ROUNDS=${1:-3}
F=${2:-Q4_K_M}
G=${GRAFT:-$ROOT/build/graft}
GB=${GRAFT_B:-}
OUT=${OUT:-/tmp/moe_decode.tsv}
THREADS=${THREADS:-"1 2"}
LOCK=${LOCK-/tmp/bench.lock}
LORA=${LORA:-}
read -r -a LORA_OPTS <<<"${LORA_OPTS:-}"  # more options with --lora, e.g. LORA_OPTS="--lora-dtype q8_0"
MODEL="$M/$F.gguf"
P=$(bench_prompt)
lb() { llama_bench_ts "$LLAMA" "$MODEL" "$1" "$2" "$3"; }  # threads pp tg
gen() {  # [-b] threads n prompt [options...]: graft's (or GRAFT_B's) summary line
  local g=$G; [ "$1" = -b ] && { g=$GB; shift; }
  local t=$1 n=$2 p=$3; shift 3
  "$g" generate -m "$MODEL" -p "$p" --temp 0 -n "$n" --ignore-eos -t "$t" "$@" 2>&1 >/dev/null | tail -1
}
rec() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$OUT"; }
locked() { if [ -n "$LOCK" ]; then flock -x "$LOCK" "$@"; else "$@"; fi; }

round() {  # r: one round, all thread counts
  local r=$1 t line
  for t in $THREADS; do
    llama_side() {
      rec "$r" "$t" pp512 llama "$(lb "$t" 512 0)"
      rec "$r" "$t" tg128 llama "$(lb "$t" 0 128)"
    }
    graft_side() {
      rec "$r" "$t" pp512 graft "$(gen "$t" 1 "$P" | field prompt)"
      rec "$r" "$t" tg128 graft "$(gen "$t" 128 "Once upon a time" | field generated)"
      if [ -n "$LORA" ]; then
        rec "$r" "$t" tg128 graft+lora "$(gen "$t" 128 "Once upon a time" --lora "$LORA" "${LORA_OPTS[@]}" | field generated)"
      fi
      if [ -n "$GB" ]; then
        rec "$r" "$t" tg128 graft-b "$(gen -b "$t" 128 "Once upon a time" | field generated)"
        [ -n "$LORA" ] && rec "$r" "$t" tg128 graft-b+lora "$(gen -b "$t" 128 "Once upon a time" --lora "$LORA" "${LORA_OPTS[@]}" | field generated)"
      fi
    }
    if [ $((r % 2)) = 1 ]; then llama_side; graft_side; else graft_side; llama_side; fi
    echo "round $r t$t done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  done
}

if [ -n "$ONE" ]; then round "$ONE"; exit; fi
: >"$OUT"
{
  echo "start $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)"
  "$G" generate -m "$MODEL" -p hi -n 1 2>&1 >/dev/null | sed -n '1p;$p'
  [ -n "$LORA" ] && "$G" generate -m "$MODEL" -p hi -n 1 --lora "$LORA" "${LORA_OPTS[@]}" 2>&1 >/dev/null | sed -n '1p;$p'
} | tee "$OUT.load"
for r in $(seq "$ROUNDS"); do
  OUT=$OUT M=$M LLAMA=$LLAMA LORA=$LORA LORA_OPTS="${LORA_OPTS[*]}" GRAFT=$G GRAFT_B=$GB THREADS=$THREADS locked "$0" --round "$r" 1 "$F"
done
echo "end $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT.load"
python3 - "$OUT" <<'PY'
import sys, statistics as st, collections
v = collections.defaultdict(list)
for l in open(sys.argv[1]):
    r, t, m, e, x = l.rstrip("\n").split("\t")
    try: v[(m, t, e)].append(float(x))
    except ValueError: pass
def cell(k):
    xs = v.get(k)
    return (st.median(xs), f"{st.median(xs):g} ({min(xs):g}–{max(xs):g})") if xs else (None, "–")
print("| metric (tokens/s) | threads | graft | graft + LoRA unfused | llama.cpp | graft / llama.cpp | LoRA cost |")
print("|---|---|---|---|---|---|---|")
for (m, t) in sorted({k[:2] for k in v}):
    g, gs = cell((m, t, "graft")); gl, gls = cell((m, t, "graft+lora")); l, ls = cell((m, t, "llama"))
    ratio = f"{g / l:.2f}×" if g and l else "–"
    cost = f"{100 * (g / gl - 1):+.1f} %" if g and gl else "–"  # extra time per token
    print(f"| {m} | {t} | {gs} | {gls} | {ls} | {ratio} | {cost} |")
    b, bs = cell((m, t, "graft-b")); bl, bls = cell((m, t, "graft-b+lora"))
    if b:
        cost = f"{100 * (b / bl - 1):+.1f} %" if bl else "–"
        print(f"| {m} (GRAFT_B) | {t} | {bs} | {bls} | {ls} | {b / l:.2f}× | {cost} |" if l else f"| {m} (GRAFT_B) | {t} | {bs} | {bls} | – | – | {cost} |")
PY
