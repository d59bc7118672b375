#!/usr/bin/env bash
# graft against llama.cpp on the same SmolLM2-135M GGUF files, interleaved run by run (issue 10).
#
#   bench/vs_llamacpp.sh [ROUNDS] [THREADS...]        e.g. bench/vs_llamacpp.sh 5 1 2
#
# What it does (developer machine; not CI: it needs torch/transformers/peft and builds llama.cpp):
#  1. llama.cpp from the source in the PyPI llama-cpp-python sdist (pip download --no-binary,
#     vendor/llama.cpp), CMake Release, GGML_NATIVE=ON (its default build for the machine it runs
#     on), targets llama-bench, llama-quantize, llama-completion. LLAMA_DIR=<source tree> skips the
#     download; the build directory is $LLAMA_DIR/build-bench.
#  2. SmolLM2-135M-Instruct as a BF16 Hugging Face checkpoint (dequantized from the demo GGUF by
#     bench/bench_fuse.py's prepare, with its rank-16 PEFT LoRA on all seven projections), converted
#     by llama.cpp's convert_hf_to_gguf.py to BF16 and by llama-quantize to Q8_0, Q4_0, Q4_K_M; the
#     LoRA by convert_lora_to_gguf.py. graft runs the very same GGUF files (and the same GGUF LoRA).
#  3. ROUNDS rounds (default 5); in each, for each thread count and file: llama-bench pp512 and tg128
#     (OpenMP default spin-wait, and OMP_WAIT_POLICY=passive), then graft generate with a 512-token
#     prompt and 128 tokens; time to first token (process start to exit with one generated token,
#     load included) for both; tg128 with the LoRA unfused for both (llama-completion --lora).
#  4. Prints a Markdown table: medians with min–max over the rounds and graft / llama.cpp, plus the
#     machine load before and after, and which graft kernels ran.
# Environment: PYTHON (a Python with torch, transformers, peft, gguf, numpy, sentencepiece;
# default python3), WORK (default /tmp/graft-vs-llamacpp), GRAFT (default build/graft), VS_FILES (the files
# to run, default "bf16 Q8_0 Q4_0 Q4_K_M"),
# LLAMA_REPACK_PP (1 keeps llama.cpp's repacked/AMX weight buffers on where more than one token
# goes through a quantized file at once: prompt processing, time to first token, the LoRA runs; in
# this project's VMs its AMX path dies with SIGILL there, so the default is 0 = --repack 0 / -nr.
# Single-token decode (tg128) always runs with llama.cpp's default, repacking on), VS_ISA (native,
# the default: both engines use the widest ISA of this CPU; avx2: llama.cpp built for AVX2/FMA/F16C
# only, in build-avx2, and graft forced to its AVX2 kernels with GRAFT_MATMUL_ISA=avx2 and
# GRAFT_Q8_KERNEL=avx2: what a machine without AVX-512 runs, measured on this one).
# VS_BASE (another model than SmolLM2: a BF16 Hugging Face checkpoint directory, e.g. the 3B Llama shape
# of issue 20 made by
#   python3 bench/synthetic_model.py /tmp/llama3b --hidden 3072 --intermediate 8192 --layers 28 \
#       --heads 24 --kv-heads 8 --tokenizer-from <SmolLM2 BF16 dir, e.g. $WORK/prep/base>
# and then VS_BASE=/tmp/llama3b/base VS_FILES="bf16 Q4_K_M" bench/vs_llamacpp.sh 3 1 2): its GGUF files
# go to $WORK/models-<name of VS_BASE's parent>; VS_LORA (a PEFT LoRA directory for it, e.g.
# /tmp/llama3b/lora) enables the LoRA rows, which are skipped without it.
set -euo pipefail
ROUNDS=${1:-5}
shift || true
THREADS=("$@")
[ ${#THREADS[@]} -eq 0 ] && THREADS=(1 2)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=${WORK:-/tmp/graft-vs-llamacpp}
GRAFT=${GRAFT:-$ROOT/build/graft}
REPACK_PP=${LLAMA_REPACK_PP:-0}
mkdir -p "$WORK"
log() { echo "[vs_llamacpp] $*" >&2; }

# 1. llama.cpp
if [ -z "${LLAMA_DIR:-}" ]; then
  if [ ! -d "$WORK/sdist" ]; then
    log "downloading the llama-cpp-python sdist"
    "$PYTHON" -m pip download --quiet --no-binary :all: --no-deps llama-cpp-python -d "$WORK/sdist"
    tar -xzf "$WORK"/sdist/llama_cpp_python-*.tar.gz -C "$WORK/sdist"
  fi
  LLAMA_DIR=$(ls -d "$WORK"/sdist/llama_cpp_python-*/vendor/llama.cpp | head -1)
fi
VS_ISA=${VS_ISA:-native}
case "$VS_ISA" in
  native) LB="$LLAMA_DIR/build-bench"; ISA_FLAGS=(-DGGML_NATIVE=ON) ;;
  avx2) LB="$LLAMA_DIR/build-avx2"
        ISA_FLAGS=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF
                   -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF
                   -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
        export GRAFT_MATMUL_ISA=avx2 GRAFT_Q8_KERNEL=avx2 ;;
  *) echo "VS_ISA must be native or avx2, got '$VS_ISA'" >&2; exit 2 ;;
