#!/usr/bin/env bash
# Accuracy of the fast default against the exact path, graft and llama.cpp on the same file, text
# and chunks (issue 36): the F32 reference is graft's `--activations f32` run (unrounded activations:
# the logits transformers computes on the same quantized weights), saved once in llama-perplexity's
# --kl-divergence-base format; then each engine's default scores that file's tokens with
# --kl-divergence. Lower mean KLD = closer to the exact model. Prints a Markdown table (mean KLD with
# its standard error, 99th-percentile KLD, same top token, PPL, evaluation tokens/s) and the machine.
#
#   bench/accuracy.sh MODEL.gguf TEXT [CHUNKS] [THREADS]
#   e.g. LLAMA_BIN=/tmp/llama.cpp/build/bin bench/accuracy.sh models/SmolLM2-135M-Instruct.Q4_1.gguf eval.txt 20 2
#
# LLAMA_BIN: a llama.cpp build's bin/ with llama-perplexity (built from the llama-cpp-python sdist
# as bench/vs_llamacpp.sh does: cmake -S vendor/llama.cpp -B build -DCMAKE_BUILD_TYPE=Release
# -DLLAMA_CURL=OFF && cmake --build build --target llama-perplexity); without it only graft's rows
# run. GRAFT (default build/graft), CTX (default 512). The reference file is about 0.1 GB per chunk
# of 512 at a 49k vocabulary (written under WORK, default /tmp/graft-accuracy, deleted at the end).
# No text ships with the repo: any long English text works (the bench/results notes name theirs).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 2 ]; then
  sed -n '2,17p' "$0" >&2
  exit 2
fi
MODEL=$1 TEXT=$2 CHUNKS=${3:-20} T=${4:-2}
GRAFT=${GRAFT:-$ROOT/build/graft} CTX=${CTX:-512} WORK=${WORK:-/tmp/graft-accuracy}
mkdir -p "$WORK"
REF=$WORK/reference.kld
trap 'rm -f "$REF"' EXIT
echo "start $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
timeout 3600 "$GRAFT" perplexity -m "$MODEL" -f "$TEXT" -c "$CTX" --chunks "$CHUNKS" -t "$T" --activations f32 \
  --kl-divergence-base "$REF" 2>"$WORK/reference.err" >/dev/null || { cat "$WORK/reference.err" >&2; exit 1; }

# One engine's --kl-divergence run: its stdout+stderr to WORK/NAME.out, wall seconds to WORK/NAME.time.
run() {
  local name=$1; shift
  local t0; t0=$(date +%s.%N)
  timeout 3600 "$@" >"$WORK/$name.out" 2>&1 || echo "$name failed: $(tail -3 "$WORK/$name.out")" >&2
  echo "$(date +%s.%N) - $t0" | bc >"$WORK/$name.time"
}
run graft-q8 "$GRAFT" perplexity -m "$MODEL" -t "$T" --kl-divergence-base "$REF" --kl-divergence
run graft-f32 "$GRAFT" perplexity -m "$MODEL" -t "$T" --activations f32 --kl-divergence-base "$REF" --kl-divergence
names="graft-q8 graft-f32"
if [ -n "${LLAMA_BIN:-}" ]; then
  run llama.cpp "$LLAMA_BIN/llama-perplexity" -m "$MODEL" -t "$T" -c "$CTX" --kl-divergence-base "$REF" --kl-divergence
  names="$names llama.cpp"
fi
echo "end $(date -u +%H:%M) load $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$WORK" "$CHUNKS" "$CTX" "$MODEL" $names <<'EOF'
import re, sys
work, chunks, ctx, model, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
def grab(text, label):
    m = re.search(re.escape(label) + r"\s*:\s*(-?[0-9.]+)(?:\s*±\s*([0-9.]+))?", text)
    return (float(m.group(1)), float(m.group(2) or 0)) if m else (float("nan"), 0.0)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"{model}, {chunks} chunks of {ctx} tokens; reference: graft --activations f32; {cpu}\n")
print("| engine | mean KLD | 99 % KLD | same top | PPL | tokens/s |")
print("|---|---|---|---|---|---|")
for n in names:
    text = open(f"{work}/{n}.out", errors="replace").read()
    kld, kld_e = grab(text, "Mean    KLD")
    p99 = grab(text, "99.0%   KLD")[0]
    top, top_e = grab(text, "Same top p")
    ppl, ppl_e = grab(text, "Mean PPL(Q)")
    secs = float(open(f"{work}/{n}.time").read())
    rate = chunks * (ctx - 1) / secs  # load included
    print(f"| {n} | {kld:.6f} ± {kld_e:.6f} | {p99:.5f} | {top:.2f} ± {top_e:.2f} % | {ppl:.4f} | {rate:.0f} |")
EOF
