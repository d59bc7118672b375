#!/usr/bin/env python3
"""Tiny random-weight mixture-of-experts checkpoints (Qwen3-MoE, Mixtral) + transformers' logits.

Developer tool (not run by CI); the outputs are committed under tests/fixtures/models/<name>/ with
the same files and reference format as tools/gen_model_fixtures.py (whose machinery this reuses:
seed search for clear greedy gaps, legacy config rewrite, reload checks, reference.json,
reference.safetensors with F32 logits_<i>).
Needs: torch, transformers, tokenizers, safetensors, numpy.

The models are small on purpose (the weights are committed): hidden 64, 4 heads / 2 KV heads,
vocab 384, experts of width 16-32.
  qwen3_moe_f32  3 layers, 4 experts, top-2, norm_topk_prob false (router weights not
                 renormalized), mlp_only_layers [1] (layer 1 is a dense MLP of width 64, as
                 decoder_sparse_step / mlp_only_layers allow), untied head.
  mixtral_f32    2 layers, 8 experts of width 16, top-2 (Mixtral always renormalizes), tied head.

On-disk names: each expert as its own 2-D matrices, mlp.experts.<e>.{gate,up,down}_proj.weight
(Qwen3-MoE) and block_sparse_moe.experts.<e>.w1/w2/w3.weight (Mixtral), the router as
mlp.gate.weight / block_sparse_moe.gate.weight: the names of the Hub checkpoints
(Qwen/Qwen3-30B-A3B, mistralai/Mixtral-8x7B-v0.1). transformers 5 holds the experts fused in
memory and converts them back to these names when saving; the script checks that the written
file has them (so the fixture is what a real checkpoint looks like).

With --peft: tests/fixtures/engine_adapters/<name>/{peft_lora,peft_experts}, PEFT LoRAs on the
checkpoints (gen_peft, PEFT_TARGETS, PEFT_PARAMETERS). With --mlx: .../<name>/mlx_switch, an mlx-lm
LoRA with LoRASwitchLinear pairs on the experts (gen_mlx; needs mlx + mlx-lm, CPU is fine).

Usage: python3 tools/gen_moe_fixtures.py [--only NAME ...] [--peft [--kind KIND ...] | --mlx]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_fixtures as G  # noqa: E402

MODELS = [
    dict(name="qwen3_moe_f32", arch="qwen3_moe", tok="tiny_bpe", dtype="f32", tied=False,
         cfg=dict(rope_theta=1000000.0, rms_norm_eps=1e-6, head_dim=16, num_hidden_layers=3,
                  intermediate_size=64, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                  norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[1],
                  use_sliding_window=False, sliding_window=None, attention_bias=False),
         style="legacy"),
    dict(name="mixtral_f32", arch="mixtral", tok="tiny_spm", dtype="f32", tied=True,
         cfg=dict(rope_theta=1000000.0, rms_norm_eps=1e-5, num_hidden_layers=2, intermediate_size=16,
                  num_local_experts=8, num_experts_per_tok=2, sliding_window=None),
         style="legacy"),
]


def config_class(arch):
    import transformers as T
    return {"qwen3_moe": T.Qwen3MoeConfig, "mixtral": T.MixtralConfig}[arch]


def model_class(arch):
    import transformers as T
    return {"qwen3_moe": T.Qwen3MoeForCausalLM, "mixtral": T.MixtralForCausalLM}[arch]


def check_names(spec, out_root):
    """The written checkpoint holds per-expert 2-D matrices under the Hub's names."""
    from safetensors import safe_open
    path = os.path.join(out_root, spec["name"], "model.safetensors")
    with safe_open(path, "pt") as f:
        names = set(f.keys())
    want = ("model.layers.0.mlp.experts.3.down_proj.weight" if spec["arch"] == "qwen3_moe"
            else "model.layers.1.block_sparse_moe.experts.7.w2.weight")
    if want not in names:
        fused = sorted(n for n in names if "experts" in n)[:4]
        raise SystemExit(f"{spec['name']}: save_pretrained did not write '{want}' (experts written as {fused})")


def to_legacy_config(path, spec):
    """gen_model_fixtures' 4.x rewrite, plus Qwen3-MoE's expert count under its 4.x name: transformers 5
    writes num_local_experts, the Hub's Qwen3-MoE configs (4.x) say num_experts."""
    import json
    LEGACY(path, spec)
    with open(path) as f:
        c = json.load(f)
    if spec["arch"] == "qwen3_moe" and "num_local_experts" in c:
        c["num_experts"] = c.pop("num_local_experts")
    with open(path, "w") as f:
        json.dump(dict(sorted(c.items())), f, indent=2)
        f.write("\n")


LEGACY = G.to_legacy_config


