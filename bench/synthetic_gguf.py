#!/usr/bin/env python3
"""A random-weight Llama-architecture GGUF of a chosen shape, written directly with gguf-py (the `gguf`
package from PyPI) and numpy: no torch, no llama.cpp convert_hf_to_gguf.py. For issue 36 (the 3B-shape
row of bench/accuracy.sh): a torch-free stand-in for converting bench/synthetic_model.py's llama-family
checkpoint, same shapes (bench/synthetic_model.py writes safetensors; this writes the GGUF that
llama-quantize then takes to Q4_K_M etc.). Not a test fixture; nothing here is committed output.

    python3 -m venv /tmp/gguf-venv && /tmp/gguf-venv/bin/pip install gguf numpy
    /tmp/gguf-venv/bin/python bench/synthetic_gguf.py --out /tmp/m3b/f16.gguf --hidden 3072 \
        --intermediate 8192 --layers 28 --heads 24 --kv-heads 8 \
        --tokenizer-from models/SmolLM2-135M-Instruct.Q4_1.gguf [--seed 0] [--dtype f16|bf16|f32]
    llama-quantize /tmp/m3b/f16.gguf /tmp/m3b/Q4_K_M.gguf Q4_K_M

The tokenizer is every `tokenizer.*` key of the --tokenizer-from GGUF, copied with its value and type
(string arrays byte for byte); its token count sets the vocabulary (token_embd and output rows).
Tensors carry llama.cpp's names: token_embd, output_norm, output (untied), blk.N.{attn_norm, attn_q,
attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}. Matrices are N(0, 0.02) in --dtype,
passed to the writer row-major [out, in] as convert_hf_to_gguf passes HF weights (the file then lists
ne = [in, out]); norms are F32 ones. Random Q/K need no rotary permutation. Tensors are streamed: header
and tensor infos first, then each tensor generated and written in turn, so peak memory is about one
tensor (the 49k x 3072 embedding: ~0.9 GB), not the model (~6.4 GB of F16 at the 3B shape).

--experts E (with --experts-used K and --expert-intermediate F) writes a qwen3moe file instead (issue
35's MoE row): Qwen3-30B-A3B's tensors and keys as convert_hf_to_gguf writes them, i.e. per layer
attn_q_norm/attn_k_norm (F32 ones over --head-dim), the router ffn_gate_inp [E, hidden] in F32 (convert
keeps it F32 and llama-quantize leaves it), and the experts stacked as ffn_{gate,up}_exps [E, F, hidden]
and ffn_down_exps [E, hidden, F]. Qwen3-30B-A3B's shape with 8 of its 48 layers (what fits in 24 GiB):

    /tmp/gguf-venv/bin/python bench/synthetic_gguf.py --out /tmp/moe/bf16.gguf --dtype bf16 --hidden 2048 \
        --layers 8 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 --experts-used 8 \
        --expert-intermediate 768 --intermediate 6144 --rope-theta 1e6 \
        --tokenizer-from models/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import argparse
import os
import sys
import time

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT, GGUFValueType as VT, LlamaFileType as FT


def bf16_bits(a):
    """float32 array -> bfloat16 bits (round to nearest even) as uint16."""
    u = a.astype(np.float32, copy=False).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def copy_tokenizer(src, writer):
    """Every tokenizer.* key of SRC into WRITER with its type; returns the token count."""
    r = gguf.GGUFReader(src)
    n_vocab = None
    for key, f in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        t = f.types[0]
        if t == VT.ARRAY:
            sub = f.types[1]
            if sub == VT.STRING:  # raw bytes: no decode/encode round trip
                val = [bytes(f.parts[i]) for i in f.data]
            elif sub == VT.ARRAY:
                sys.exit(f"{key}: nested arrays are not supported")
            else:
                val = f.contents()
            writer.add_key_value(key, val, VT.ARRAY, sub_type=sub)
            if key == gguf.Keys.Tokenizer.LIST:
                n_vocab = len(val)
        elif t == VT.STRING:
            writer.add_key_value(key, bytes(f.parts[f.data[0]]), VT.STRING)
        else:
            writer.add_key_value(key, f.contents(), t)
    if n_vocab is None:
        sys.exit(f"{src} has no {gguf.Keys.Tokenizer.LIST}")
    return n_vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-from", required=True, help="a GGUF whose tokenizer.* keys are copied")
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--intermediate", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["f16", "bf16", "f32"], default="f16")
    ap.add_argument("--context", type=int, default=4096, help="llama.context_length")
    ap.add_argument("--rope-theta", type=float, default=10000.0, help="llama.rope.freq_base")
    ap.add_argument("--name", default=None, help="general.name (default: synthetic-<arch>-<params>)")
    ap.add_argument("--head-dim", type=int, default=0, help="default: hidden / heads")
    ap.add_argument("--experts", type=int, default=0, help="a qwen3moe file with this many experts a layer")
    ap.add_argument("--experts-used", type=int, default=8)
    ap.add_argument("--expert-intermediate", type=int, default=768)
    a = ap.parse_args()
    if (not a.head_dim and a.hidden % a.heads) or a.heads % a.kv_heads:
        sys.exit("--hidden must be a multiple of --heads (or give --head-dim), and --heads of --kv-heads")
    H, F, D = a.hidden, a.intermediate, a.head_dim or a.hidden // a.heads
    E, FE = a.experts, a.expert_intermediate
    if E and not 0 < a.experts_used <= E:
        sys.exit("--experts-used must be in 1..--experts")

    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.QWEN3MOE if E else gguf.MODEL_ARCH.LLAMA]
    w = gguf.GGUFWriter(a.out, arch)
    # the tokenizer first (it sets the vocabulary), then the model keys in convert_hf_to_gguf's order
    tok = gguf.GGUFWriter(None, arch)
    V = copy_tokenizer(a.tokenizer_from, tok)

    mats = [("token_embd.weight", (V, H))]
    for i in range(a.layers):
        p = f"blk.{i}."
        mats += [(p + "attn_norm.weight", (H,)),
                 (p + "attn_q.weight", (a.heads * D, H)), (p + "attn_k.weight", (a.kv_heads * D, H)),
                 (p + "attn_v.weight", (a.kv_heads * D, H)), (p + "attn_output.weight", (H, a.heads * D))]
        if E:
            mats += [(p + "attn_q_norm.weight", (D,)), (p + "attn_k_norm.weight", (D,)), (p + "ffn_norm.weight", (H,)),
                     (p + "ffn_gate_inp.weight", (E, H)), (p + "ffn_gate_exps.weight", (E, FE, H)),
                     (p + "ffn_up_exps.weight", (E, FE, H)), (p + "ffn_down_exps.weight", (E, H, FE))]
        else:
            mats += [(p + "ffn_norm.weight", (H,)),
                     (p + "ffn_gate.weight", (F, H)), (p + "ffn_up.weight", (F, H)), (p + "ffn_down.weight", (H, F))]
    mats += [("output_norm.weight", (H,)), ("output.weight", (V, H))]
    n_params = sum(int(np.prod(s)) for _, s in mats)

    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(a.name or f"synthetic-{arch}-{n_params / 1e9:.2f}B")
    w.add_description(f"random weights (seed {a.seed}) from bench/synthetic_gguf.py")
    w.add_context_length(a.context)
    w.add_embedding_length(H)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(F)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_freq_base(a.rope_theta)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type({"f16": FT.MOSTLY_F16, "bf16": FT.MOSTLY_BF16, "f32": FT.ALL_F32}[a.dtype])
    w.add_vocab_size(V)
    w.add_rope_dimension_count(D)
    if E:
        w.add_key_length(D)
        w.add_value_length(D)
        w.add_expert_count(E)
        w.add_expert_used_count(a.experts_used)
        w.add_expert_feed_forward_length(FE)
    for key, val in tok.kv_data[0].items():
        if key != gguf.Keys.General.ARCHITECTURE:
            w.add_key_value(key, val.value, val.type, sub_type=val.sub_type)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    np_dt = {"f16": np.float16, "bf16": np.uint16, "f32": np.float32}[a.dtype]
    raw = {"f16": QT.F16, "bf16": QT.BF16, "f32": QT.F32}[a.dtype]
    esize = np.dtype(np_dt).itemsize
    f32 = lambda name, shape: len(shape) == 1 or name.endswith("ffn_gate_inp.weight")
    for name, shape in mats:
        if f32(name, shape):
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * int(np.prod(shape)), raw_dtype=QT.F32)
        else:
            w.add_tensor_info(name, shape, np.dtype(np_dt), esize * int(np.prod(shape)), raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    rng = np.random.default_rng(a.seed)
    t0 = time.time()
    for k, (name, shape) in enumerate(mats):
        if len(shape) == 1:
            t = np.ones(shape, np.float32)
        else:
            t = rng.standard_normal(shape, dtype=np.float32)
            t *= 0.02
            if not f32(name, shape):
                t = bf16_bits(t) if a.dtype == "bf16" else t.astype(np_dt, copy=False)
        w.write_tensor_data(t)
        del t
        if name.endswith(("ffn_down.weight", "ffn_down_exps.weight")) or name == "output.weight":
            print(f"\r{k + 1}/{len(mats)} tensors, {time.time() - t0:.0f} s", end="", file=sys.stderr, flush=True)
    w.close()
    print(f"\nwrote {a.out}: {n_params / 1e9:.3f} B parameters, vocab {V}, {a.dtype.upper()}, "
          f"{os.path.getsize(a.out) / 1e9:.2f} GB", file=sys.stderr)


if __name__ == "__main__":
    main()
