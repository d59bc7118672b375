#!/usr/bin/env python3
"""Converts committed PEFT adapters to llama.cpp GGUF LoRA adapters with llama.cpp's own converter.

Developer tool (not run by CI); outputs are committed under tests/fixtures/gguf_adapters/.
Needs: torch, transformers, safetensors, numpy (the /work/pyref stack) and llama.cpp's sources, taken from
the llama-cpp-python sdist (`pip download --no-binary :all: --no-deps llama-cpp-python`, unpack; pass
--llama-cpp <sdist>/vendor/llama.cpp). The converter is run as a subprocess with its own gguf-py.

    python3 tools/gen_gguf_lora_fixtures.py --llama-cpp /tmp/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf] [--llama-cpp-reference [--only-llama-cpp-reference]]

Writes (tests/fixtures/gguf_adapters/):
  llama_f32_lora.<t>.gguf   t = f32, f16, bf16, q8_0: convert_lora_to_gguf.py --outtype t of
                            tests/fixtures/engine_adapters/llama_f32/peft_lora (PEFT r=4, alpha=8, q,k,v,o,gate,
                            up,down of the tiny llama; llama architecture, so q/k lora_b rows are permuted by the
                            converter for llama.cpp's RoPE layout). q8_0 quantizes only tensors whose row length is
                            a multiple of 32 (lora_a [r, in]); lora_b [out, r=4] falls back to F16, as llama.cpp does.
  qwen2_f32_lora.f32.gguf   the same for tests/fixtures/engine_adapters/qwen2_f32/peft_lora (qwen2: no permutation).
  llama_f32_embed.f32.gguf  tests/fixtures/engine_adapters/embed/peft_embed_llama_f32 (embed_tokens + q_proj):
                            token_embd pairs in llama.cpp's get_rows layout (lora_a transposed by the converter).
  smollm2_pirate.<t>.gguf   demo/adapters/pirate-peft (bf16 factors) converted against SmolLM2-135M-Instruct's
                            config.json (written here from the GGUF's metadata: the converter needs only the config).
                            Committed: --outtype q8_0 only (3.8 MB; lora_a Q8_0, lora_b [out, 8] F16), the smallest
                            type the converter writes; it reproduces PEFT's greedy tokens.
  smollm2_pirate_llamacpp.json  (with --llama-cpp-reference) llama.cpp's own greedy tokens for the 3 reference
                            prompts (exact ids) with that adapter, through its C API (tools/llama_cpp_greedy.cpp).
  manifest.json             converter version (llama-cpp-python sdist), command lines, every tensor's GGML type and
                            shape (gguf-py GGUFReader), metadata keys.
Deterministic: rerun and commit the outputs if a fixture must change.
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import fixturelib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf_adapters")
TINY = [
    ("llama_f32_lora", "tests/fixtures/engine_adapters/llama_f32/peft_lora", "tests/fixtures/models/llama_f32",
     ["f32", "f16", "bf16", "q8_0"]),
    ("qwen2_f32_lora", "tests/fixtures/engine_adapters/qwen2_f32/peft_lora", "tests/fixtures/models/qwen2_f32", ["f32"]),
    ("llama_f32_embed", "tests/fixtures/engine_adapters/embed/peft_embed_llama_f32", "tests/fixtures/models/llama_f32",
     ["f32"]),
]


def convert(llama_cpp, adapter_dir, base_dir, outtype, out_path):
    cmd = [sys.executable, os.path.join(llama_cpp, "convert_lora_to_gguf.py"), "--base", base_dir,
           "--outtype", outtype, "--outfile", out_path, adapter_dir]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit(f"converter failed: {' '.join(cmd)}")
    return cmd


def describe(llama_cpp, path):
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    import gguf  # llama.cpp's own gguf-py
    r = gguf.GGUFReader(path)
    meta = {}
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        v = f.contents()
        meta[f.name] = v if isinstance(v, (str, int, float, list)) else str(v)
    tensors = {t.name: {"type": t.tensor_type.name, "shape": [int(x) for x in reversed(t.shape.tolist())]}
               for t in r.tensors}
    return {"file": os.path.basename(path), "bytes": os.path.getsize(path),
            "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(), "metadata": meta, "tensors": tensors}


def smollm2_config(llama_cpp, gguf_path, out_dir):
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    import gguf
    r = gguf.GGUFReader(gguf_path)
    f = lambda k: r.fields[k].contents()  # noqa: E731
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": f("llama.embedding_length"), "intermediate_size": f("llama.feed_forward_length"),
        "num_hidden_layers": f("llama.block_count"), "num_attention_heads": f("llama.attention.head_count"),
        "num_key_value_heads": f("llama.attention.head_count_kv"),
        "rms_norm_eps": float(f("llama.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(f("llama.rope.freq_base")), "max_position_embeddings": f("llama.context_length"),
        "vocab_size": len(r.fields["tokenizer.ggml.tokens"].data), "tie_word_embeddings": True,
        "bos_token_id": f("tokenizer.ggml.bos_token_id"), "eos_token_id": f("tokenizer.ggml.eos_token_id"),
        "hidden_act": "silu", "torch_dtype": "bfloat16",
    }
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    return cfg


def llama_cpp_reference(llama_cpp, gguf_path, adapter, out_path):
    """llama.cpp's own greedy tokens (argmax of llama_get_logits_ith, EOS not special) with the GGUF adapter at
    scale 1, for the exact prompt ids of tests/fixtures/smollm2/pirate_peft_reference.json: tools/llama_cpp_greedy.cpp
    compiled against the sdist's libllama (built with cmake -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF --target llama)."""
    build_bin = os.path.join(llama_cpp, "build", "bin")
    with tempfile.TemporaryDirectory() as tmp:
        exe = fixturelib.build_llama_cpp_greedy(ROOT, llama_cpp, build_bin, tmp)
        ref = json.load(open(os.path.join(ROOT, "tests/fixtures/smollm2/pirate_peft_reference.json")))
        out = {"generator": "tools/gen_gguf_lora_fixtures.py --llama-cpp-reference (tools/llama_cpp_greedy.cpp)",
               "llama_cpp": os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(llama_cpp)))),
               "model": os.path.basename(gguf_path), "adapter": os.path.relpath(adapter, ROOT),
               "compute": "llama.cpp CPU backend, 2 threads: Q4_1 weights x Q8_1-quantized activations, LoRA terms "
                          "added unfused (Q8_0 lora_a, F16 lora_b), scale 1 * alpha / rank",
               "new_tokens": ref["new_tokens"], "prompts": []}
        for p in ref["prompts"]:
            cmd = [exe, gguf_path, adapter, str(ref["new_tokens"])] + [str(i) for i in p["ids"]]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
            if r.returncode != 0:
                sys.stderr.write(r.stderr[-3000:])
                raise SystemExit("llama_cpp_greedy failed")
            greedy = json.loads(r.stdout)
            out["prompts"].append({"ids": p["ids"], "greedy": greedy, "equals_peft_greedy": greedy == p["greedy"]})
            print("llama.cpp greedy == PEFT greedy:", greedy == p["greedy"])
    with open(out_path, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True)
    ap.add_argument("--gguf", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    # q8_0 (3.8 MB) is the smallest type the converter writes and reproduces PEFT's greedy tokens
    # (tests/runtime/gguf_adapters_test.cpp); f16 is 4.9 MB, f32 9.8 MB. Pass others to compare.
    ap.add_argument("--smollm2-outtypes", default="q8_0")
    ap.add_argument("--llama-cpp-reference", action="store_true",
                    help="also record llama.cpp's greedy tokens with smollm2_pirate.q8_0.gguf (needs <llama-cpp>/build/bin/"
                    "libllama.so: cmake -B build -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF && cmake --build build --target llama)")
    ap.add_argument("--only-llama-cpp-reference", action="store_true")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    if args.llama_cpp_reference:
        llama_cpp_reference(args.llama_cpp, args.gguf, os.path.join(OUT, "smollm2_pirate.q8_0.gguf"),
                            os.path.join(OUT, "smollm2_pirate_llamacpp.json"))
        if args.only_llama_cpp_reference:
            return
    version = os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(args.llama_cpp))))
    manifest = {"generator": "tools/gen_gguf_lora_fixtures.py", "converter": "convert_lora_to_gguf.py from " + version,
                "files": {}}
    for stem, adapter, base, types in TINY:
        for t in types:
            out = os.path.join(OUT, f"{stem}.{t}.gguf")
            cmd = convert(args.llama_cpp, os.path.join(ROOT, adapter), os.path.join(ROOT, base), t, out)
            d = describe(args.llama_cpp, out)
            d["source_adapter"] = adapter
            d["command"] = " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd[1:])
            manifest["files"][os.path.basename(out)] = d
    if os.path.exists(args.gguf):
        with tempfile.TemporaryDirectory() as tmp:
            base_dir = os.path.join(tmp, "smollm2_config")
            os.makedirs(base_dir)
            manifest["smollm2_config"] = smollm2_config(args.llama_cpp, args.gguf, base_dir)
            for t in args.smollm2_outtypes.split(","):
                out = os.path.join(OUT, f"smollm2_pirate.{t}.gguf")
                cmd = convert(args.llama_cpp, os.path.join(ROOT, "demo/adapters/pirate-peft"), base_dir, t, out)
                d = describe(args.llama_cpp, out)
                d["source_adapter"] = "demo/adapters/pirate-peft"
                d["command"] = " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd[1:])
                d["tensors"] = {"count": len(d["tensors"]),
                                "types": sorted({v["type"] for v in d["tensors"].values()})}
                manifest["files"][os.path.basename(out)] = d
    with open(os.path.join(OUT, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")
    for name, d in manifest["files"].items():
        print(f"{name}: {d['bytes']} bytes")


if __name__ == "__main__":
    main()
