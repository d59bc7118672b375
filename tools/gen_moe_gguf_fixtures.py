#!/usr/bin/env python3
"""GGUF fixtures of tiny mixture-of-experts checkpoints, converted by llama.cpp's convert_hf_to_gguf.py.

Developer tool (not run by CI). Writes tests/fixtures/models_gguf/:
  mixtral_f32.gguf, mixtral_q8_0.gguf
      tests/fixtures/models/mixtral_f32 converted with --outtype f32 / q8_0 (GGUF arch `llama` with
      llama.expert_count; experts stacked as ffn_{gate,up,down}_exps [8, rows, cols]; in q8_0 the
      converter keeps ffn_down_exps in F16, its rows of 16 not being whole Q8_0 blocks, and the
      router ffn_gate_inp in F32). The reference is the checkpoint's own
      tests/fixtures/models/mixtral_f32/reference.safetensors: llama.cpp's llama graph renormalizes
      the top-k weights as Mixtral does, so nothing differs.
  mixtral_q8_0.reference.safetensors
      logits_q8_<i>: transformers' F32 logits of mixtral_f32 with the weights the converter rounded
      (Q8_0, F16) rounded the same way (dequantized_logits below): the file's own numbers.
  qwen3_moe_q8_0.gguf, qwen3_moe_q8_0.reference.safetensors (logits_<i> of the F32 checkpoint and
  logits_q8_<i> as above), qwen3_moe_q8_0.reference.json
      llama.cpp's qwen3moe graph has no dense layers (the converter refuses
      tests/fixtures/models/qwen3_moe_f32's mlp_only_layers) and always renormalizes the top-k
      weights (build_moe_ffn with norm_w = true), so this one comes from its own tiny checkpoint
      (2 layers, 4 experts of width 32 so every matrix is whole Q8_0 blocks, top-2,
      norm_topk_prob true), made by tools/gen_moe_fixtures.py's machinery in a temporary directory;
      only the converted file and transformers' F32 logits of that checkpoint are kept.

  moe_llamacpp.json (with --llama-cpp-reference LLAMA_BIN: only this file, from the GGUF files above as
  they are committed)
      llama.cpp's own greedy run on mixtral_f32.gguf, mixtral_q8_0.gguf and qwen3_moe_q8_0.gguf for the
      exact prompt ids of their reference.json files: tools/llama_cpp_greedy.cpp --detail built against
      LLAMA_BIN's libllama (CPU backend, 2 threads; Q8_0 weights meet Q8_0-rounded activations there,
      F32 weights F32 activations), new_tokens steps each: the greedy ids, the top-2 gap and the 8
      highest logits with their ids; the files' SHA-256 so a regenerated GGUF cannot silently pair
      with old numbers. tests/runtime/moe_gguf_test.cpp (MoeFamily.GgufMatchesLlamaCpp) reads it.

Usage: python3 tools/gen_moe_gguf_fixtures.py LLAMA_CPP_DIR [--llama-cpp-reference LLAMA_BIN]
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import fixturelib  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_fixtures as G  # noqa: E402
import gen_moe_fixtures as M  # noqa: E402

REPO = G.REPO
OUT = os.path.join(REPO, "tests", "fixtures", "models_gguf")
QWEN_GGUF = dict(name="qwen3_moe_q8_0", arch="qwen3_moe", tok="tiny_bpe", dtype="f32", tied=False,
                 cfg=dict(rope_theta=1000000.0, rms_norm_eps=1e-6, head_dim=16, num_hidden_layers=2,
                          intermediate_size=64, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                          norm_topk_prob=True, use_sliding_window=False, sliding_window=None),
                 style="v5")


GGUF_TO_HF = {"token_embd": "model.embed_tokens", "output": "lm_head", "output_norm": "model.norm"}
LAYER = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
         "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}


def dequantized_logits(model_dir, gguf_path, arch, prompt_ids):
    """transformers' F32 logits with every weight the converter quantized replaced by its Q8_0 round
    trip (gguf-py's quantize/dequantize, the converter's own code). Q8_0 blocks run along a row, so
    rounding the Hugging Face tensor equals un-permuting the file's rounded q/k rows: this is the
    file's content in transformers' layout, the reference for graft's F32-activation path."""
    import numpy as np
    import torch
    from gguf import GGMLQuantizationType as Q, GGUFReader
    from gguf.quants import dequantize, quantize
    types = {t.name.rsplit(".", 1)[0]: t.tensor_type for t in GGUFReader(gguf_path).tensors}
    m = M.model_class(arch).from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    # transformers 5 holds a layer's experts fused in memory (both families): mlp.experts.gate_up_proj
    # [E, 2 * width, hidden] (gate rows first) and mlp.experts.down_proj [E, hidden, width].
    sd = m.state_dict()
    count = 0
    for gname, qtype in types.items():
        if qtype not in (Q.Q8_0, Q.F16):
            continue
        parts = gname.split(".")
        rows = slice(None)
        if parts[0] != "blk":
            name = GGUF_TO_HF[gname] + ".weight"
        elif parts[2] in ("ffn_gate_exps", "ffn_up_exps"):
            name = f"model.layers.{parts[1]}.mlp.experts.gate_up_proj"
            width = sd[name].shape[1] // 2
            rows = slice(0, width) if parts[2] == "ffn_gate_exps" else slice(width, 2 * width)
        elif parts[2] == "ffn_down_exps":
            name = f"model.layers.{parts[1]}.mlp.experts.down_proj"
        else:
            name = f"model.layers.{parts[1]}.{LAYER[parts[2]]}.weight"
        t = sd[name][:, rows] if sd[name].dim() == 3 else sd[name]
        w = t.numpy()
        if qtype == Q.Q8_0:
            r = dequantize(quantize(w, Q.Q8_0), Q.Q8_0).reshape(w.shape)
        else:
            r = w.astype(np.float16).astype(np.float32)
        t.copy_(torch.from_numpy(np.ascontiguousarray(r)))
        count += 1
    with torch.no_grad():
        out = {f"logits_q8_{i}": m(input_ids=torch.tensor([ids])).logits[0].float().contiguous()
               for i, ids in enumerate(prompt_ids)}
    if count != sum(q in (Q.Q8_0, Q.F16) for q in types.values()):
        raise SystemExit(f"{gguf_path}: not every rounded tensor was matched")
    print(f"  {os.path.basename(gguf_path)}: {count} tensors rounded as the file stores them")
    return out


