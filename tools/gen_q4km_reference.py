#!/usr/bin/env python3
"""llama.cpp's Q4_K_M SmolLM2 and its greedy tokens, as a small fixture CI can check graft against.

Developer tool (not run by CI; CI cannot build llama.cpp and PyPI ships no Q4_K_M SmolLM2). Writes
tests/fixtures/smollm2/q4_k_m_llamacpp.json; tests/engine/smollm2_q4km_test.cpp reads it.

    python3 tools/gen_q4km_reference.py --llama-cpp /path/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        --llama-bin /path/llama.cpp/build-avx2/bin [--llama-cpp-label L] [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]

  1. `llama-quantize --allow-requantize` turns the demo Q4_1 GGUF (the file CI downloads) into
     Q4_K_M: llama.cpp dequantizes each Q4_1 tensor to F32 and quantizes it with its reference
     quantizers (no importance matrix): Q4_K, Q6_K where its Q4_K_M rules want more bits (ffn_down
     and attn_v of layers 0-2, 5, 8, ..., 26-29), and Q5_0 / Q8_0 where a row of 576 does not divide
     into 256-element super-blocks. token_embd is Q8_0 in both files, so it is copied.
  2. For every tensor: its type, shape and the CRC-32 (zlib) of its bytes. The test requantizes
     the Q4_1 file with graft's quantizers (graft/core/gguf_quantize.h) and checks each CRC, so it
     holds the same file without committing 100 MB.
  3. llama.cpp's own greedy tokens on that file for the first 3 prompts of
     tests/fixtures/smollm2/greedy_reference.json (exact ids), 32 steps, with the top-2 logit gap at
     each step and its 8 highest logits (ids and values): tools/llama_cpp_greedy.cpp through its C API (CPU backend; K-quant and Q5_0/Q8_0
     weights against Q8_K / Q8_0-quantized activations).
Needs: the `gguf` package (llama.cpp's gguf-py), a C++ compiler, llama.cpp built with
`cmake -DGGML_NATIVE=OFF -DGGML_AVX2=ON` (no AMX: its kernels crashed at batch > 1 in these VMs).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zlib
import fixturelib  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "smollm2", "q4_k_m_llamacpp.json")
NEW_TOKENS = 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp source tree (headers, gguf-py)")
    ap.add_argument("--llama-bin", required=True, help="its build's bin/ (llama-quantize, libllama.so)")
    ap.add_argument("--llama-cpp-label", default="llama_cpp_python-0.3.36",
                    help="what the llama.cpp tree is (recorded in the fixture)")
    ap.add_argument("--gguf", default=os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.llama_cpp, "gguf-py"))
    import gguf

    ref = json.load(open(os.path.join(ROOT, "tests", "fixtures", "smollm2", "greedy_reference.json")))
    with tempfile.TemporaryDirectory() as tmp:
        q4km = os.path.join(tmp, "SmolLM2-135M-Instruct.Q4_K_M.gguf")
        quantize = [os.path.join(args.llama_bin, "llama-quantize"), "--allow-requantize", args.gguf, q4km, "Q4_K_M", "2"]
        subprocess.run(quantize, check=True, capture_output=True)
        src = gguf.GGUFReader(args.gguf)
        src_types = {t.name: t.tensor_type.name for t in src.tensors}
        r = gguf.GGUFReader(q4km)
        tensors = [{"name": t.name, "type": t.tensor_type.name, "source_type": src_types[t.name],
                    "shape": [int(x) for x in reversed(t.shape.tolist())],
                    "crc32": zlib.crc32(bytes(t.data.tobytes())) & 0xffffffff} for t in r.tensors]
        exe = fixturelib.build_llama_cpp_greedy(ROOT, args.llama_cpp, args.llama_bin, tmp)
        prompts = []
        for p in ref["prompts"][:3]:
            out = subprocess.run([exe, "--detail", q4km, "-", str(NEW_TOKENS)] + [str(i) for i in p["ids"]],
                                 check=True, capture_output=True, text=True, timeout=1200)
            g = json.loads(out.stdout)
            prompts.append({"kind": p["kind"], "ids": p["ids"], "greedy": g["greedy"], "top2_gap": g["top2_gap"],
                            "top_ids": g["top_ids"], "top_logits": g["top_logits"],
                            "equals_f32_transformers_greedy": g["greedy"] == p["greedy"]})
            print(p["kind"], "llama.cpp Q4_K_M greedy == transformers F32 (Q4_1) greedy:", g["greedy"] == p["greedy"],
                  "min gap %.4f" % min(g["top2_gap"]))
        meta = {k: r.fields[k].contents() for k in ("general.file_type", "general.quantization_version")}
        out = {
            "generator": "tools/gen_q4km_reference.py",
            "llama_cpp": args.llama_cpp_label,
            "source": {"file": os.path.basename(args.gguf), "bytes": os.path.getsize(args.gguf),
                       "sha256": hashlib.sha256(open(args.gguf, "rb").read()).hexdigest()},
            "quantize_command": "llama-quantize --allow-requantize " + os.path.basename(args.gguf) + " OUT Q4_K_M 2",
            "file_bytes": os.path.getsize(q4km), "metadata": meta,
            "compute": "llama.cpp CPU backend (GGML_NATIVE=OFF, AVX2, no AMX), 2 threads, through its C API",
            "new_tokens": NEW_TOKENS, "tensors": tensors, "prompts": prompts,
        }
    with open(OUT, "w") as fh:
        json.dump(out, fh, indent=1)
        fh.write("\n")
    print("wrote", os.path.relpath(OUT, ROOT), len(tensors), "tensors")


if __name__ == "__main__":
    main()
