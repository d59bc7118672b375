#!/usr/bin/env bash
# `make demo`: one prompt answered by SmolLM2-135M-Instruct without an adapter, then with the
# pirate LoRA trained by tools/train_demo_adapter.py (PEFT), fused at load and unfused at run time,
# and with the tiny mlx-lm-trained adapter (tools/train_demo_mlx_adapter.py).
# Usage: demo/run_demo.sh GRAFT_BINARY MODEL
set -euo pipefail
GRAFT=$1
MODEL=$2
PROMPT=${DEMO_PROMPT:-"What are the benefits of regular exercise?"}
run() {
  local title=$1
  shift
  printf '\n=== %s\n' "$title"
  "$GRAFT" generate --model "$MODEL" --chat --temp 0 --max-tokens 64 --prompt "$PROMPT" "$@"
}
printf 'Prompt: %s\n' "$PROMPT"
run "base model"
run "PEFT pirate adapter, fused at load (--adapter)" --adapter demo/adapters/pirate-peft
run "same adapter unfused at half strength (--lora-scaled DIR:0.5)" --lora-scaled demo/adapters/pirate-peft:0.5
if [ -f demo/adapters/pirate-mlx/adapters.safetensors ]; then
  run "mlx-lm-trained adapter, unfused (--lora)" --lora demo/adapters/pirate-mlx
fi

# The same model behind graft serve: two requests at once, one with the adapter and one without,
# co-batched in one forward pass per step (llama-server compatible routes; docs/SERVER.md).
printf '\n=== graft serve: two concurrent requests, per-request adapter scales\n'
LOG=$(mktemp)
"$GRAFT" serve --model "$MODEL" --port 0 --lora demo/adapters/pirate-peft >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 600); do grep -q "listening on" "$LOG" && break; sleep 0.1; done
URL=$(grep -o 'http://[0-9.]*:[0-9]*' "$LOG" | head -1)
for _ in $(seq 600); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && break; sleep 0.1; done
ask() {  # ask LORA_JSON LABEL
  curl -s "$URL/v1/chat/completions" -d "{\"messages\": [{\"role\": \"user\", \"content\": \"$PROMPT\"}],
    \"max_tokens\": 48, \"temperature\": 0, \"lora\": $1}" |
    python3 -c "import json,sys; print('[$2]', json.load(sys.stdin)['choices'][0]['message']['content'])"
}
ask '[{"id": 0, "scale": 1.0}]' "pirate adapter at 1.0" &
A=$!
ask '[]' "no adapter" &
B=$!
wait $A
wait $B
kill -TERM $SERVER
wait $SERVER
trap - EXIT
rm -f "$LOG"
