#!/usr/bin/env bash
# graft against llama.cpp and ik_llama.cpp on the same GGUF files, interleaved, with the machine's
# read roofline measured in the same run (issue 35).
#
#   bench/vs_peers.sh ROUNDS "THREADS" FILE...      e.g. bench/vs_peers.sh 3 "1 2" /tmp/m3b/q4km.gguf
#
# - Peers: built by bench/build_peers.sh from their PyPI sdists (PEERS, default /work/peers).
# - Per round, thread count and file, in this order:
#   - llama.cpp's llama-bench: pp512 and tg128;
#   - ik_llama.cpp's llama-bench with -rtr 0 and -rtr 1, the better of the two kept per figure;
#   - graft generate: the 513-token bench prompt (bench/lib.sh) for pp512, then a one-word prompt
#     and -n 128 --ignore-eos for tg128: decode from an empty context, as llama-bench's tg128 is
#     (after the long prompt it would also read 513-641 positions of KV cache a token).
#   Each round also measures the read roofline (build/graft_bench BM_ReadRoofline, 1 and 2 threads).
# - Decode figures are set against it: bytes read per token (graft's own count for the file, the
#   same weights for every engine) x tokens/s = GB/s, and that as % of the roofline at the same
#   thread count.
# - Prints a Markdown table: medians (min-max) over the rounds, the machine, graft's kernel path and
#   the three versions. Raw rows go to OUT (default /tmp/vs_peers.tsv).
#
# - DEPTH=N (default 0: off) adds decode at depth N: tg128 after N tokens of context (llama-bench
#   -p 0 -n 128 -d N for llama.cpp; ik's llama-bench has no -d, so its llama-sweep-bench -c N+512
#   -ub 512 -n 128, the row N_KV = N, at its better -rtr; graft generate on a prompt of about N
#   tokens, the bench sentence repeated, with --ctx-size N + 256). Its GB/s counts the weights only,
#   not the KV cache read at that depth.
# - TTFT=1 adds the time to first token, load included: the wall time of one process from start to
#   exit that loads the file (already in the page cache), reads the 513-token bench prompt and
#   writes one token: graft generate -n 1, llama.cpp's llama-completion -n 1 -no-cnv, ik's
#   llama-cli -n 1 at its better of -rtr 0/1 (-rtr repacks at load: it costs load time). In ms.
# - ISA=avx2 stands for an AVX2-only machine on an AVX-512 one: the peers' AVX2 builds
#   (PEER_ISA=avx2 bench/build_peers.sh) and graft with GRAFT_MATMUL_ISA=avx2 GRAFT_Q8_KERNEL=avx2
#   (its AVX2 kernels, no BF16 dot). The memory, and so the roofline, stay this machine's.
# - A MoE file (one with ffn_gate_exps tensors) adds ik's -rtr 1 -muge 1 (up and gate experts merged)
#   to its runs; -fmoe (fused MoE) is its default. Give MoE and 8B files as FILEs like any other.
set -euo pipefail
ROUNDS=${1:?ROUNDS}
THREADS=${2:?THREADS}
shift 2
FILES=()
for f in "$@"; do FILES+=("$(realpath -s "$f")"); done  # absolute: ik's tools run in a scratch directory
[ ${#FILES[@]} -gt 0 ] || { echo "give at least one GGUF file" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/bench/lib.sh"
PEERS=${PEERS:-/work/peers}
G=${GRAFT:-$ROOT/build/graft}
GB=${GRAFT_BENCH:-$ROOT/build/graft_bench}
OUT=${OUT:-/tmp/vs_peers.tsv}
DEPTH=${DEPTH:-0}
TTFT=${TTFT:-0}
BUILD=build
case ${ISA:-native} in
  native) ;;
  avx2) BUILD=build-avx2; export GRAFT_MATMUL_ISA=avx2 GRAFT_Q8_KERNEL=avx2 ;;
  *) echo "ISA: native or avx2" >&2; exit 2 ;;
esac
LLAMA=$(ls -d "$PEERS"/llama_cpp_python-*/vendor/llama.cpp/$BUILD/bin 2>/dev/null | head -1 || true)
IK=$(ls -d "$PEERS"/ik_llama_cpp_python-*/vendor/ik_llama.cpp/$BUILD/bin 2>/dev/null | head -1 || true)
NEED=("$LLAMA/llama-bench" "$IK/llama-bench" "$G" "$GB")
[ "$TTFT" = 1 ] && NEED+=("$LLAMA/llama-completion" "$IK/llama-cli")
for b in "${NEED[@]}"; do
  [ -x "$b" ] || { echo "missing $b (bench/build_peers.sh builds the peers; make build graft)" >&2; exit 2; }