esac
if [ ! -x "$LB/bin/llama-bench" ] || [ ! -x "$LB/bin/llama-completion" ] || [ ! -x "$LB/bin/llama-quantize" ]; then
  log "building llama.cpp in $LB (several minutes on 2 cores)"
  launcher=$(command -v ccache >/dev/null && echo "-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache" || true)
  cmake -S "$LLAMA_DIR" -B "$LB" -DCMAKE_BUILD_TYPE=Release "${ISA_FLAGS[@]}" -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF $launcher >/dev/null
  cmake --build "$LB" -j"$(nproc)" --target llama-bench llama-quantize llama-completion >/dev/null
fi

# 2. models and the LoRA
if [ -n "${VS_BASE:-}" ]; then
  BASE=$(cd "$VS_BASE" && pwd)
  LORA_DIR=${VS_LORA:-}
  M="$WORK/models-$(basename "$(dirname "$BASE")")"
else
  BASE="$WORK/prep/base"
  LORA_DIR="$WORK/prep/peft_r16"
  if [ ! -f "$BASE/model.safetensors" ]; then
    log "preparing the BF16 checkpoint and the rank-16 PEFT LoRA"
    (cd "$ROOT/bench" && "$PYTHON" -c "import bench_fuse; bench_fuse.prepare('$WORK/prep')")
  fi
  M="$WORK/models"
fi
mkdir -p "$M"
if [ ! -f "$M/bf16.gguf" ]; then
  "$PYTHON" "$LLAMA_DIR/convert_hf_to_gguf.py" "$BASE" --outtype bf16 --outfile "$M/bf16.gguf" >/dev/null 2>&1
fi
if [ -n "$LORA_DIR" ] && [ ! -f "$M/lora.gguf" ]; then
  "$PYTHON" "$LLAMA_DIR/convert_lora_to_gguf.py" "$LORA_DIR" --base "$BASE" --outtype f32 \
      --outfile "$M/lora.gguf" >/dev/null 2>&1
fi
read -r -a FILES <<<"${VS_FILES:-bf16 Q8_0 Q4_0 Q4_K_M}"  # VS_FILES: a subset
for q in "${FILES[@]}" $([ -n "$LORA_DIR" ] && echo Q4_0); do  # (the LoRA rows run Q4_0)
  [ "$q" = bf16 ] || [ -f "$M/$q.gguf" ] || "$LB/bin/llama-quantize" "$M/bf16.gguf" "$M/$q.gguf" "$q" >/dev/null 2>&1
done

# A prompt of exactly 512 tokens for graft: token ids through graft's own tokenizer are not needed,
# the text below is 512+ tokens and graft reports its count; the rate is per token either way.
PROMPT512=$(printf 'The history of computing is long and varied, and every machine has its story. %.0s' {1..32})
SHORT="Once upon a time"

repack_flag() {  # file pp -> llama-bench's --repack value for that run
  if [ "$1" != bf16 ] && [ "$2" -gt 0 ]; then echo "$REPACK_PP"; else echo 1; fi
}
nr_flag() { [ "$1" != bf16 ] && [ "$REPACK_PP" = 0 ] && echo -nr || true; }
llama_bench() {  # file threads pp tg [env...] -> tokens/s
  local f=$1 t=$2 pp=$3 tg=$4
  shift 4
  env "$@" "$LB/bin/llama-bench" -m "$M/$f.gguf" -t "$t" -p "$pp" -n "$tg" -r 1 --repack "$(repack_flag "$f" "$pp")" -o json 2>/dev/null |
    "$PYTHON" -c 'import json,sys; print(round(json.load(sys.stdin)[0]["avg_ts"], 2))'
}
graft_run() {  # file threads n_predict prompt [extra...] -> "prompt_tps gen_tps"
  local f=$1 t=$2 n=$3 p=$4
  shift 4
  "$GRAFT" generate -m "$M/$f.gguf" -p "$p" --temp 0 -n "$n" --ignore-eos -t "$t" "$@" 2>&1 >/dev/null | tail -1 |
    sed -E 's/.*prompt: [0-9]+ tokens, ([0-9.]+) tokens\/s.*generated: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1 \2/'
}
llama_completion_tg() {  # file threads [extra...] -> decode tokens/s
  local f=$1 t=$2
  shift 2
  "$LB/bin/llama-completion" -m "$M/$f.gguf" -p "$SHORT" -n 128 --ignore-eos -t "$t" --temp 0 -no-cnv $(nr_flag "$f") "$@" 2>&1 </dev/null |
    grep -E 'eval time' | grep -v prompt | sed -E 's/.*, +([0-9.]+) tokens per second.*/\1/' | tail -1
}
wall() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>&1 </dev/null || true; "$PYTHON" -c "print(round(($(date +%s.%N) - $s) * 1000, 1))"; }

