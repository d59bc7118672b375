#!/usr/bin/env python3
"""A random-weight PEFT LoRA for bench/synthetic_gguf.py's qwen3moe file (issue 35's MoE LoRA cost):
q/k/v/o of every layer as target_modules and the experts as target_parameters (gate_up_proj,
down_proj), in the layout PEFT 0.21 writes for transformers' fused Qwen3-MoE experts (the one
tests/fixtures/engine_adapters/qwen3_moe_f32/peft_experts holds, made by PEFT itself): per layer
mlp.experts.base_layer.lora_{A,B} for gate_up_proj ([E·r, hidden], [2·F, E·r]) and mlp.experts.lora_{A,B}
for down_proj ([E·r, F], [hidden, E·r]). The config is that fixture's adapter_config.json with r,
lora_alpha and the targets replaced. Numbers N(0, 0.02) in F32; a benchmark input, never committed.

    /tmp/gguf-venv/bin/pip install safetensors
    /tmp/gguf-venv/bin/python bench/synthetic_peft_moe_lora.py --out /tmp/moe/lora_r16 --hidden 2048 \\
        --layers 8 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 --expert-intermediate 768 --rank 16
    build/graft generate -m /tmp/moe/q4km.gguf --lora /tmp/moe/lora_r16 --lora-dtype q8_0 ...
"""
import argparse
import json
import os

import numpy as np
from safetensors.numpy import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "tests/fixtures/engine_adapters/qwen3_moe_f32/peft_experts/adapter_config.json")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name in ("hidden", "layers", "heads", "kv-heads", "head-dim", "experts", "expert-intermediate"):
        ap.add_argument("--" + name, type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    H, D, E, F, r = a.hidden, a.head_dim, a.experts, a.expert_intermediate, a.rank
    rng = np.random.default_rng(a.seed)
    t = {}

    def pair(prefix, rows_a, cols_a, rows_b):
        t[prefix + ".lora_A.weight"] = (rng.standard_normal((rows_a, cols_a), dtype=np.float32) * 0.02)
        t[prefix + ".lora_B.weight"] = (rng.standard_normal((rows_b, rows_a), dtype=np.float32) * 0.02)

    for i in range(a.layers):
        p = f"base_model.model.model.layers.{i}."
        pair(p + "self_attn.q_proj", r, H, a.heads * D)
        pair(p + "self_attn.k_proj", r, H, a.kv_heads * D)
        pair(p + "self_attn.v_proj", r, H, a.kv_heads * D)
        pair(p + "self_attn.o_proj", r, a.heads * D, H)
        pair(p + "mlp.experts.base_layer", E * r, H, 2 * F)  # gate_up_proj
        pair(p + "mlp.experts", E * r, F, H)                 # down_proj
    os.makedirs(a.out, exist_ok=True)
    save_file(t, os.path.join(a.out, "adapter_model.safetensors"), metadata={"format": "pt"})
    with open(CONFIG) as f:
        cfg = json.load(f)
    cfg.update(r=r, lora_alpha=a.alpha, alpha_pattern={}, rank_pattern={}, base_model_name_or_path="synthetic",
               target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], target_parameters=["gate_up_proj", "down_proj"])
    with open(os.path.join(a.out, "adapter_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    n = sum(v.size for v in t.values())
    print(f"wrote {a.out}: {n / 1e6:.1f} M parameters ({4 * n / 1e6:.0f} MB F32), rank {r}")


if __name__ == "__main__":
    main()
