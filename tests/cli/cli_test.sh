#!/usr/bin/env bash
# End-to-end checks of the graft binary as a user runs it: help texts, errors (one clear line,
# exit code 1, no partial output on stdout), and a real generation on the demo model.
# Usage: cli_test.sh GRAFT_BINARY SOURCE_DIR
set -u
GRAFT=$1
SRC=$2
MODEL=$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error NAME EXPECTED_FRAGMENT CODE ARGS...: exit code CODE ("--": 1, a bad input file; 2:
# a bad argument; README "Exit codes"), fragment on stderr, nothing on stdout.
expect_error() {
  local name=$1 fragment=$2 code=$3
  [ "$code" = "--" ] && code=1
  shift 3
  "$GRAFT" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  [ $rc -eq "$code" ] || fail "$name: exit code $rc, expected $code"
  grep -qF -- "$fragment" "$TMP/err" || fail "$name: stderr lacks '$fragment': $(cat "$TMP/err")"
  [ ! -s "$TMP/out" ] || fail "$name: wrote to stdout: $(head -c 200 "$TMP/out")"
  grep -q "Sanitizer\|runtime error" "$TMP/err" && fail "$name: sanitizer report"
}

"$GRAFT" --help >"$TMP/help" || fail "graft --help"
# Every option of every command's --help is described in docs/CLI.md (serve's: or in docs/SERVER.md).
for sub in chat generate perplexity serve inspect fuse convert quantize; do
  docs="$SRC/docs/CLI.md"; [ "$sub" = serve ] && docs="$docs $SRC/docs/SERVER.md"
  for opt in $("$GRAFT" $sub --help | grep -oE '^ +(-[a-zA-Z], ?)?--[a-z][a-z0-9-]*' | grep -oE -- '--[a-z][a-z0-9-]*'); do
    [ "$opt" = --help ] && continue
    cat $docs | grep -q -- "$opt" || fail "graft $sub $opt is not in ${docs//$SRC\//}"
  done
done
grep -q generate "$TMP/help" || fail "graft --help does not list generate"
grep -q serve "$TMP/help" || fail "graft --help does not list serve"
"$GRAFT" serve --help >"$TMP/help" || fail "graft serve --help"
for opt in --model --host --port --ctx-size --parallel --threads --api-key --lora --adapter --lora-scaled \
    --lora-init-without-apply --lora-fuse --metrics --alias --timeout --q-bits --no-mmap --merge-policy --cache-type \
    --lora-dtype; do
  grep -qF -- "$opt" "$TMP/help" || fail "serve --help lacks $opt"
done
"$GRAFT" generate --help >"$TMP/help" || fail "graft generate --help"
for opt in --model --prompt --prompt-file --chat --system --max-tokens --temp --top-k --top-p --min-p --seed --threads --ctx-size --cache-type --lora-dtype; do
  grep -qF -- "$opt" "$TMP/help" || fail "generate --help lacks $opt"
done

expect_error missing-model "does not exist" -- generate -m "$TMP/nope.gguf" -p hi
printf 'GGUF\x03\x00\x00\x00' >"$TMP/trunc.gguf"
expect_error truncated-gguf "trunc.gguf" -- generate -m "$TMP/trunc.gguf" -p hi
mkdir -p "$TMP/empty"
expect_error no-config "has no config.json" -- generate -m "$TMP/empty" -p hi
echo '{"model_type": "llama",' >"$TMP/empty/config.json"
expect_error bad-config-json "not valid JSON" -- generate -m "$TMP/empty" -p hi
expect_error no-prompt "exactly one of --prompt and --prompt-file" 2 generate -m "$TMP/empty"
expect_error bad-top-p "top-p" 2 generate -m "$TMP/empty" -p hi --top-p 1.5
# --cache-type: f32 | f16 | bf16 (any case), refused while parsing (before any file is read).
for bad in q8_0 f8 "" fp16; do
  expect_error "bad-cache-type-$bad" "--cache-type: '$bad' is not a KV cache type (allowed: f32, f16, bf16)" 2 \
    generate -m "$TMP/empty" -p hi --cache-type "$bad"
done

# Adapters: inspect and fuse on the tiny reference checkpoint with a real PEFT adapter.
TINY=$SRC/tests/fixtures/models/llama_f32
PEFT=$SRC/tests/fixtures/adapters/peft_lora
"$GRAFT" inspect "$PEFT" >"$TMP/out" 2>"$TMP/err" || fail "inspect: $(cat "$TMP/err")"
grep -q "format:   peft" "$TMP/out" || fail "inspect does not report the PEFT format: $(head -5 "$TMP/out")"
# The summary first (layers, modules, rank, effective scale), the per-tensor list only with --verbose.
grep -q "^layers:   0-1 (2 layers)" "$TMP/out" && grep -q "^rank:     4" "$TMP/out" && grep -q "^scale:    2 " "$TMP/out" \
  || fail "inspect summary: $(cat "$TMP/out")"
grep -q "lora_A" "$TMP/out" && fail "inspect without --verbose listed tensors"
"$GRAFT" inspect "$PEFT" --verbose | grep -q "model.layers.1.mlp.down_proj " || fail "inspect --verbose lacks the tensors"
"$GRAFT" inspect "$PEFT" --json | python3 -c '
import json, re, sys
d = json.load(sys.stdin)
assert isinstance(d["metadata"]["lora_alpha"], (int, float)) and isinstance(d["metadata"]["r"], int), d["metadata"]
layers = [int(re.search(r"layers\.(\d+)\.", t["module"]).group(1)) for t in d["targets"]]
assert layers == sorted(layers), layers
assert d["summary"]["ranks"] == [4] and d["summary"]["layers"] == [0, 1, 2], d["summary"]' \
  || fail "inspect --json: typed metadata, layer order, summary"
"$GRAFT" inspect "$PEFT" --base "$TINY" --json >"$TMP/out" 2>"$TMP/err" || fail "inspect --base: $(cat "$TMP/err")"
grep -q '"valid": true' "$TMP/out" || fail "inspect --base --json lacks the validation result"
grep -q 'model.layers.1.mlp.down_proj.weight' "$TMP/out" || fail "inspect --base does not list changed tensors"
"$GRAFT" fuse --base "$TINY" --adapter "$PEFT:0.5" --out "$TMP/fused" >"$TMP/out" 2>"$TMP/err" || fail "fuse: $(cat "$TMP/err")"
[ -f "$TMP/fused/model.safetensors" ] && [ -f "$TMP/fused/config.json" ] && [ -f "$TMP/fused/tokenizer.json" ] \
  || fail "fuse did not write a complete checkpoint: $(ls "$TMP/fused")"
cmp -s "$TMP/fused/model.safetensors" "$TINY/model.safetensors" && fail "fused weights equal the base"
"$GRAFT" generate -m "$TMP/fused" -p "Hello world" --temp 0 -n 4 >/dev/null 2>"$TMP/err" || fail "generate on the fused model: $(cat "$TMP/err")"
# An adapter for another base is refused before anything is written.
expect_error fuse-wrong-base "does not match the base" -- fuse --base "$SRC/tests/fixtures/models/qwen3_f32" \
  --adapter "$PEFT" --out "$TMP/never"
[ -e "$TMP/never" ] && fail "a refused fuse created its output directory"
expect_error fuse-bad-scale "is not a finite number" 2 fuse --base "$TINY" --adapter "$PEFT:abc" --out "$TMP/never"
expect_error fuse-bad-policy "RankWiseF32" -- fuse --base "$TINY" --adapter "$PEFT" --out "$TMP/never" --policy Fancy
expect_error fuse-existing-out "not empty" 2 fuse --base "$TINY" --adapter "$PEFT" --out "$TMP/fused"
# Phi-3: fuse writes the fused qkv_proj / gate_up_proj names again (what transformers reads), and the
# fused checkpoint generates what --lora on the base generates.
PHI3=$SRC/tests/fixtures/models/phi3_f32
PHI3_PEFT=$SRC/tests/fixtures/engine_adapters/phi3_f32/peft_lora
"$GRAFT" fuse --base "$PHI3" --adapter "$PHI3_PEFT" --out "$TMP/phi3_fused" >"$TMP/out" 2>"$TMP/err" || fail "fuse phi3: $(cat "$TMP/err")"
head -c 4096 "$TMP/phi3_fused/model.safetensors" | grep -aq 'model.layers.2.self_attn.qkv_proj.weight' \
  && head -c 4096 "$TMP/phi3_fused/model.safetensors" | grep -aq 'model.layers.2.mlp.gate_up_proj.weight' \
  || fail "fuse phi3 did not write the fused tensor names"
head -c 4096 "$TMP/phi3_fused/model.safetensors" | grep -aq 'q_proj.weight' && fail "fuse phi3 wrote split q_proj tensors"
"$GRAFT" generate -m "$TMP/phi3_fused" -p "Hello world" --temp 0 -n 8 >"$TMP/phi3_a" 2>"$TMP/err" || fail "generate phi3 fused: $(cat "$TMP/err")"
"$GRAFT" generate -m "$PHI3" -p "Hello world" --temp 0 -n 8 --lora "$PHI3_PEFT" >"$TMP/phi3_b" 2>"$TMP/err" || fail "generate phi3 --lora: $(cat "$TMP/err")"
cmp -s "$TMP/phi3_a" "$TMP/phi3_b" || fail "phi3: fused checkpoint and --lora generate different text"
# Mixture of experts (qwen3_moe, mixtral): generate from safetensors and GGUF, a token reads the
# router and 2 of the experts (the report says so), inspect --base binds the adapters (attention
# LoRA; PEFT target_parameters and mlx-lm LoRASwitchLinear on the experts), fuse writes a checkpoint
# that generates what --lora generates; an expert adapter of the other model is refused by name.
for MOE in qwen3_moe_f32 mixtral_f32; do
  M=$SRC/tests/fixtures/models/$MOE
  "$GRAFT" generate -m "$M" -p "Hello world" --temp 0 -n 8 >"$TMP/moe_base" 2>"$TMP/err" || fail "generate $MOE: $(cat "$TMP/err")"
  grep -q "weights read per token" "$TMP/err" || fail "generate $MOE: no weights report: $(cat "$TMP/err")"
  for KIND in peft_lora peft_experts mlx_switch; do
    A=$SRC/tests/fixtures/engine_adapters/$MOE/$KIND
    "$GRAFT" inspect "$A" --base "$M" >"$TMP/insp" 2>"$TMP/err" || fail "inspect --base $MOE/$KIND: $(cat "$TMP/err")"
    grep -q "binds to" "$TMP/insp" || fail "inspect --base $MOE/$KIND does not bind: $(cat "$TMP/insp")"
    rm -rf "$TMP/${MOE}_fused"
    "$GRAFT" fuse --base "$M" --adapter "$A" --out "$TMP/${MOE}_fused" >"$TMP/out" 2>"$TMP/err" || fail "fuse $MOE/$KIND: $(cat "$TMP/err")"
    "$GRAFT" generate -m "$TMP/${MOE}_fused" -p "Hello world" --temp 0 -n 8 >"$TMP/moe_a" 2>"$TMP/err" || fail "generate $MOE/$KIND fused: $(cat "$TMP/err")"
    "$GRAFT" generate -m "$M" -p "Hello world" --temp 0 -n 8 --lora "$A" >"$TMP/moe_b" 2>"$TMP/err" || fail "generate $MOE/$KIND --lora: $(cat "$TMP/err")"
    cmp -s "$TMP/moe_a" "$TMP/moe_b" || fail "$MOE/$KIND: fused checkpoint and --lora generate different text"
    cmp -s "$TMP/moe_a" "$TMP/moe_base" && fail "$MOE/$KIND: the adapter does not change the text"
  done
done
"$GRAFT" generate -m "$SRC/tests/fixtures/models_gguf/qwen3_moe_q8_0.gguf" -p "Hello world" --temp 0 -n 8 >"$TMP/out" 2>"$TMP/err" \
  || fail "generate qwen3_moe GGUF: $(cat "$TMP/err")"
grep -q "Q8_0" "$TMP/err" || fail "qwen3_moe GGUF: experts not reported as Q8_0: $(cat "$TMP/err")"
expect_error moe-other-experts "mlp.experts.4." -- generate -m "$SRC/tests/fixtures/models/qwen3_moe_f32" -p hi \
  --lora "$SRC/tests/fixtures/engine_adapters/mixtral_f32/peft_experts"
expect_error inspect-missing "no such file or directory" -- inspect "$TMP/no-adapter"
for sub in inspect fuse quantize convert; do "$GRAFT" $sub --help >/dev/null || fail "graft $sub --help"; done

# Adapters in generate: fused (--adapter) and unfused (--lora) give the same greedy text; bad
# scales, adapters for another base, broken files are refused up front.
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --adapter "$PEFT" >"$TMP/gen_fused" 2>"$TMP/err" \
  || fail "generate --adapter: $(cat "$TMP/err")"
grep -q "fused 1 adapter(s) into 14 matrices with DeltaF32, held as F32 x14" "$TMP/err" || fail "no fuse report: $(cat "$TMP/err")"
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --lora "$PEFT" >"$TMP/unfused" 2>"$TMP/err" \
  || fail "generate --lora: $(cat "$TMP/err")"
cmp -s "$TMP/gen_fused" "$TMP/unfused" || fail "fused and unfused greedy text differ"
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 >"$TMP/base" 2>/dev/null
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --lora-scaled "$PEFT:0" >"$TMP/zero" 2>/dev/null
cmp -s "$TMP/base" "$TMP/zero" || fail "--lora-scaled DIR:0 differs from the base model"
cmp -s "$TMP/base" "$TMP/gen_fused" && fail "the adapter changed nothing"
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --adapter-scaled "$PEFT:0.5" --merge-policy RankWiseF32 \
  >"$TMP/out" 2>"$TMP/err" || fail "--adapter-scaled with --merge-policy: $(cat "$TMP/err")"
grep -q "RankWiseF32" "$TMP/err" || fail "merge policy not reported"
# --lora-dtype: the factors run in 8 bits (reported), the text stays the adapter's; a bad type is
# refused before anything loads.
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --lora "$PEFT" --lora-dtype q8_0 >"$TMP/q8" 2>"$TMP/err" \
  || fail "generate --lora-dtype q8_0: $(cat "$TMP/err")"
grep -q "unfused: 1 adapter(s), 14 term(s), factors q8_0" "$TMP/err" || fail "no q8_0 factor report: $(cat "$TMP/err")"
cmp -s "$TMP/unfused" "$TMP/q8" || fail "--lora-dtype q8_0 changed the greedy text"
expect_error gen-lora-dtype "--lora-dtype: 'int4' is not an adapter factor type" 2 generate -m "$TINY" -p hi \
  --lora "$PEFT" --lora-dtype int4
expect_error gen-nan-scale "is not a finite number" 2 generate -m "$TINY" -p hi --lora-scaled "$PEFT:nan"
expect_error gen-inf-scale "is not a finite number" 2 generate -m "$TINY" -p hi --adapter-scaled "$PEFT:inf"
expect_error gen-text-scale "is not a finite number" 2 generate -m "$TINY" -p hi --adapter-scaled "$PEFT:big"
expect_error gen-no-scale "expected PATH:SCALE" 2 generate -m "$TINY" -p hi --lora-scaled "$PEFT"
expect_error gen-empty-list "empty entry" 2 generate -m "$TINY" -p hi --adapter "$PEFT,"
expect_error gen-missing-adapter "no-adapter" -- generate -m "$TINY" -p hi --lora "$TMP/no-adapter"
expect_error gen-other-base "does not match the base" -- generate -m "$SRC/tests/fixtures/models/qwen3_f32" -p hi \
  --adapter "$PEFT"
expect_error gen-other-base-unfused "does not match the base" -- generate -m "$SRC/tests/fixtures/models/qwen3_f32" -p hi \
  --lora "$PEFT"
# DoRA, LoKr and LoHa: fused and unfused give the same greedy text, at scale 1 and 0.5; inspect names them.
for fx in peft_dora peft_lokr lycoris_loha/adapter.safetensors; do
  A=$SRC/tests/fixtures/adapters/$fx
  for sc in 1 0.5; do
    "$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --adapter-scaled "$A:$sc" >"$TMP/f" 2>"$TMP/err" \
      || fail "generate --adapter $fx: $(cat "$TMP/err")"
    "$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --lora-scaled "$A:$sc" >"$TMP/u" 2>"$TMP/err" \
      || fail "generate --lora $fx: $(cat "$TMP/err")"
    cmp -s "$TMP/f" "$TMP/u" || fail "$fx at $sc: fused and unfused greedy text differ"
  done
done
"$GRAFT" inspect "$SRC/tests/fixtures/adapters/peft_dora" -v >"$TMP/insp" || fail "inspect peft_dora"
grep -q " dora " "$TMP/insp" && grep -q "magnitude m" "$TMP/insp" || fail "inspect does not show DoRA: $(cat "$TMP/insp")"
"$GRAFT" inspect "$SRC/tests/fixtures/adapters/peft_loha" -v | grep -q " loha " || fail "inspect does not show LoHa"
mkdir -p "$TMP/trunc_adapter"
cp "$PEFT/adapter_config.json" "$TMP/trunc_adapter/"
head -c 1000 "$PEFT/adapter_model.safetensors" >"$TMP/trunc_adapter/adapter_model.safetensors"
expect_error gen-truncated-adapter "adapter_model.safetensors" -- generate -m "$TINY" -p hi --adapter "$TMP/trunc_adapter"
expect_error gen-tied-lm-head "ties lm_head to embed_tokens" -- generate -m "$SRC/tests/fixtures/models/qwen2_f32" -p hi \
  --lora "$SRC/tests/fixtures/engine_adapters/embed/peft_lm_head_qwen2_f32"
QMODEL=$SRC/tests/fixtures/mlx_quant/models/llama_f32_q4g32
"$GRAFT" generate -m "$QMODEL" -p "Hello world" --temp 0 -n 8 --lora "$QMODEL/adapters" >"$TMP/out" 2>"$TMP/err" \
  || fail "--lora on a quantized base: $(cat "$TMP/err")"
# Fused into a quantized base: requantized to its format by default, dense with --fuse-dense; the
# first stderr line says which (--fuse-requantize, the old opt-in, is still accepted).
for how in "" --fuse-dense --fuse-requantize; do
  "$GRAFT" generate -m "$QMODEL" -p "Hello world" --temp 0 -n 8 --adapter "$QMODEL/adapters" $how \
    >"$TMP/out" 2>"$TMP/err" || fail "fused into a quantized base ($how): $(cat "$TMP/err")"
  want="held as mlx 8-bit x"; [ "$how" = --fuse-dense ] && want="held as F32 x"
  head -1 "$TMP/err" | grep -q "$want" || fail "fused ($how): first line lacks '$want': $(head -1 "$TMP/err")"
done
expect_error fuse-quantized "fuse --dequantize" -- fuse --base "$QMODEL" --adapter "$QMODEL/adapters" --out "$TMP/never"
"$GRAFT" fuse --base "$QMODEL" --adapter "$QMODEL/adapters" --out "$TMP/dq" --dequantize 2>"$TMP/err" \
  || fail "fuse --dequantize: $(cat "$TMP/err")"
grep -q '"quantization"' "$TMP/dq/config.json" && fail "fuse --dequantize kept the quantization block"
"$GRAFT" generate -m "$TMP/dq" -p "Hello world" --temp 0 -n 4 >/dev/null 2>"$TMP/err" \
  || fail "generate on a dequantized fuse: $(cat "$TMP/err")"
expect_error fuse-dequantize-dense "is not a quantized checkpoint" 2 fuse --base "$TINY" --adapter "$PEFT" \
  --out "$TMP/never" --dequantize
expect_error fuse-tied-lm-head "ties lm_head to embed_tokens" -- fuse --base "$SRC/tests/fixtures/models/qwen2_f32" \
  --adapter "$SRC/tests/fixtures/engine_adapters/embed/peft_lm_head_qwen2_f32" --out "$TMP/never"

# llama.cpp GGUF LoRA adapters (convert_lora_to_gguf.py output): inspect shows the GGUF metadata;
# fused and unfused give the PEFT adapter's greedy text; another architecture is refused by name.
GLORA=$SRC/tests/fixtures/gguf_adapters/llama_f32_lora.q8_0.gguf
ELORA=$SRC/tests/fixtures/engine_adapters/llama_f32/peft_lora
"$GRAFT" inspect "$GLORA" --base "$TINY" -v >"$TMP/out" 2>"$TMP/err" || fail "inspect GGUF adapter: $(cat "$TMP/err")"
grep -q "format:   gguf" "$TMP/out" || fail "inspect does not report the GGUF format: $(head -5 "$TMP/out")"
grep -q "adapter.lora.alpha: 8" "$TMP/out" || fail "inspect lacks the GGUF metadata"
grep -q "tensor_types: F16 x14, Q8_0 x14" "$TMP/out" || fail "inspect lacks the stored tensor types"
grep -q "model.layers.0.self_attn.q_proj.weight" "$TMP/out" || fail "inspect --base does not bind GGUF names"
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --adapter "$ELORA" >"$TMP/peft_text" 2>/dev/null
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --adapter "$GLORA" >"$TMP/gguf_fused" 2>"$TMP/err" \
  || fail "generate --adapter GGUF: $(cat "$TMP/err")"
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --lora "$GLORA" >"$TMP/gguf_unfused" 2>"$TMP/err" \
  || fail "generate --lora GGUF: $(cat "$TMP/err")"
cmp -s "$TMP/gguf_fused" "$TMP/peft_text" || fail "GGUF adapter (fused) text differs from the PEFT adapter's"
cmp -s "$TMP/gguf_unfused" "$TMP/peft_text" || fail "GGUF adapter (unfused) text differs from the PEFT adapter's"
expect_error gguf-arch "maybe wrong base model?" -- generate -m "$TINY" -p hi \
  --lora "$SRC/tests/fixtures/gguf_adapters/qwen2_f32_lora.f32.gguf"
expect_error gguf-model-as-adapter "general.type is missing" -- generate -m "$TINY" -p hi \
  --adapter "$SRC/tests/fixtures/gguf/small.gguf"
"$GRAFT" fuse --base "$TINY" --adapter "$GLORA" --out "$TMP/gfused" >/dev/null 2>"$TMP/err" || fail "fuse GGUF: $(cat "$TMP/err")"
"$GRAFT" convert --base "$TINY" --adapter "$ELORA" --out "$TMP/conv.gguf" 2>"$TMP/err" || fail "convert: $(cat "$TMP/err")"
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 12 --lora "$TMP/conv.gguf" >"$TMP/conv_text" 2>"$TMP/err" \
  || fail "generate --lora converted: $(cat "$TMP/err")"
cmp -s "$TMP/conv_text" "$TMP/peft_text" || fail "graft-converted GGUF adapter text differs from the PEFT adapter's"
expect_error convert-existing "refusing to overwrite" 2 convert --base "$TINY" --adapter "$ELORA" --out "$TMP/conv.gguf"
expect_error convert-lokr "low-rank pairs only" 3 convert --base "$TINY" --adapter "$SRC/tests/fixtures/adapters/peft_lokr" \
  --out "$TMP/never.gguf"
[ -e "$TMP/never.gguf" ] && fail "a refused convert wrote its output"

# graft quantize: writes an mlx-lm checkpoint graft loads; refuses bad settings and existing output.
"$GRAFT" quantize -m "$TINY" -o "$TMP/q4" --bits 4 --group-size 32 2>"$TMP/err" || fail "quantize: $(cat "$TMP/err")"
grep -q '"bits": 4' "$TMP/q4/config.json" || fail "quantized config lacks the quantization block"
"$GRAFT" generate -m "$TMP/q4" -p "Hello world" --temp 0 -n 4 >/dev/null 2>"$TMP/err" || fail "generate on quantized: $(cat "$TMP/err")"
"$GRAFT" generate -m "$TINY" -p "Hello world" --temp 0 -n 4 --q-bits 8 --q-group-size 32 >/dev/null 2>"$TMP/err" \
  || fail "generate --q-bits: $(cat "$TMP/err")"
# Values no command takes are bad arguments (exit 2), refused before anything is read.
expect_error gen-q-bits "--q-bits: '2' is not one of 4, 8" 2 generate -m "$TINY" -p hi --q-bits 2
expect_error gen-q-group "--q-group-size: '48' is not one of 32, 64, 128" 2 generate -m "$TINY" -p hi --q-bits 4 \
  --q-group-size 48
expect_error quantize-bits "--bits: '3' is not one of 4, 8" 2 quantize -m "$TINY" -o "$TMP/q3" --bits 3
expect_error quantize-group "--group-size: '16' is not one of 32, 64, 128" 2 quantize -m "$TINY" -o "$TMP/q3" \
  --group-size 16
[ ! -e "$TMP/q3" ] || fail "quantize --bits 3 wrote $TMP/q3"
expect_error quantize-existing "not empty" 2 quantize -m "$TINY" -o "$TMP/q4"
# A mistyped option names the nearest ones of its command; one too far from any gets no guess.
expect_error typo-temp "--tmp: did you mean --temp?" 2 generate -m "$TINY" -p hi --tmp 0
expect_error typo-parallel "--parralel: did you mean --parallel?" 2 serve -m "$TINY" --parralel 2
expect_error typo-none "not expected: --zzzzzzzz" 2 generate -m "$TINY" -p hi --zzzzzzzz
grep -q "did you mean" "$TMP/err" && fail "typo-none: a guess for an option nothing resembles"
expect_error gen-negative-temp "--temp: '-1' is not a number in [0, 1e+06]" 2 generate -m "$TINY" -p hi --temp -1
[ -e "$TMP/q3" ] && fail "a refused quantize created its output directory"

if [ -f "$MODEL" ]; then
  expect_error prompt-too-long "does not fit the context size 16" 4 generate -m "$MODEL" --ctx-size 16 \
    -p "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen"
  "$GRAFT" generate -m "$MODEL" -p "The capital of France is" --temp 0 -n 8 -t 2 >"$TMP/out" 2>"$TMP/err" \
    || fail "generate on the demo model: $(cat "$TMP/err")"
  grep -q "Paris" "$TMP/out" || fail "greedy continuation lacks 'Paris': $(cat "$TMP/out")"
  grep -q "tokens/s" "$TMP/err" || fail "no speed report on stderr"
  # The KV cache type is reported with its bytes per token (SmolLM2-135M: 30 layers x keys and values
  # x 192 = 11520 elements): f16 by default, f32 and bf16 on request, each still greedy-correct here.
  grep -q "^kv cache: f16, 23040 bytes per token" "$TMP/err" || fail "no default f16 cache report: $(cat "$TMP/err")"
  for ct in f32:46080 bf16:23040 BF16:23040; do
    "$GRAFT" generate -m "$MODEL" -p "The capital of France is" --temp 0 -n 8 -t 2 --cache-type "${ct%%:*}" \
      >"$TMP/out" 2>"$TMP/err" || fail "generate --cache-type ${ct%%:*}: $(cat "$TMP/err")"
    grep -q "^kv cache: $(echo "${ct%%:*}" | tr A-Z a-z), ${ct##*:} bytes per token" "$TMP/err" \
      || fail "--cache-type ${ct%%:*} not reported: $(cat "$TMP/err")"
    grep -q "Paris" "$TMP/out" || fail "--cache-type ${ct%%:*}: greedy continuation lacks 'Paris': $(cat "$TMP/out")"
  done
  # Same seed, same sampled text; the stop string is honoured and not printed.
  "$GRAFT" generate -m "$MODEL" -p "Once upon a time" --temp 0.9 --seed 7 -n 12 >"$TMP/a" 2>/dev/null
  "$GRAFT" generate -m "$MODEL" -p "Once upon a time" --temp 0.9 --seed 7 -n 12 >"$TMP/b" 2>/dev/null
  cmp -s "$TMP/a" "$TMP/b" || fail "same seed gave different text"
  "$GRAFT" generate -m "$MODEL" -p "The capital of France is" --temp 0 -n 16 --stop "Paris" >"$TMP/out" 2>"$TMP/err"
  grep -q "stop: word" "$TMP/err" || fail "stop string did not stop generation: $(cat "$TMP/err")"
  grep -q "Paris" "$TMP/out" && fail "stop string was printed"
  "$GRAFT" generate -m "$MODEL" --chat --system "You are terse." -p "Say hello." --temp 0 -n 8 >"$TMP/out" 2>"$TMP/err" \
    || fail "chat generation: $(cat "$TMP/err")"
  # The small PEFT DoRA, LoHa and LoKr adapters (tests/fixtures/smollm2_kinds, answers start "Beep boop!"):
  # --adapter and --lora print the same greedy text on the F32 path (the token-level checks against PEFT
  # are in tests/runtime/smollm2_kinds_test.cpp).
  for k in peft_dora peft_loha peft_lokr; do
    for how in adapter lora; do
      "$GRAFT" generate -m "$MODEL" --dtype f32 --chat -p "What is the history of the internet?" --temp 0 -n 12 \
        --$how "$SRC/tests/fixtures/smollm2_kinds/$k" >"$TMP/$how" 2>"$TMP/err" || fail "$k --$how: $(cat "$TMP/err")"
    done
    grep -q "^Beep boop!" "$TMP/adapter" || fail "$k --adapter: the adapter's style is missing: $(cat "$TMP/adapter")"
    cmp -s "$TMP/adapter" "$TMP/lora" || fail "$k: --adapter and --lora differ: $(cat "$TMP/adapter") | $(cat "$TMP/lora")"
  done
else
  echo "SKIP model checks: $MODEL missing (make models)"
fi

[ $failures -eq 0 ] && echo "cli tests passed" 
exit $((failures > 0))