done
export LD_LIBRARY_PATH="$LLAMA:$IK:${LD_LIBRARY_PATH:-}"
P=$(bench_prompt)
# About DEPTH tokens: the 513-token prompt is 32 sentences of 16 tokens (and a BOS-less start).
PD=$(for _ in $(seq $((DEPTH / 16))); do printf 'The history of computing is long and varied, and every machine has its story. '; done)
: >"$OUT"
rec() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$OUT"; }  # round threads file figure engine value
lb() {  # lb BIN FILE THREADS -> "pp tg" tokens/s (pp512, tg128), extra llama-bench options after
  local bin=$1 f=$2 t=$3; shift 3
  LD_LIBRARY_PATH="$bin" "$bin/llama-bench" -m "$f" -t "$t" -p 512 -n 128 -r 1 "$@" -o json 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print(*[round(x["avg_ts"],2) for x in r])'
}
in_scratch() {  # ik's tools write a log (llama.log, main.log) into the working directory: not the repo's
  (cd "${TMPDIR:-/tmp}" && LD_LIBRARY_PATH="$IK" "$@")
}
sweep() {  # ik's llama-sweep-bench FILE THREADS [options]: S_TG (tg128 tokens/s) of its row N_KV = DEPTH
  local f=$1 t=$2; shift 2
  in_scratch "$IK/llama-sweep-bench" -m "$f" -t "$t" -c $((DEPTH + 512)) -ub 512 -n 128 "$@" 2>&1 |
    awk -F'|' -v d="$DEPTH" '$4 + 0 == d && $3 + 0 > 0 { gsub(/ /, "", $8); print $8; exit }'
}
wall_ms() {  # wall_ms CMD... -> its wall time in ms (output discarded; a failure prints nothing)
  local s; s=$(date +%s%N)
  "$@" >/dev/null 2>&1 </dev/null || return 0
  echo $((($(date +%s%N) - s) / 1000000))
}
roofline() {
  "$GB" --benchmark_filter=BM_ReadRoofline --benchmark_format=json 2>/dev/null |
    python3 -c 'import json,sys
for b in json.load(sys.stdin)["benchmarks"]: print(b["name"].split("/")[1], round(b["bytes_per_second"]/1e9, 1))'
}

echo "start $(date -u +%FT%H:%MZ) ISA ${ISA:-native} load $(cut -d' ' -f1-3 /proc/loadavg) | $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs" >&2
for r in $(seq "$ROUNDS"); do
  while read -r t gbs; do rec "$r" "$t" - roofline_GBps machine "$gbs"; done < <(roofline)
  for t in $THREADS; do
    for f in "${FILES[@]}"; do
      name=$(basename "$(dirname "$f")")/$(basename "$f" .gguf)  # its folder too: q4km of m3b and of moe
      read -r pp tg < <(lb "$LLAMA" "$f" "$t")
      rec "$r" "$t" "$name" pp512 llama.cpp "$pp"; rec "$r" "$t" "$name" tg128 llama.cpp "$tg"
      read -r pp0 tg0 < <(lb "$IK" "$f" "$t" -rtr 0)
      read -r pp1 tg1 < <(lb "$IK" "$f" "$t" -rtr 1)
      pp2=0 tg2=0
      [ "$(head -c 16M "$f" | grep -ac ffn_gate_exps)" -gt 0 ] && read -r pp2 tg2 < <(lb "$IK" "$f" "$t" -rtr 1 -muge 1)
      rec "$r" "$t" "$name" pp512 ik_llama.cpp "$(python3 -c "print(max($pp0, $pp1, $pp2))")"
      rec "$r" "$t" "$name" tg128 ik_llama.cpp "$(python3 -c "print(max($tg0, $tg1, $tg2))")"
      line=$("$G" generate -m "$f" -p "$P" --temp 0 -n 1 -t "$t" 2>&1 >/dev/null | tail -1)
      rec "$r" "$t" "$name" pp512 graft "$(field prompt <<<"$line")"
      line=$("$G" generate -m "$f" -p The --temp 0 -n 128 --ignore-eos -t "$t" 2>&1 >/dev/null | tail -1)
      rec "$r" "$t" "$name" tg128 graft "$(field generated <<<"$line")"
      rec "$r" "$t" "$name" MB_per_token graft "$(sed -E 's/.*weights read per token: ([0-9.]+) MB.*/\1/' <<<"$line")"
      if [ "$TTFT" = 1 ]; then
        rec "$r" "$t" "$name" ttft_ms llama.cpp "$(LD_LIBRARY_PATH="$LLAMA" wall_ms "$LLAMA/llama-completion" -m "$f" -p "$P" -n 1 -t "$t" --temp 0 -no-cnv)"
        k0=$(in_scratch wall_ms "$IK/llama-cli" -m "$f" -p "$P" -n 1 -t "$t" --temp 0)
        k1=$(in_scratch wall_ms "$IK/llama-cli" -m "$f" -p "$P" -n 1 -t "$t" --temp 0 -rtr)
        rec "$r" "$t" "$name" ttft_ms ik_llama.cpp "$(python3 -c "print(min(x for x in (${k0:-0}, ${k1:-0}) if x > 0) if ${k0:-0} + ${k1:-0} else 0)")"
        rec "$r" "$t" "$name" ttft_ms graft "$(wall_ms "$G" generate -m "$f" -p "$P" --temp 0 -n 1 -t "$t")"
      fi
      if [ "$DEPTH" -gt 0 ]; then
        fig="tg128@d$DEPTH"
        # (llama-bench keeps its -p 512 beside -p 0: the last figure is tg128 at depth)
        rec "$r" "$t" "$name" "$fig" llama.cpp "$(lb "$LLAMA" "$f" "$t" -d "$DEPTH" | awk '{print $NF}')"
        d0=$(sweep "$f" "$t" || true)  # (sweep-bench's -rtr is a flag)
        d1=$(sweep "$f" "$t" -rtr || true)
        rec "$r" "$t" "$name" "$fig" ik_llama.cpp "$(python3 -c "print(max(${d0:-0}, ${d1:-0}))")"
        line=$("$G" generate -m "$f" -p "$PD" -c $((DEPTH + 256)) --temp 0 -n 128 --ignore-eos -t "$t" 2>&1 >/dev/null | tail -1)
        rec "$r" "$t" "$name" "$fig" graft "$(field generated <<<"$line")"
      fi
    done
  done
done
echo "end $(date -u +%H:%MZ) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$G" generate -m "${FILES[0]}" -p hi -n 1 2>&1 >/dev/null | grep -m1 -i "kernel\|activations" >&2 || true
python3 "$ROOT/bench/vs_peers_table.py" "$OUT"
