#!/usr/bin/env python3
"""mlx-lm LoRA adapters made by mlx-lm's own code on the tiny checkpoints, with mlx-lm's logits.

Developer tool (not run by CI); outputs are committed under tests/fixtures/engine_adapters/<name>/<kind>:
  mlx_lora    gemma2_f32, gemma3_f32, phi3_f32 (mlx-lm's phi3 names the fused qkv_proj /
              gate_up_proj): reference = transformers' forward of the weights mlx-lm's own fuse
              writes (mlx-lm 0.32's forward has no sliding window for these families, and its
              gemma3_text fails on 3 layers), so the adapter's meaning is mlx-lm's, the model's
              transformers'.
  mlx_switch  qwen3_moe_f32, mixtral_f32 (LoRASwitchLinear on the SwitchGLU experts; also written by
              tools/gen_moe_fixtures.py --mlx)
Needs: mlx + mlx-lm (`pip install "mlx[cpu]" mlx-lm` runs on Linux CPUs), numpy, safetensors.

Usage: python3 tools/gen_mlx_lora_fixtures.py [NAME ...]   (default: all five)
"""
import json
import os
import sys
import fixturelib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = os.path.join(REPO, "tests", "fixtures", "models")
OUT = os.path.join(REPO, "tests", "fixtures", "engine_adapters")
KINDS = {"gemma2_f32": "mlx_lora", "gemma3_f32": "mlx_lora", "phi3_f32": "mlx_lora",
         "qwen3_moe_f32": "mlx_switch", "mixtral_f32": "mlx_switch"}


# An mlx-lm LoRA made by mlx-lm's own code on the checkpoint: linear_to_lora_layers over every layer
# with the default keys (every Linear, the MoE router included, and SwitchGLU's SwitchLinear
# projections, mlp.switch_mlp / block_sparse_moe.switch_mlp .gate_proj/.up_proj/.down_proj, as
# LoRASwitchLinear: lora_a [E, r, in], lora_b [E, out, r]).
MLX_LORA = {"rank": 4, "scale": 2.0, "dropout": 0.0}


def mlx_forward(base_dir, d, prompts):
    import numpy as np
    import mlx.core as mx
    import mlx_lm
    ref, _ = mlx_lm.load(base_dir, adapter_path=d)
    base, _ = mlx_lm.load(base_dir)
    logits, moved = {}, []
    for i, ids in enumerate(prompts):
        out = ref(mx.array([ids]))[0].astype(mx.float32)
        plain = base(mx.array([ids]))[0].astype(mx.float32)
        mx.eval(out, plain)
        logits[f"logits_{i}"] = np.array(out)
        moved.append(round(float(np.abs(np.array(out) - np.array(plain)).max()), 4))
    return logits, moved


def fused_by_mlx_run_by_transformers(name, base_dir, d, prompts):
    import numpy as np
    import torch
    import mlx.core as mx
    import mlx_lm
    from mlx.utils import tree_flatten, tree_unflatten
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import gen_model_fixtures as G
    model, _ = mlx_lm.load(base_dir, adapter_path=d)
    fused = [(n, m.fuse()) for n, m in model.named_modules() if hasattr(m, "fuse")]  # = mlx_lm fuse.py
    model.update_modules(tree_unflatten(fused))
    weights = {k: np.array(v.astype(mx.float32)) for k, v in tree_flatten(model.parameters())}
    arch = json.load(open(os.path.join(base_dir, "config.json")))["model_type"]
    hf = G.load(base_dir, arch, torch.float32)
    plain = G.load(base_dir, arch, torch.float32)
    sd = hf.state_dict()
    changed = 0
    for k, v in weights.items():
        if k in sd and not np.array_equal(sd[k].numpy(), v):
            sd[k].copy_(torch.from_numpy(v))
            changed += 1
    assert changed > 0, f"{name}: mlx-lm's fuse changed no weight transformers has"
    logits, moved = {}, []
    for i, ids in enumerate(prompts):
        out = G.full_logits(hf, ids).contiguous()
        logits[f"logits_{i}"] = out.numpy()
        moved.append(round(float((out - G.full_logits(plain, ids)).abs().max()), 4))
    return logits, moved