PEFT_OUT = os.path.join(G.REPO, "tests", "fixtures", "engine_adapters")
# peft_lora: the attention projections. peft_experts (qwen3_moe): target_modules naming the MLP too;
# transformers 5 holds the experts as 3-D Parameters (experts.gate_up_proj [E, 2 * width, hidden],
# experts.down_proj [E, hidden, width]) and PEFT 0.21 turns those names into target_parameters on
# them (one LoRA per 3-D parameter, lora_A [E * r, in], lora_B [out, E * r], gate_up_proj at twice
# the rank), leaving the dense layer's MLP without one: the expert-adapter format PEFT writes today.
PEFT_TARGETS = {("qwen3_moe_f32", "peft_lora"): ["q_proj", "k_proj", "v_proj", "o_proj"],
                ("mixtral_f32", "peft_lora"): ["q_proj", "k_proj", "v_proj", "o_proj"],
                ("qwen3_moe_f32", "peft_experts"): ["q_proj", "gate_proj", "up_proj", "down_proj"],
                ("mixtral_f32", "peft_experts"): ["q_proj"]}
# peft_experts (mixtral): target_parameters written out by hand, as PEFT's docs show for MoE models:
# both expert parameters at the same rank, so the file alone does not say which nesting level is
# which parameter (graft's reader keeps both names and binding picks by shape).
PEFT_PARAMETERS = {("mixtral_f32", "peft_experts"): ["mlp.experts.gate_up_proj", "mlp.experts.down_proj"]}


def gen_peft(spec, kind):
    """engine_adapters/<name>/<kind>: PEFT LoRA r=4, lora_alpha=8 (scale 2.0) on PEFT_TARGETS, lora_B
    (PEFT's zero init) replaced by N(0, 0.05^2) from a fixed seed; reference.safetensors logits_<i> =
    PeftModel.from_pretrained(base, dir) forward, adapter active and unmerged, F32."""
    import json
    import shutil
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import save_file
    name = spec["name"]
    base_dir = os.path.join(G.OUT_DIR, name)
    d = os.path.join(PEFT_OUT, name, kind)
    targets = PEFT_TARGETS[(name, kind)]
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(base_dir, "reference.json")) as f:
        prompts = [p["ids"] for p in json.load(f)["prompts"]]
    seed = 4321
    torch.manual_seed(seed)
    params = PEFT_PARAMETERS.get((name, kind))
    pm = get_peft_model(G.load(base_dir, spec["arch"], torch.float32),
                        LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, bias="none", target_modules=targets,
                                   **({"target_parameters": params} if params else {})))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in sorted(pm.named_parameters()):
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    pm.save_pretrained(d)
    if os.path.exists(os.path.join(d, "README.md")):
        os.remove(os.path.join(d, "README.md"))
    ref = PeftModel.from_pretrained(G.load(base_dir, spec["arch"], torch.float32), d).eval()
    base = G.load(base_dir, spec["arch"], torch.float32)
    logits, moved = {}, []
    for i, ids in enumerate(prompts):
        logits[f"logits_{i}"] = G.full_logits(ref, ids).contiguous()
        moved.append(round(float((logits[f"logits_{i}"] - G.full_logits(base, ids)).abs().max()), 4))
    save_file(logits, os.path.join(d, "reference.safetensors"), metadata={"generator": "tools/gen_moe_fixtures.py"})
    G.dump_json({"fixture": f"{name}/{kind}", "generator": "tools/gen_moe_fixtures.py --peft", "base_model":
                 f"tests/fixtures/models/{name}", "r": 4, "lora_alpha": 8, "target_modules": targets,
                 **({"target_parameters": params} if params else {}), "seed": seed, "max_abs_logit_change_vs_base": moved,
                 "notes": "logits_<i>: PEFT forward over the base's reference.json prompts[i].ids, adapter unmerged. "
                          "The experts are 3-D Parameters in transformers 5 (no nn.Linear for target_modules).",
                 "prompts": [{"ids": ids} for ids in prompts]}, os.path.join(d, "reference.json"))
    for fn in os.listdir(d):
        os.chmod(os.path.join(d, fn), 0o644)
    print(f"{name}/{kind}: logits move by {moved} vs the base")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--peft", action="store_true", help="only (re)write the PEFT adapter fixtures of the checkpoints")
    ap.add_argument("--kind", nargs="*", help="with --peft: only these fixtures (peft_lora, peft_experts)")
    ap.add_argument("--mlx", action="store_true", help="only (re)write the mlx-lm LoRASwitchLinear fixtures")
    args = ap.parse_args()
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    G.torch.set_num_threads(1)
    G.config_class, G.model_class, G.to_legacy_config = config_class, model_class, to_legacy_config
    for spec in MODELS:
        if args.only and spec["name"] not in args.only:
            continue
        if args.mlx:
            import gen_mlx_lora_fixtures
            gen_mlx_lora_fixtures.gen(spec["name"], "mlx_switch")
            continue
        if args.peft:
            for (model, kind) in PEFT_TARGETS:
                if model == spec["name"] and (not args.kind or kind in args.kind):
                    gen_peft(spec, kind)
            continue
        G.make_one(spec, G.OUT_DIR)
        check_names(spec, G.OUT_DIR)


if __name__ == "__main__":
    main()
