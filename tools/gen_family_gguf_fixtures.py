#!/usr/bin/env python3
"""GGUF fixtures of the tiny Gemma and Phi-3 checkpoints, converted by llama.cpp's convert_hf_to_gguf.py.

Developer tool (not run by CI). For each NAME in MODELS writes tests/fixtures/models_gguf/:
  NAME.gguf                 tests/fixtures/models/NAME converted with --outtype f32
                            (tools/convert_family_gguf.py: llama.cpp's converter, test tokenizer labelled)
  NAME.reference.safetensors logits_<i>: F32 [T, vocab], transformers' forward over prompt i's ids
                            (tests/fixtures/models/NAME/reference.json) under llama.cpp's semantics
                            of the converted file. The one difference: a GGUF file has no
                            query_pre_attn_scalar and llama.cpp scales attention by 1/sqrt(head_dim)
                            (hidden/heads for the 27B models), so the reference runs the checkpoint
                            with query_pre_attn_scalar = head_dim, and for Gemma 3 the layer types
                            llama.cpp derives (every 6th layer global). Logits from llama.cpp itself
                            would need a llama.cpp build; these are transformers' for the same weights.
                            Phi-3: llama.cpp's phi3 loader disables the sliding window whatever the
                            file says (load_arch_hparams: n_swa = 0), so the reference runs with
                            sliding_window = None; partial rotary comes as rope.dimension_count.

Usage: python3 tools/gen_family_gguf_fixtures.py LLAMA_CPP_DIR
"""
import json
import os
import subprocess
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = ["gemma2_f32", "gemma3_f32", "phi3_f32"]


def main():
    lcpp = sys.argv[1]
    out = os.path.join(REPO, "tests", "fixtures", "models_gguf")
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    for name in MODELS:
        src = os.path.join(REPO, "tests", "fixtures", "models", name)
        gguf_path = os.path.join(out, name + ".gguf")
        subprocess.run([sys.executable, os.path.join(REPO, "tools", "convert_family_gguf.py"), lcpp, src, gguf_path],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cfg = AutoConfig.from_pretrained(src)
        if cfg.model_type.startswith("gemma"):
            cfg.query_pre_attn_scalar = cfg.head_dim
        if cfg.model_type == "phi3":
            cfg.sliding_window = None
        if cfg.model_type == "gemma3_text":
            # The converter writes no layer pattern: llama.cpp makes every 6th layer global
            # (set_swa_pattern(6)), so this 3-layer file is local, local, local.
            cfg.layer_types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention"
                               for i in range(cfg.num_hidden_layers)]
        m = AutoModelForCausalLM.from_pretrained(src, config=cfg, dtype=torch.float32, attn_implementation="eager").eval()
        with open(os.path.join(src, "reference.json")) as f:
            prompts = json.load(f)["prompts"]
        logits = {}
        with torch.no_grad():
            for i, p in enumerate(prompts):
                logits[f"logits_{i}"] = m(input_ids=torch.tensor([p["ids"]])).logits[0].float().contiguous()
        save_file(logits, os.path.join(out, name + ".reference.safetensors"),
                  metadata={"generator": "tools/gen_family_gguf_fixtures.py",
                            "note": "transformers logits under llama.cpp's rules (Gemma: query_pre_attn_scalar = head_dim; "
                                    "Phi-3: no sliding window)"})
        print(name, os.path.getsize(gguf_path), "bytes")


if __name__ == "__main__":
    main()