def gen(name, kind):
    """engine_adapters/<name>/<kind>: adapters.safetensors + adapter_config.json as `mlx_lm lora`
    writes them (lora_a mlx-lm's own uniform init, lora_b N(0, 0.05^2) from a fixed seed instead of
    zeros); reference.safetensors logits_<i> = mlx_lm.load(base, adapter_path=dir) forward, F32 on
    the mlx CPU device (mlx_lora: transformers' forward of mlx-lm's fused weights), over the base's
    reference.json prompts."""
    import json
    import shutil
    import numpy as np
    import mlx.core as mx
    import mlx_lm
    from mlx.utils import tree_flatten
    from mlx_lm.lora import CONFIG_DEFAULTS
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import save_config
    from safetensors.numpy import save_file
    base_dir = os.path.join(MODELS, name)
    d = os.path.join(OUT, name, kind)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(base_dir, "reference.json")) as f:
        prompts = [p["ids"] for p in json.load(f)["prompts"]]
    seed = 4321
    model, _ = mlx_lm.load(base_dir)
    layers = len(model.model.layers)
    model.freeze()
    mx.random.seed(seed)
    linear_to_lora_layers(model, layers, dict(MLX_LORA))
    params = dict(tree_flatten(model.trainable_parameters()))
    rng = np.random.default_rng(seed + 1)
    model.load_weights([(k, mx.array((rng.standard_normal(params[k].shape) * 0.05).astype(np.float32)))
                        for k in sorted(params) if k.endswith(".lora_b")], strict=False)
    weights = dict(tree_flatten(model.trainable_parameters()))
    mx.eval(weights)
    switch = any(v.ndim == 3 for v in weights.values())
    assert switch == (kind == "mlx_switch"), f"{name}: LoRASwitchLinear pairs {switch}, kind {kind}"
    mx.save_safetensors(os.path.join(d, "adapters.safetensors"), weights)
    args = dict(CONFIG_DEFAULTS)
    args.update({"model": f"tests/fixtures/models/{name}", "train": False, "fine_tune_type": "lora", "data": None,
                 "seed": seed, "num_layers": layers, "iters": 0,
                 "adapter_path": f"tests/fixtures/engine_adapters/{name}/{kind}", "lora_parameters": dict(MLX_LORA)})
    save_config(args, os.path.join(d, "adapter_config.json"))
    if kind == "mlx_switch":
        logits, moved = mlx_forward(base_dir, d, prompts)
        how = ("mlx_lm.load(base, adapter_path=dir) forward, adapters unfused (LoRALinear y + scale * (x @ lora_a) "
               "@ lora_b; LoRASwitchLinear y + scale * gather_mm(gather_mm(x, lora_a^T), lora_b^T)), F32 on the mlx "
               "CPU device")
    else:
        logits, moved = fused_by_mlx_run_by_transformers(name, base_dir, d, prompts)
        how = ("transformers' forward (F32) of the base with the weights mlx-lm's own fuse writes (LoRALinear.fuse: "
               "W + scale * (lora_a @ lora_b)^T, as `mlx_lm fuse`); mlx-lm's forward is not the reference here: "
               "0.32 implements no sliding window for gemma2 / phi3, which these checkpoints' short windows need")
    save_file(logits, os.path.join(d, "reference.safetensors"), metadata={"generator": "tools/gen_mlx_lora_fixtures.py"})
    ref = {"fixture": f"{name}/{kind}", "generator": "tools/gen_mlx_lora_fixtures.py", "base_model":
           f"tests/fixtures/models/{name}", "lora_parameters": MLX_LORA, "num_layers": layers, "seed": seed,
           "mlx": mx.__version__, "mlx_lm": mlx_lm.__version__, "max_abs_logit_change_vs_base": moved,
           "tensors": {k: list(v.shape) for k, v in sorted(weights.items())},
           "notes": "logits_<i>: " + how + ".",
           "prompts": [{"ids": ids} for ids in prompts]}
    fixturelib.write_json(os.path.join(d, "reference.json"), ref)
    for fn in os.listdir(d):
        os.chmod(os.path.join(d, fn), 0o644)
    print(f"{name}/{kind}: logits move by {moved} vs the base")


def main():
    for name in sys.argv[1:] or list(KINDS):
        gen(name, KINDS[name])


if __name__ == "__main__":
    main()