def convert(lcpp, model_dir, out, outtype):
    subprocess.run([sys.executable, os.path.join(REPO, "tools", "convert_family_gguf.py"), lcpp, model_dir, out, outtype],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(os.path.basename(out), os.path.getsize(out), "bytes")


def llama_cpp_reference(lcpp, bin_dir):
    """moe_llamacpp.json: see the module's docstring."""
    ids_of = {"mixtral_f32": os.path.join(REPO, "tests", "fixtures", "models", "mixtral_f32", "reference.json"),
              "mixtral_q8_0": os.path.join(REPO, "tests", "fixtures", "models", "mixtral_f32", "reference.json"),
              "qwen3_moe_q8_0": os.path.join(OUT, "qwen3_moe_q8_0.reference.json")}
    out = {"generator": "tools/gen_moe_gguf_fixtures.py --llama-cpp-reference (tools/llama_cpp_greedy.cpp --detail)",
           "llama_cpp": os.path.basename(os.path.dirname(os.path.dirname(os.path.abspath(lcpp)))) or lcpp,
           "compute": "llama.cpp CPU backend through its C API, 2 threads, n_batch 512 (the prompt in one batch)",
           "files": {}}
    with tempfile.TemporaryDirectory() as tmp:
        exe = fixturelib.build_llama_cpp_greedy(REPO, lcpp, bin_dir, tmp)
        for name, ids_path in ids_of.items():
            gguf = os.path.join(OUT, name + ".gguf")
            with open(ids_path) as f:
                ref = json.load(f)
            n = ref["new_tokens"]
            prompts = []
            for p in ref["prompts"]:
                r = subprocess.run([exe, "--detail", gguf, "-", str(n)] + [str(i) for i in p["ids"]],
                                   check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=600)
                g = json.loads(r.stdout)
                prompts.append({"ids": p["ids"], "greedy": g["greedy"], "top2_gap": g["top2_gap"],
                                "top_ids": g["top_ids"], "top_logits": g["top_logits"],
                                "equals_transformers_f32_greedy": g["greedy"] == p["greedy"]})
                print(f"  {name}: llama.cpp greedy == transformers F32 greedy: {g['greedy'] == p['greedy']}, "
                      f"min top-2 gap {min(g['top2_gap']):.4f}")
            with open(gguf, "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()
            out["files"][name] = {"file": os.path.relpath(gguf, os.path.join(REPO, "tests", "fixtures")),
                                  "sha256": digest, "new_tokens": n, "prompts": prompts}
    path = os.path.join(OUT, "moe_llamacpp.json")
    G.dump_json(out, path)
    print("wrote", os.path.relpath(path, REPO))


def main():
    lcpp = sys.argv[1]
    if len(sys.argv) == 4 and sys.argv[2] == "--llama-cpp-reference":
        return llama_cpp_reference(lcpp, sys.argv[3])
    os.makedirs(OUT, exist_ok=True)
    G.torch.set_num_threads(1)
    G.config_class, G.model_class = M.config_class, M.model_class
    from safetensors.torch import save_file
    mixtral = os.path.join(REPO, "tests", "fixtures", "models", "mixtral_f32")
    for t in ("f32", "q8_0"):
        convert(lcpp, mixtral, os.path.join(OUT, f"mixtral_{t}.gguf"), t)
    with open(os.path.join(mixtral, "reference.json")) as f:
        ids = [p["ids"] for p in json.load(f)["prompts"]]
    save_file(dequantized_logits(mixtral, os.path.join(OUT, "mixtral_q8_0.gguf"), "mixtral", ids),
              os.path.join(OUT, "mixtral_q8_0.reference.safetensors"),
              metadata={"generator": "tools/gen_moe_gguf_fixtures.py"})
    tmp = tempfile.mkdtemp(prefix="graft_moe_gguf_")
    try:
        G.make_one(QWEN_GGUF, tmp)
        src = os.path.join(tmp, QWEN_GGUF["name"])
        convert(lcpp, src, os.path.join(OUT, "qwen3_moe_q8_0.gguf"), "q8_0")
        with open(os.path.join(src, "reference.json")) as f:
            ref = json.load(f)
        from safetensors.torch import load_file
        logits = load_file(os.path.join(src, "reference.safetensors"))
        logits.update(dequantized_logits(src, os.path.join(OUT, "qwen3_moe_q8_0.gguf"), "qwen3_moe",
                                         [p["ids"] for p in ref["prompts"]]))
        save_file(logits, os.path.join(OUT, "qwen3_moe_q8_0.reference.safetensors"),
                  metadata={"generator": "tools/gen_moe_gguf_fixtures.py"})
        ref["notes"] += (" Kept: only the GGUF conversion (tools/gen_moe_gguf_fixtures.py) and these F32 logits of the "
                         "checkpoint it was converted from.")
        G.dump_json(ref, os.path.join(OUT, "qwen3_moe_q8_0.reference.json"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
