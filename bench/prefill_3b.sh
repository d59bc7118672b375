#!/usr/bin/env bash
# Prompt and decode at a real model size against llama.cpp built two ways (issue 20): a 3B
# Llama shape (bench/synthetic_model.py --hidden 3072 --intermediate 8192 --layers 28 --heads 24
# --kv-heads 8), converted by llama.cpp's convert_hf_to_gguf.py and quantized by its llama-quantize,
# the same files for both engines. Interleaved run by run; per round and thread count and file:
#   llama-bench pp512 from the native build with --repack 0 (its AMX path dies with SIGILL at
#   batch > 1 in these VMs), llama-bench pp512 from an AVX-512 build with AMX off with --repack 1
#   (its repacked CPU kernels), graft generate on a 513-token prompt (its prompt tokens/s, and the
#   process's wall time to one generated token = time to first token, load included), then decode
#   128 tokens (llama-bench tg128, default repacking, both builds; graft generate -n 128).
#   Time to first token of llama.cpp: llama-completion -n 1 on the same text, wall time.
#
#   M=<dir with bf16.gguf Q4_K_M.gguf ...> LLAMA_NATIVE=<build>/bin LLAMA_AVX512=<build>/bin \
#     bench/prefill_3b.sh [ROUNDS] [FILES...]        (defaults: 3, Q4_K_M bf16)
# Prints one line per measurement (round, threads, file, metric, engine, value) into $OUT (default
# /tmp/prefill_3b.tsv) and a Markdown summary (medians, min–max, ratios) at the end, with the load.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
ROUNDS=${1:-3}; shift || true
FILES=("$@"); [ ${#FILES[@]} -eq 0 ] && FILES=(Q4_K_M bf16)
G=${GRAFT:-$ROOT/build/graft}
OUT=${OUT:-/tmp/prefill_3b.tsv}
THREADS=${THREADS:-"1 2"}
P=$(bench_prompt)
lb() { llama_bench_ts "$1" "$M/$2.gguf" "$3" "$4" "$5" --repack "$6"; }  # bin file threads pp tg repack
now() { date +%s.%N; }
: >"$OUT"
rec() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$OUT"; }
echo "start $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT.load"
"$G" generate -m "$M/${FILES[0]}.gguf" -p hi -n 1 2>&1 >/dev/null | head -1 | tee -a "$OUT.load"
for r in $(seq "$ROUNDS"); do
  for t in $THREADS; do
    for f in "${FILES[@]}"; do
      rp=0; [ "$f" = bf16 ] && rp=1
      rec "$r" "$t" "$f" pp512 llama-native "$(lb "$LLAMA_NATIVE" "$f" "$t" 512 0 $rp)"
      rec "$r" "$t" "$f" pp512 llama-avx512 "$(lb "$LLAMA_AVX512" "$f" "$t" 512 0 1)"
      s=$(now); line=$("$G" generate -m "$M/$f.gguf" -p "$P" --temp 0 -n 1 -t "$t" 2>&1 >/dev/null | tail -1); e=$(now)
      rec "$r" "$t" "$f" pp512 graft "$(field prompt <<<"$line")"
      rec "$r" "$t" "$f" ttft_s graft "$(python3 -c "print(round($e-$s,2))")"
      s=$(now); "$LLAMA_NATIVE/llama-completion" -m "$M/$f.gguf" -p "$P" -n 1 -t "$t" -no-cnv $([ $rp = 0 ] && echo -nr) </dev/null >/dev/null 2>&1; e=$(now)
      rec "$r" "$t" "$f" ttft_s llama-native "$(python3 -c "print(round($e-$s,2))")"
      if [ "$f" != bf16 ]; then
        rec "$r" "$t" "$f" tg128 llama-native "$(lb "$LLAMA_NATIVE" "$f" "$t" 0 128 1)"
        rec "$r" "$t" "$f" tg128 llama-avx512 "$(lb "$LLAMA_AVX512" "$f" "$t" 0 128 1)"
        line=$("$G" generate -m "$M/$f.gguf" -p "Once upon a time" --temp 0 -n 128 --ignore-eos -t "$t" 2>&1 >/dev/null | tail -1)
        rec "$r" "$t" "$f" tg128 graft "$(field generated <<<"$line")"
      fi
      echo "round $r t$t $f done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
done
echo "end $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT.load"
python3 - "$OUT" <<'PY'
import sys, statistics as st, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
v = collections.defaultdict(list)
for r, t, f, m, e, x in rows:
    try: v[(m, f, t, e)].append(float(x))
    except ValueError: pass
def cell(k):
    xs = v.get(k)
    return (st.median(xs), f"{st.median(xs):g} ({min(xs):g}–{max(xs):g})") if xs else (None, "–")
print("| metric | file | threads | graft | llama.cpp native | llama.cpp AVX-512 no AMX | graft / native | graft / AVX-512 |")
print("|---|---|---|---|---|---|---|---|")
for (m, f, t) in sorted({k[:3] for k in v}):
    g, gs = cell((m, f, t, "graft")); n, ns = cell((m, f, t, "llama-native")); a, as_ = cell((m, f, t, "llama-avx512"))
    inv = m == "ttft_s"  # lower is better: ratio llama / graft
    ratio = lambda o: "–" if not (g and o) else f"{(o / g if inv else g / o):.2f}×"
    print(f"| {m} | {f} | {t} | {gs} | {ns} | {as_} | {ratio(n)} | {ratio(a)} |")
PY
