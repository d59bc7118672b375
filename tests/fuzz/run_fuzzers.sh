#!/usr/bin/env bash
# Runs each libFuzzer harness for a set time (`make fuzz`): corpus seeded from the committed
# fixtures, crashers copied into tests/fuzz/regressions/<harness>/ (replayed by `make test`; commit
# them with the fix), and one summary line per harness with executions, coverage and the result.
# Usage: run_fuzzers.sh BUILD_DIR SECONDS_PER_HARNESS HARNESS...
set -u
BUILD=$1
SECONDS_EACH=$2
shift 2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
summary=$BUILD/fuzz_summary.txt
: >"$summary"
status=0
for h in "$@"; do
  corpus=$BUILD/corpus/$h
  artifacts=$BUILD/artifacts/$h
  mkdir -p "$corpus" "$artifacts"
  for seed in $(cat "$BUILD/fuzz_seeds_$h.txt"); do  # seeds under 1 MiB (libFuzzer's -max_len below)
    if [ -d "$seed" ]; then find "$seed" -type f -size -1M -exec cp -n {} "$corpus/" \; 2>/dev/null
    elif [ -f "$seed" ]; then cp -n "$seed" "$corpus/"; fi
  done
  log=$BUILD/fuzz_$h.log
  echo "== fuzz_$h for ${SECONDS_EACH}s (log: $log)"
  "$BUILD/fuzz_$h" "$corpus" -max_total_time="$SECONDS_EACH" -max_len=1048576 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  execs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$" | tail -1)
  last=$(grep -E "^#[0-9]+" "$log" | tail -1)
  cov=$(echo "$last" | grep -o "cov: [0-9]*" | grep -o "[0-9]*")
  ft=$(echo "$last" | grep -o "ft: [0-9]*" | grep -o "[0-9]*")
  corp=$(echo "$last" | grep -o "corp: [0-9]*" | grep -o "[0-9]*")
  result=ok
  if [ $rc -ne 0 ]; then
    result="FOUND (exit $rc)"
    status=1
    mkdir -p "$SRC/tests/fuzz/regressions/$h"
    for a in "$artifacts"/*; do [ -f "$a" ] && cp "$a" "$SRC/tests/fuzz/regressions/$h/"; done
    grep -m3 -E "ERROR|SUMMARY|foreign exception|runtime error" "$log"
  fi
  printf '%-15s %6ss  execs %-10s cov %-6s ft %-7s corpus %-6s %s\n' "$h" "$SECONDS_EACH" "${execs:-?}" \
    "${cov:-?}" "${ft:-?}" "${corp:-?}" "$result" | tee -a "$summary"
done
echo "summary: $summary"
exit $status
