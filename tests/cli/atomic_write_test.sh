#!/usr/bin/env bash
# fuse and quantize write a whole checkpoint or nothing: a full disk (a file size limit, prlimit
# --fsize) gives exit 5 and nothing at the output path; SIGINT/SIGTERM at random points leave
# either nothing or a complete checkpoint and no staging directory; SIGKILL leaves at most a
# staging directory beside the output (never at it), which the next run removes.
# Usage: atomic_write_test.sh GRAFT_BINARY SOURCE_DIR
set -u
GRAFT=$1
SRC=$2
TINY=$SRC/tests/fixtures/models/llama_f32
PEFT=$SRC/tests/fixtures/adapters/peft_lora
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Each command as an argument list ending with its output option: run as a simple command, so that
# `$!` of a background run is graft's own pid (a shell function would run in a subshell).
fuse=("$GRAFT" fuse --base "$TINY" --adapter "$PEFT" -t 1 --out)
quantize=("$GRAFT" quantize -m "$TINY" --bits 4 --group-size 32 -o)

complete() {  # a finished checkpoint: weights, config and tokenizer, each non-empty
  for f in model.safetensors config.json tokenizer.json; do [ -s "$1/$f" ] || return 1; done
}
no_staging() { ! ls -a "$TMP" | grep -q "^\.${1:-.*}\.graft-tmp"; }  # [TARGET_NAME]

for cmd in fuse quantize; do
  # A full disk: every write is checked; nothing appears at the output path.
  declare -n argv=$cmd
  prlimit --fsize=50000 -- "${argv[@]}" "$TMP/full" >/dev/null 2>"$TMP/err"
  rc=$?
  [ $rc -eq 5 ] || fail "$cmd on a full disk: exit $rc, expected 5: $(cat "$TMP/err")"
  grep -q "file size limit\|disk full\|File too large" "$TMP/err" || fail "$cmd on a full disk: message: $(cat "$TMP/err")"
  [ -e "$TMP/full" ] && fail "$cmd on a full disk left '$TMP/full'"
  no_staging || fail "$cmd on a full disk left a staging directory: $(ls -a "$TMP")"

  # A complete run, for reference (and the refusal of an existing output).
  "${argv[@]}" "$TMP/ok" >/dev/null 2>"$TMP/err" || fail "$cmd: $(cat "$TMP/err")"
  complete "$TMP/ok" || fail "$cmd wrote an incomplete checkpoint: $(ls "$TMP/ok")"
  "${argv[@]}" "$TMP/ok" >/dev/null 2>"$TMP/err"
  rc=$?
  [ $rc -eq 2 ] || fail "$cmd over an existing checkpoint: exit $rc, expected 2"
  rm -rf "$TMP/ok"

  # Signals at random points (0-150 ms covers start-up, the merge, the writes and the rename).
  for i in $(seq 1 12); do
    for sig in INT TERM KILL; do
      out=$TMP/sig-$sig-$i
      "${argv[@]}" "$out" >/dev/null 2>&1 &
      pid=$!
      sleep "0.$(printf '%03d' $((RANDOM % 150)))"
      kill -s $sig $pid 2>/dev/null
      wait $pid
      rc=$?
      if [ -e "$out" ] && ! complete "$out"; then fail "$cmd killed by SIG$sig left an incomplete '$out': $(ls "$out")"; fi
      if [ $sig != KILL ]; then
        case $rc in 0|130|143) ;; *) fail "$cmd killed by SIG$sig: exit $rc" ;; esac
        [ $rc -ne 0 ] && [ -e "$out" ] && fail "$cmd interrupted by SIG$sig (exit $rc) left '$out'"
        no_staging "sig-$sig-$i" || fail "$cmd killed by SIG$sig left a staging directory: $(ls -a "$TMP")"
      fi
      rm -rf "$out"
    done
  done
  # Staging directories left by SIGKILL belong to dead processes: the next run removes them.
  for d in $(ls -a "$TMP" | grep "graft-tmp"); do
    target=${d#.}
    target=${target%%.graft-tmp-*}
    "${argv[@]}" "$TMP/$target" >/dev/null 2>&1 || fail "$cmd after SIGKILL into '$target'"
    rm -rf "${TMP:?}/$target"
  done
  no_staging || fail "$cmd did not remove stale staging directories: $(ls -a "$TMP")"
  unset -n argv
done

[ $failures -eq 0 ] && echo "atomic writes: all checks passed"
exit $((failures > 0))