R="$WORK/results.tsv"
: >"$R"
rec() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$R"; }  # metric file threads engine value
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "graft: $("$GRAFT" generate -m "$M/${FILES[${#FILES[@]}-1]}.gguf" -p hi -n 1 2>&1 >/dev/null | head -1)"
for round in $(seq "$ROUNDS"); do
  log "round $round of $ROUNDS (load $(cut -d' ' -f1 /proc/loadavg))"
  for t in "${THREADS[@]}"; do
    for f in "${FILES[@]}"; do
      rec pp512 "$f" "$t" llama "$(llama_bench "$f" "$t" 512 0)"
      rec tg128 "$f" "$t" llama "$(llama_bench "$f" "$t" 0 128)"
      rec tg128 "$f" "$t" llama-passive "$(llama_bench "$f" "$t" 0 128 OMP_WAIT_POLICY=passive)"
      read -r gpp _ <<<"$(graft_run "$f" "$t" 1 "$PROMPT512")"
      rec pp512 "$f" "$t" graft "$gpp"
      read -r _ gtg <<<"$(graft_run "$f" "$t" 128 "$SHORT")"
      rec tg128 "$f" "$t" graft "$gtg"
      rec ttft_ms "$f" "$t" llama "$(wall "$LB/bin/llama-completion" -m "$M/$f.gguf" -p "$SHORT" -n 1 -t "$t" -no-cnv $(nr_flag "$f"))"
      rec ttft_ms "$f" "$t" graft "$(wall "$GRAFT" generate -m "$M/$f.gguf" -p "$SHORT" -n 1 -t "$t")"
    done
    [ -n "$LORA_DIR" ] || continue  # (VS_BASE without VS_LORA: no LoRA rows)
    for f in bf16 Q4_0; do
      [ -f "$M/$f.gguf" ] || continue
      rec tg128_base "$f" "$t" llama "$(llama_completion_tg "$f" "$t")"
      rec tg128_lora "$f" "$t" llama "$(llama_completion_tg "$f" "$t" --lora "$M/lora.gguf")"
      read -r _ b <<<"$(graft_run "$f" "$t" 128 "$SHORT")"
      rec tg128_base "$f" "$t" graft "$b"
      read -r _ l <<<"$(graft_run "$f" "$t" 128 "$SHORT" --lora "$M/lora.gguf")"
      rec tg128_lora "$f" "$t" graft "$l"
    done
  done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

"$PYTHON" - "$R" "$LOAD_BEFORE" "$LOAD_AFTER" "$ROUNDS" <<'EOF'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    metric, f, t, engine, v = line.rstrip("\n").split("\t")
    if v:
        rows[(metric, f, t, engine)].append(float(v))
def cell(vals):
    return f"{statistics.median(vals):.1f} ({min(vals):.1f}–{max(vals):.1f})" if vals else "—"
print(f"load average before: {sys.argv[2]}; after: {sys.argv[3]}; rounds: {sys.argv[4]}\n")
print("| metric | file | threads | graft | llama.cpp | llama.cpp passive | graft / llama.cpp |")
print("|---|---|---|---|---|---|---|")
keys = sorted({(m, f, t) for (m, f, t, e) in rows}, key=lambda k: (k[2], k[0], k[1]))
for m, f, t in keys:
    g, l, p = rows.get((m, f, t, "graft"), []), rows.get((m, f, t, "llama"), []), rows.get((m, f, t, "llama-passive"), [])
    ratio = "—"
    if g and l:
        r = statistics.median(g) / statistics.median(l)
        ratio = f"{1 / r:.2f}" if m == "ttft_ms" else f"{r:.2f}"
    print(f"| {m} | {f} | {t} | {cell(g)} | {cell(l)} | {cell(p)} | {ratio} |")
for f in ("bf16", "Q4_0"):
    for t in sorted({k[2] for k in keys}):
        for e in ("graft", "llama"):
            b, l = rows.get(("tg128_base", f, t, e)), rows.get(("tg128_lora", f, t, e))
            if b and l:
                print(f"LoRA cost {e} {f} t={t}: unfused rank-16 / base = {statistics.median(l) / statistics.median(b):.3f}")
print("\nllama.cpp on quantized files with more than one token per step (pp512, ttft, the LoRA runs): repacking off (--repack 0 / -nr) unless LLAMA_REPACK_PP=1.")
print("ttft ratio column is llama.cpp time / graft time (> 1: graft first); every other ratio is graft / llama.cpp.")
EOF
