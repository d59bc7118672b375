#!/usr/bin/env bash
# NVIDIA Dynamo's frontend with its KV router in front of N graft replicas, on this machine only:
# file discovery (no etcd, no NATS), TCP request plane, ZeroMQ event plane, everything on loopback.
# Each worker (graft_worker.py) starts one `graft serve` and relays its --kv-events to the router.
#
#   deploy/dynamo/launch.sh                  # 3 replicas, frontend on 127.0.0.1:8000
#   N=2 HTTP_PORT=9000 deploy/dynamo/launch.sh -- --lora pirate=demo/adapters/pirate-peft
#
# Arguments after `--` go to every graft serve. Environment: PY (a Python with ai-dynamo, default
# python3), GRAFT_BIN (default build/graft), MODEL (default the demo GGUF), N, HTTP_PORT, THREADS
# (graft --threads, default 1), WORK (discovery files and logs, default a new temp dir), LORA
# ("auto": register every adapter graft serves in discovery). Ctrl-C stops everything.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
PY=${PY:-python3}
GRAFT_BIN=${GRAFT_BIN:-$SRC/build/graft}
MODEL=${MODEL:-$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf}
N=${N:-3}
HTTP_PORT=${HTTP_PORT:-8000}
THREADS=${THREADS:-1}
WORK=${WORK:-$(mktemp -d -t graft-dynamo.XXXXXX)}
GRAFT_ARGS=()
if [ "${1:-}" = "--" ]; then shift; GRAFT_ARGS=("$@"); fi

# Keep every Dynamo socket on loopback (by default the request plane binds the host's address);
# DYN_LORA_ENABLED: the frontend sends an adapter's requests only to the workers that registered it.
export DYN_FILE_KV=$WORK/discovery DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1 \
       DYN_EVENT_PLANE_HOST=127.0.0.1 DYN_SELF_HOST_METADATA=0 DYN_LORA_ENABLED=true
mkdir -p "$WORK"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM

"$PY" -m dynamo.frontend --router-mode kv --discovery-backend file --request-plane tcp --event-plane zmq \
  --kv-cache-block-size 16 --migration-limit 3 --http-host 127.0.0.1 --http-port "$HTTP_PORT" \
  >"$WORK/frontend.log" 2>&1 &
pids+=($!)
extra=()
for a in "${GRAFT_ARGS[@]}"; do extra+=("--graft-arg=$a"); done
[ -n "${LORA:-}" ] && extra+=(--lora "$LORA")
for i in $(seq 1 "$N"); do
  "$PY" "$HERE/graft_worker.py" --graft-bin "$GRAFT_BIN" --model "$MODEL" --discovery-backend file \
    --graft-arg=--threads --graft-arg="$THREADS" --graft-arg=--metrics --graft-log "$WORK/graft$i.log" \
    "${extra[@]}" >"$WORK/worker$i.log" 2>&1 &
  pids+=($!)
done
echo "frontend http://127.0.0.1:$HTTP_PORT (logs and discovery files in $WORK); waiting for $N workers"
for _ in $(seq 1 600); do
  n=$(cat "$WORK"/worker*.log 2>/dev/null | grep -c "graft at http" || true)
  if [ "$n" -ge "$N" ] && curl -sf "http://127.0.0.1:$HTTP_PORT/v1/models" | grep -q '"id"'; then break; fi
  sleep 0.5
done
curl -s "http://127.0.0.1:$HTTP_PORT/v1/models"; echo
grep -h "graft at http" "$WORK"/worker*.log | sed 's/.*graft at/graft at/' || true
wait
