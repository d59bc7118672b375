# Shell helpers shared by the bench scripts that run llama.cpp and graft side by side
# (prefill_3b.sh, moe_decode.sh): sourced, not run. One copy, so both measure the same way.

# The long prompt of the prompt-speed runs (the scripts' "513-token prompt").
bench_prompt() { printf 'The history of computing is long and varied, and every machine has its story. %.0s' {1..32}; }

# llama-bench's average tokens/s (2 decimals) of one run: bin dir, model file, threads, prompt
# tokens, generated tokens, then any further llama-bench options (e.g. --repack 1).
llama_bench_ts() {
  local bin=$1 model=$2 t=$3 pp=$4 tg=$5; shift 5
  "$bin/llama-bench" -m "$model" -t "$t" -p "$pp" -n "$tg" -r 1 "$@" -o json 2>/dev/null |
    python3 -c 'import json,sys; print(round(json.load(sys.stdin)[0]["avg_ts"], 2))'
}

# The tokens/s of graft generate's summary line on stdin, for "prompt" or "generated".
field() { sed -E "s/.*$1: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/"; }
