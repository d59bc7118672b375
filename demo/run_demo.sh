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
