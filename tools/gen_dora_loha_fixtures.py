#!/usr/bin/env python3
"""Reference fixtures for DoRA (PEFT use_dora, mlx-lm fine_tune_type dora), LoHa (PEFT LOHA, LyCORIS
hada_*) and live (unfused) LoKr, made by the real tools, for graft's tests.

Developer tool (not run by CI); outputs are committed under tests/fixtures/adapters/<name>/.
Needs: torch, transformers, peft (the /work/pyref stack), lycoris-lora (+ einops, toml, tqdm) on
PYTHONPATH, and for mlx_dora either mlx + mlx-lm importable by --mlx-python (a second interpreter,
e.g. a venv with `pip install mlx mlx-lm`), or nothing: then mlx-lm's DoRALinear.fuse formula is
computed in numpy from its source (mlx_lm/tuner/dora.py) and expected.json says so.

Every fixture uses tests/fixtures/models/llama_f32 (peft_dora_bf16: llama_bf16; peft_dora_phi3: phi3_f32,
fused qkv_proj / gate_up_proj; peft_dora_qwen2 and
mlx_dora_embed_tied: qwen2_f32, q/k/v biases, tied embedding) and writes:
  adapter files          as the tool writes them (PEFT save_pretrained; LyCORIS save_weights; mlx-lm
                         adapters.safetensors + adapter_config.json)
  merged.safetensors     the tensors the tool's merge changed (PEFT merge_and_unload, mlx-lm
                         DoRALinear.fuse, LyCORIS merge_to), base dtype
  merged_forward.safetensors  (lycoris_loha) W + get_weight()*scalar: the weight LyCORIS's forward uses
                         (4.1.3's merge_to applies the scale twice, as for LoKr)
  reference.safetensors  (mlx_dora_embed*: logits_<p>, mlx-lm's unfused forward at scale 1, made by mlx-lm
                         end to end: linear_to_lora_layers(use_dora=True) with model.embed_tokens among the keys,
                         saved, reloaded by load_adapters, fused as mlx_lm fuse does; needs --mlx-python)
                         logits_<p>_s<k>: the tool's UNMERGED forward over prompt p of the model's
                         reference.json at user scale SCALES[k] (PEFT: every module's scaling
                         multiplied by it), F32 [T, vocab]
  expected.json          producer, versions, scales, prompts, notes

The random init is replaced by non-trivial values from per-fixture seeds: zero-initialised factors get
N(0, 0.05^2); DoRA magnitudes are multiplied by (1 + 0.1 N(0, 1)) so m != ||W|| (a trained
adapter's m differs from the base norm; an untouched one would hide a wrong norm axis).

Usage: PYTHONPATH=<lycoris dir> python3 tools/gen_dora_loha_fixtures.py [--only NAME ...] [--mlx-python PY]
"""
import argparse
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import fixturelib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
OUT = os.path.join(REPO, "tests", "fixtures", "adapters")
GENERATOR = "tools/gen_dora_loha_fixtures.py"
ALL_PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SCALES = [1.0, 0.5]
STD = 0.05
SEEDS = {"peft_dora": 2001, "peft_dora_bf16": 2002, "peft_dora_pair": 2003, "mlx_dora": 2004, "peft_loha": 2005,
         "lycoris_loha": 2006, "lokr_live": 2007, "peft_dora_qwen2": 2008, "mlx_dora_embed": 2009,
         "peft_dora_phi3": 2010}


def versions():
    return fixturelib.versions(["torch", "transformers", "peft", "lycoris-lora", "mlx", "mlx-lm", "safetensors", "numpy"])


def model_rel(name):
    return os.path.join("tests", "fixtures", "models", name)


def prompts(name, n=2):
    with open(os.path.join(REPO, model_rel(name), "reference.json")) as f:
        return [{"text": p["text"], "ids": p["ids"]} for p in json.load(f)["prompts"][:n]]


def load_hf(name, dtype):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model_rel(name), dtype=dtype,
                                             attn_implementation="eager")
    m.eval()
    return m


def base_state(name):
    from safetensors.torch import load_file
    return load_file(os.path.join(REPO, model_rel(name), "model.safetensors"))


def changed(base_sd, sd):
    import torch
    out = {}
    for k, v in sd.items():
        if k not in base_sd:
            if k == "lm_head.weight":
                continue
            raise RuntimeError(k)
        if not torch.equal(v, base_sd[k]):
            out[k] = v.detach().contiguous().clone()
    return out


def save(path, tensors):
    from safetensors.torch import save_file
    save_file({k: v.detach().contiguous().clone() for k, v in sorted(tensors.items())}, path,
              metadata={"format": "pt"})


def reset(d):
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)


def perturb(model, filt, seed, magnitude=True):
    """Zero adapter params get N(0, STD^2); DoRA magnitudes are multiplied by 1 + 0.1 N(0, 1)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    done = []
    with torch.no_grad():
        for n, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if not any(s in n for s in filt):
                continue
            if "magnitude" in n:
                if magnitude:
                    p.mul_(1 + 0.1 * torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype))
                    done.append(n)
            elif torch.count_nonzero(p) == 0:
                p.copy_((torch.randn(p.shape, generator=g, dtype=torch.float32) * STD).to(p.dtype))
                done.append(n)
    return done


def keys_of(adapter_file, prefix):
    from safetensors import safe_open
    with safe_open(adapter_file, "np") as f:
        return sorted(k for k in f.keys() if k.startswith(prefix))


def peft_modules(pm, adapter_file):
    """Per adapted module: its scale as PEFT holds it and the file's keys for it."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    out = []
    for name, mod in pm.named_modules():
        if isinstance(mod, BaseTunerLayer) and "default" in getattr(mod, "scaling", {}):
            path = name[len("base_model.model."):]
            out.append({"module": path, "scale": float(mod.scaling["default"]),
                        "adapter_keys": keys_of(adapter_file, "base_model.model." + path + ".")})
    return sorted(out, key=lambda e: e["module"])


def peft_save(pm, d, **kw):
    pm.save_pretrained(d, **kw)
    for sub, _, files in os.walk(d):
        for f in files:
            if f == "README.md":
                os.remove(os.path.join(sub, f))


def logits(model, ps):
    import torch
    with torch.no_grad():
        return [model(torch.tensor([p["ids"]])).logits[0].float() for p in ps]


def scale_all(pm, factor, adapters=None):
    """PEFT's user scale: every LoRA/LoHa/LoKr layer's scaling[adapter] multiplied by factor."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    for _, mod in pm.named_modules():
        if isinstance(mod, BaseTunerLayer) and hasattr(mod, "scaling"):
            for a in list(mod.scaling.keys()):
                if adapters is None or a in adapters:
                    mod.scaling[a] = mod.scaling[a] * factor


def scaled_logits(pm, ps, adapters=None):
    out = {}
    for k, s in enumerate(SCALES):
        scale_all(pm, s, adapters)
        for p, lg in enumerate(logits(pm, ps)):
            out[f"logits_{p}_s{k}"] = lg
        scale_all(pm, 1.0 / s, adapters)
    return out


def peft_fixture(name, cfg, *, base="llama_f32", dtype="float32", filt=("lora_",), notes=""):
    import torch
    from peft import PeftModel, get_peft_model
    seed = SEEDS[name]
    torch.manual_seed(seed)
    tdtype = getattr(torch, dtype)
    pm = get_peft_model(load_hf(base, tdtype), cfg)
    perturbed = perturb(pm, filt, seed + 1)
    d = os.path.join(OUT, name)
    reset(d)
    peft_save(pm, d)
    ps = prompts(base)
    # reload from the files: what a user has
    pm2 = PeftModel.from_pretrained(load_hf(base, tdtype), d)
    pm2.eval()
    ref = scaled_logits(pm2, ps)
    modules = peft_modules(pm2, os.path.join(d, "adapter_model.safetensors"))
    merged = pm2.merge_and_unload()
    ch = changed(base_state(base), {k: v for k, v in merged.state_dict().items()})
    save(os.path.join(d, "merged.safetensors"), ch)
    save(os.path.join(d, "reference.safetensors"), ref)
    with open(os.path.join(d, "adapter_config.json")) as f:
        acfg = json.load(f)
    fixturelib.write_json(os.path.join(d, "expected.json"), {
        "name": name, "format": f"peft_{acfg['peft_type'].lower()}" + ("_dora" if acfg.get("use_dora") else ""),
        "producer": {"tool": "peft", "calls": "get_peft_model -> save_pretrained; PeftModel.from_pretrained -> "
                     "forward at each scale (module.scaling *= s), merge_and_unload()", "versions": versions()},
        "generator": GENERATOR, "seed": seed, "base_model": model_rel(base),
        "base_dtype": {"float32": "F32", "bfloat16": "BF16"}[dtype], "merged_file": "merged.safetensors",
        "merged_tensors": sorted(ch), "scales": SCALES, "prompts": ps, "perturbed_parameters": perturbed,
        "adapter_files": ["adapter_config.json", "adapter_model.safetensors"], "modules": modules,
        "notes": notes})
    return d


def gen_peft_dora():
    from peft import LoraConfig
    peft_fixture("peft_dora", LoraConfig(r=4, lora_alpha=8, target_modules=ALL_PROJ, use_dora=True,
                                         lora_dropout=0.0),
                 notes="PEFT DoRA r=4 alpha=8 (scale 2) on every projection of llama_f32. PEFT DoraLinearLayer: "
                 "W' = (m / ||W + s B A||_row) (W + s B A), the norm per output row of [out, in], detached; the "
                 "bias (none here) is not rescaled. m = lora_magnitude_vector (perturbed). reference logits: "
                 "unmerged forward with every module's scaling multiplied by 1.0 and 0.5 (the norm uses the "
                 "multiplied scale, PEFT scale_layer semantics).")


def gen_peft_dora_bf16():
    from peft import LoraConfig
    peft_fixture("peft_dora_bf16", LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                                              use_dora=True, lora_dropout=0.0),
                 base="llama_bf16", dtype="bfloat16",
                 notes="PEFT DoRA on a BF16 base (adapter params BF16 as PEFT creates them on a bf16 model). "
                 "merge_and_unload rounds f * (W + delta) to BF16 once; reference logits are the bf16 model's "
                 "forward (bf16 arithmetic, informational only).")


def gen_peft_dora_qwen2():
    from peft import LoraConfig
    peft_fixture("peft_dora_qwen2", LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj",
                                                                                   "o_proj"],
                                               use_dora=True, lora_dropout=0.0),
                 base="qwen2_f32",
                 notes="PEFT DoRA r=4 alpha=8 (scale 2) on the attention projections of qwen2_f32, whose q/k/v have "
                 "biases: PEFT's DoRA forward rescales W x + s B A x by m / ||W + s B A||_row and adds the bias after "
                 "(the bias is neither in the norm nor rescaled); merge_and_unload changes the weights only (the "
                 "bias tensors are unchanged, so merged.safetensors holds no bias). reference logits: unmerged "
                 "forward at scaling x 1.0 and x 0.5.")


def gen_peft_dora_phi3():
    from peft import LoraConfig
    peft_fixture("peft_dora_phi3", LoraConfig(r=4, lora_alpha=8, target_modules=["qkv_proj", "o_proj",
                                                                                  "gate_up_proj", "down_proj"],
                                              use_dora=True, lora_dropout=0.0),
                 base="phi3_f32",
                 notes="PEFT DoRA r=4 alpha=8 (scale 2) on every linear of phi3_f32, whose q/k/v and gate/up are "
                 "fused (qkv_proj, gate_up_proj): the magnitude and the norm are per output row of the fused "
                 "weight, so splitting the fused module by rows (graft's binding) splits m and the row norms with "
                 "it. reference logits: unmerged forward at scaling x 1.0 and x 0.5; merged.safetensors: "
                 "merge_and_unload under the fused names.")


def gen_peft_dora_pair():
    """Two DoRA adapters active on the same weights: PEFT composes them in order (the second rescales the
    first's output); merge_and_unload does the same with both norms from the unmerged base."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    name = "peft_dora_pair"
    seed = SEEDS[name]
    torch.manual_seed(seed)
    d = os.path.join(OUT, name)
    reset(d)
    cfgs = {"a": LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], use_dora=True),
            "b": LoraConfig(r=2, lora_alpha=2, target_modules=["q_proj", "o_proj", "down_proj"], use_dora=True)}
    pm = get_peft_model(load_hf("llama_f32", torch.float32), cfgs["a"], adapter_name="a")
    pm.add_adapter("b", cfgs["b"])
    perturbed = perturb(pm, ("lora_",), seed + 1)
    for a in cfgs:
        pm.save_pretrained(os.path.join(d, "tmp"), selected_adapters=[a])
        src = os.path.join(d, "tmp") if a == "default" else os.path.join(d, "tmp", a)
        shutil.move(src, os.path.join(d, a))
    shutil.rmtree(os.path.join(d, "tmp"), ignore_errors=True)
    for a in cfgs:
        rm = os.path.join(d, a, "README.md")
        if os.path.exists(rm):
            os.remove(rm)
    ps = prompts("llama_f32")
    pm2 = PeftModel.from_pretrained(load_hf("llama_f32", torch.float32), os.path.join(d, "a"), adapter_name="a")
    pm2.load_adapter(os.path.join(d, "b"), adapter_name="b")
    pm2.base_model.set_adapter(["a", "b"])
    pm2.eval()
    ref = {}
    for p, lg in enumerate(logits(pm2, ps)):
        ref[f"logits_{p}"] = lg
    # a at 0.5, b at 1.0
    scale_all(pm2, 0.5, ["a"])
    for p, lg in enumerate(logits(pm2, ps)):
        ref[f"logits_{p}_a_half"] = lg
    scale_all(pm2, 2.0, ["a"])
    merged = pm2.merge_and_unload(adapter_names=["a", "b"])
    ch = changed(base_state("llama_f32"), merged.state_dict())
    save(os.path.join(d, "merged.safetensors"), ch)
    save(os.path.join(d, "reference.safetensors"), ref)
    fixturelib.write_json(os.path.join(d, "reference.json"), {
        "name": name, "format": "peft_lora_dora_pair",
        "producer": {"tool": "peft", "calls": "two DoRA adapters a, b; set_adapter(['a', 'b']); forward; "
                     "merge_and_unload(adapter_names=['a', 'b'])", "versions": versions()},
        "generator": GENERATOR, "seed": seed, "base_model": model_rel("llama_f32"), "base_dtype": "F32",
        "adapters": ["a", "b"], "merged_tensors": sorted(ch), "prompts": ps, "perturbed_parameters": perturbed,
        "notes": "logits_<p>: both active at scale 1 (order a, b); logits_<p>_a_half: a's scaling * 0.5. PEFT's "
                 "forward: y = bias + f_b * (f_a * (W x + s_a l_a(x)) + s_b l_b(x)), each f from the unmerged "
                 "base W; merge_and_unload: W' = f_b * (f_a * (W + s_a B_a A_a) + s_b B_b A_b)."})


def gen_peft_loha():
    from peft import LoHaConfig
    peft_fixture("peft_loha", LoHaConfig(r=4, alpha=8, target_modules=ALL_PROJ), filt=("hada_",),
                 notes="PEFT LoHa r=4 alpha=8 (scale 2): delta = ((w1a @ w1b) * (w2a @ w2b)) * scale, "
                 "hada_w1_a [out, r], hada_w1_b [r, in]. hada_w2_a starts at zero and is perturbed.")


def gen_lycoris_loha():
    import torch
    from lycoris import LycorisNetwork, create_lycoris
    from lycoris.wrapper import create_lycoris_from_weights
    name = "lycoris_loha"
    seed = SEEDS[name]
    d = os.path.join(OUT, name)
    reset(d)
    preset = {"target_module": ["LlamaAttention", "LlamaMLP"], "target_name": [], "exclude_name": [],
              "module_algo_map": {}, "name_algo_map": {}, "lora_prefix": "lycoris"}
    LycorisNetwork.apply_preset(preset)
    torch.manual_seed(seed)
    model = load_hf("llama_f32", torch.float32)
    with contextlib.redirect_stdout(io.StringIO()):
        net = create_lycoris(model, 1.0, linear_dim=4, linear_alpha=2.0, algo="loha")
    net.apply_to()
    g = torch.Generator().manual_seed(seed + 1)
    perturbed = []
    with torch.no_grad():
        for n, p in sorted(net.named_parameters(), key=lambda kv: kv[0]):
            if torch.count_nonzero(p) == 0:
                p.copy_(torch.randn(p.shape, generator=g) * STD)
                perturbed.append(n)
    adapter_file = os.path.join(d, "adapter.safetensors")
    net.save_weights(adapter_file, torch.float32, {})
    ps = prompts("llama_f32")
    LycorisNetwork.apply_preset(preset)
    base2 = load_hf("llama_f32", torch.float32)
    with contextlib.redirect_stdout(io.StringIO()):
        net2, _ = create_lycoris_from_weights(1.0, adapter_file, base2)
    net2.apply_to()
    ref = {}
    for k, s in enumerate(SCALES):
        net2.multiplier = s
        for lora in net2.loras:
            lora.multiplier = s
        for p, lg in enumerate(logits(base2, ps)):
            ref[f"logits_{p}_s{k}"] = lg
    for lora in net2.loras:
        lora.multiplier = 1.0
    fwd = {}
    scales = {}
    modules = []
    with torch.no_grad():
        for lora in net2.loras:
            org = lora.org_module[0]
            path = next(n for n, m in base2.named_modules() if m is org)
            fwd[path + ".weight"] = org.weight.detach() + lora.get_weight(lora.shape).to(org.weight.dtype) * lora.scalar
            scales[path] = float(lora.scale)
            modules.append({"module": path, "lycoris_name": lora.lora_name, "scale": float(lora.scale),
                            "adapter_keys": keys_of(adapter_file, lora.lora_name + ".")})
    modules.sort(key=lambda e: e["module"])
    net2.merge_to(1.0)
    base_sd = base_state("llama_f32")
    ch = changed(base_sd, base2.state_dict())
    save(os.path.join(d, "merged.safetensors"), ch)
    save(os.path.join(d, "merged_forward.safetensors"), changed(base_sd, fwd))
    save(os.path.join(d, "reference.safetensors"), ref)
    fixturelib.write_json(os.path.join(d, "expected.json"), {
        "name": name, "format": "lycoris_loha",
        "producer": {"tool": "lycoris-lora", "calls": "create_lycoris(algo='loha', linear_dim=4, linear_alpha=2) -> "
                     "save_weights; create_lycoris_from_weights(1.0) -> forward at multiplier s; merge_to(1.0)",
                     "versions": versions()},
        "generator": GENERATOR, "seed": seed, "base_model": model_rel("llama_f32"), "base_dtype": "F32",
        "merged_file": "merged.safetensors", "merged_forward_file": "merged_forward.safetensors",
        "merged_tensors": sorted(ch), "module_scales": scales, "scales": SCALES, "prompts": ps,
        "adapter_files": ["adapter.safetensors"], "modules": modules,
        "perturbed_parameters": perturbed,
        "notes": "scale = alpha / dim = 0.5. merged_forward = W + get_weight() * scalar (the forward's weight, "
                 "scale applied once); merged = LyCORIS 4.1.3 merge_to, which applies the scale twice "
                 "(get_diff_weight multiplies get_weight(), already scaled, by scale again). graft follows the "
                 "forward. reference logits: LyCORIS forward with the network multiplier s."})


def gen_lokr_live():
    """Unmerged-forward logits for the committed LoKr fixtures (PEFT at two scales, LyCORIS at two multipliers)."""
    import torch
    from peft import PeftModel
    from lycoris import LycorisNetwork
    from lycoris.wrapper import create_lycoris_from_weights
    d = os.path.join(OUT, "lokr_live")
    reset(d)
    ps = prompts("llama_f32")
    ref = {}
    for fx in ["peft_lokr", "peft_lokr_decompose_both"]:
        pm = PeftModel.from_pretrained(load_hf("llama_f32", torch.float32), os.path.join(OUT, fx))
        pm.eval()
        for k, v in scaled_logits(pm, ps).items():
            ref[f"{fx}.{k}"] = v
    for fx in ["lycoris_lokr", "lycoris_lokr_decompose_both"]:
        with open(os.path.join(OUT, fx, "expected.json")) as f:
            lcfg = json.load(f)
        LycorisNetwork.apply_preset({"target_module": lcfg["lycoris_config"].get("target_module", []),
                                     "target_name": lcfg["lycoris_config"].get("target_name", []),
                                     "exclude_name": lcfg["lycoris_config"].get("exclude_name", []),
                                     "module_algo_map": {}, "name_algo_map": {}, "lora_prefix": "lycoris"})
        base = load_hf("llama_f32", torch.float32)
        with contextlib.redirect_stdout(io.StringIO()):
            net, _ = create_lycoris_from_weights(1.0, os.path.join(OUT, fx, "adapter.safetensors"), base)
        net.apply_to()
        for k, s in enumerate(SCALES):
            for lora in net.loras:
                lora.multiplier = s
            for p, lg in enumerate(logits(base, ps)):
                ref[f"{fx}.logits_{p}_s{k}"] = lg
    save(os.path.join(d, "reference.safetensors"), ref)
    fixturelib.write_json(os.path.join(d, "reference.json"), {
        "name": "lokr_live", "generator": GENERATOR, "base_model": model_rel("llama_f32"), "scales": SCALES,
        "prompts": ps, "producer": {"versions": versions()},
        "notes": "<fixture>.logits_<p>_s<k>: the tool's unmerged forward of tests/fixtures/adapters/<fixture> at user "
                 "scale SCALES[k] (PEFT: scaling * s; LyCORIS: module multiplier s)."})


MLX_SCRIPT = r'''
import json, sys
import numpy as np
import mlx.core as mx
import mlx.nn as nn
from mlx_lm.tuner.dora import DoRALinear
spec = json.load(open(sys.argv[1]))
data = dict(np.load(sys.argv[2]))
out = {}
for mod in spec["modules"]:
    w = data[mod + ".weight"]
    lin = nn.Linear(w.shape[1], w.shape[0], bias=False)
    lin.weight = mx.array(w)
    d = DoRALinear.from_base(lin, r=spec["rank"], scale=spec["scale"])
    d.lora_a = mx.array(data[mod + ".lora_a"])
    d.lora_b = mx.array(data[mod + ".lora_b"])
    d.m = mx.array(data[mod + ".m"])
    fused = d.fuse()
    out[mod + ".weight"] = np.array(fused.weight)
    x = mx.array(data["x"][:, : w.shape[1]])
    out[mod + ".y"] = np.array(d(x))
np.savez(sys.argv[3], **out)
'''


def gen_mlx_dora(mlx_python):
    """mlx-lm DoRA: adapters.safetensors (lora_a [in, r], lora_b [r, out], m [out]) and the fused weights from
    mlx-lm's own DoRALinear.fuse (run under mlx_python), or its formula in numpy when mlx is unavailable."""
    from safetensors.numpy import load_file, save_file
    name = "mlx_dora"
    seed = SEEDS[name]
    rng = np.random.default_rng(seed)
    d = os.path.join(OUT, name)
    reset(d)
    base = load_file(os.path.join(REPO, model_rel("llama_f32"), "model.safetensors"))
    rank, scale = 4, 2.0
    mods = [f"model.layers.{l}.{p}" for l in range(2) for p in
            ["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"]]
    ad = {}
    for mname in mods:
        w = base[mname + ".weight"]
        out_d, in_d = w.shape
        ad[mname + ".lora_a"] = rng.uniform(-1 / np.sqrt(in_d), 1 / np.sqrt(in_d), (in_d, rank)).astype(np.float32)
        ad[mname + ".lora_b"] = (rng.standard_normal((rank, out_d)) * STD).astype(np.float32)
        ad[mname + ".m"] = (np.linalg.norm(w.astype(np.float32), axis=1) *
                            (1 + 0.1 * rng.standard_normal(out_d))).astype(np.float32)
    save_file(ad, os.path.join(d, "adapters.safetensors"), metadata={"format": "mlx"})
    fixturelib.write_json(os.path.join(d, "adapter_config.json"), {
        "fine_tune_type": "dora", "num_layers": 2,
        "lora_parameters": {"rank": rank, "scale": scale, "dropout": 0.0,
                            "keys": ["self_attn.q_proj", "self_attn.v_proj", "mlp.down_proj"]}})
    x = rng.standard_normal((3, 128)).astype(np.float32)
    merged, ys, how = {}, {}, None
    if mlx_python:
        tmp = os.path.join(d, "_tmp")
        os.makedirs(tmp)
        arrays = {m + ".weight": base[m + ".weight"] for m in mods}
        arrays.update(ad)
        arrays["x"] = x
        np.savez(os.path.join(tmp, "in.npz"), **arrays)
        with open(os.path.join(tmp, "spec.json"), "w") as f:
            json.dump({"modules": mods, "rank": rank, "scale": scale}, f)
        with open(os.path.join(tmp, "run.py"), "w") as f:
            f.write(MLX_SCRIPT)
        subprocess.run([mlx_python, os.path.join(tmp, "run.py"), os.path.join(tmp, "spec.json"),
                        os.path.join(tmp, "in.npz"), os.path.join(tmp, "out.npz")], check=True)
        res = dict(np.load(os.path.join(tmp, "out.npz")))
        shutil.rmtree(tmp)
        for m in mods:
            merged[m + ".weight"] = res[m + ".weight"].astype(np.float32)
            ys[m] = res[m + ".y"]
        how = "mlx-lm DoRALinear.fuse() and DoRALinear.__call__ run under mlx (CPU)"
    else:
        for m in mods:
            w = base[m + ".weight"]
            v = w + (scale * ad[m + ".lora_b"].T) @ ad[m + ".lora_a"].T
            merged[m + ".weight"] = ((ad[m + ".m"] / np.linalg.norm(v, axis=1))[:, None] * v).astype(np.float32)
        how = "numpy transcription of mlx-lm DoRALinear.fuse (mlx unavailable)"
    # independent float64 check of the fused weights
    for m in mods:
        w = base[m + ".weight"].astype(np.float64)
        v = w + scale * (ad[m + ".lora_b"].T.astype(np.float64) @ ad[m + ".lora_a"].T.astype(np.float64))
        want = (ad[m + ".m"] / np.linalg.norm(v, axis=1))[:, None] * v
        err = np.abs(merged[m + ".weight"] - want).max()
        assert err < 1e-5, (m, err)
        if m in ys:  # the unfused mlx forward equals x @ fused.T (no bias)
            assert np.abs(ys[m] - x[:, : w.shape[1]] @ want.T).max() < 1e-4
    save_file(merged, os.path.join(d, "merged.safetensors"), metadata={"format": "pt"})
    fixturelib.write_json(os.path.join(d, "expected.json"), {
        "name": name, "format": "mlx_dora", "producer": {"tool": "mlx-lm", "calls": how, "versions": versions()},
        "generator": GENERATOR, "seed": seed, "base_model": model_rel("llama_f32"), "base_dtype": "F32",
        "merged_file": "merged.safetensors", "merged_tensors": sorted(merged),
        "adapter_files": ["adapter_config.json", "adapters.safetensors"],
        "modules": [{"module": m, "scale": scale, "adapter_keys": [m + ".lora_a", m + ".lora_b", m + ".m"]}
                    for m in mods],
        "notes": "mlx-lm DoRALinear: fuse(): V = W + (scale * lora_b.T) @ lora_a.T, W' = (m / ||V||_row)[:, None] * V; "
                 "__call__ = (m / ||V||_row) * (x W^T + scale * (x lora_a) lora_b) + bias, norm with stop_gradient. "
                 "Factors are random (not trained): lora_a uniform like mlx-lm's init, lora_b N(0, 0.05^2), "
                 "m = ||W||_row * (1 + 0.1 N(0,1)). The unfused mlx forward was checked against x @ fused^T."})


MLX_EMBED_SCRIPT = r'''
import json, sys
from pathlib import Path
import numpy as np
import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.utils import load_model
from mlx_lm.tuner.utils import linear_to_lora_layers, load_adapters
spec = json.load(open(sys.argv[1]))
out = Path(sys.argv[2])
mx.random.seed(spec["seed"])
rng = np.random.default_rng(spec["seed"])
# what `mlx_lm lora --fine-tune-type dora` builds: base frozen, DoRA layers from linear_to_lora_layers
model, _ = load_model(Path(spec["model"]))
model.freeze()
linear_to_lora_layers(model, spec["num_layers"], spec["lora_parameters"], use_dora=True)
new = {}
for k, v in sorted(tree_flatten(model.trainable_parameters())):
    a = np.array(v)
    if k.endswith(".lora_b"):  # zero at init: a trained adapter's is not
        a = (rng.standard_normal(a.shape) * spec["std"]).astype(np.float32)
    elif k.endswith(".m"):  # ||W||_row at init: a trained adapter's differs
        a = (a * (1 + 0.1 * rng.standard_normal(a.shape))).astype(np.float32)
    new[k] = mx.array(a)
model.update(tree_unflatten(list(new.items())))
mx.save_safetensors(str(out / "adapters.safetensors"), dict(tree_flatten(model.trainable_parameters())),
                    metadata={"format": "mlx"})
json.dump({"fine_tune_type": "dora", "num_layers": spec["num_layers"], "lora_parameters": spec["lora_parameters"]},
          open(out / "adapter_config.json", "w"), indent=1)
# a user's run: a fresh model with the saved adapter (mlx_lm.load(..., adapter_path=...)), then mlx_lm fuse
model, _ = load_model(Path(spec["model"]))
model = load_adapters(model, str(out))
model.eval()
logits = {f"logits_{i}": np.array(model(mx.array([ids]))[0]).astype(np.float32)
          for i, ids in enumerate(spec["prompts"])}
before = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
fused = [(n, m.fuse()) for n, m in model.named_modules() if hasattr(m, "fuse")]
model.update_modules(tree_unflatten(fused))
after = {k: np.array(v) for k, v in tree_flatten(model.parameters())}
merged = {}
for n, _ in fused:
    merged[n + ".weight"] = after[n + ".weight"].astype(np.float32)
np.savez(out / "_logits.npz", **logits)
np.savez(out / "_merged.npz", **merged)
'''


def gen_mlx_dora_embed(mlx_python, name="mlx_dora_embed", base="llama_f32"):
    """mlx-lm DoRA with the embedding among its keys (DoRAEmbedding: m [vocab], per-row norm of [vocab, hidden]),
    made, reloaded, run and fused by mlx-lm itself under mlx_python. On a tied checkpoint (qwen2_f32) mlx-lm's
    head is DoRAEmbedding.as_linear, the fused embedding as a linear layer."""
    from safetensors.numpy import load_file, save_file
    if not mlx_python:
        raise SystemExit(f"{name} needs --mlx-python (an interpreter with mlx and mlx-lm)")
    seed = SEEDS["mlx_dora_embed"] + (0 if base == "llama_f32" else 100)
    d = os.path.join(OUT, name)
    reset(d)
    ps = prompts(base)
    keys = ["model.embed_tokens", "self_attn.q_proj", "self_attn.v_proj"]
    lp = {"rank": 4, "scale": 2.0, "dropout": 0.0, "keys": keys}
    spec = {"model": os.path.join(REPO, model_rel(base)), "seed": seed, "std": STD, "num_layers": 2,
            "lora_parameters": lp, "prompts": [p["ids"] for p in ps]}
    with open(os.path.join(d, "_spec.json"), "w") as f:
        json.dump(spec, f)
    with open(os.path.join(d, "_run.py"), "w") as f:
        f.write(MLX_EMBED_SCRIPT)
    subprocess.run([mlx_python, os.path.join(d, "_run.py"), os.path.join(d, "_spec.json"), d], check=True)
    logits = dict(np.load(os.path.join(d, "_logits.npz")))
    merged = dict(np.load(os.path.join(d, "_merged.npz")))
    mlx_versions = subprocess.run([mlx_python, "-c", "import importlib.metadata as m; import json; print(json.dumps("
                                   "{p: m.version(p) for p in ['mlx', 'mlx-lm']}))"],
                                  check=True, capture_output=True, text=True).stdout
    for f in ["_spec.json", "_run.py", "_logits.npz", "_merged.npz"]:
        os.remove(os.path.join(d, f))
    # independent float64 check of mlx-lm's fused embedding: (m / ||V||_row) V, V = E + scale * lora_a @ lora_b
    wts = load_file(os.path.join(REPO, model_rel(base), "model.safetensors"))
    ad = load_file(os.path.join(d, "adapters.safetensors"))
    e = wts["model.embed_tokens.weight"].astype(np.float64)
    v = e + lp["scale"] * ad["model.embed_tokens.lora_a"].astype(np.float64) @ ad["model.embed_tokens.lora_b"].astype(
        np.float64)
    want = (ad["model.embed_tokens.m"] / np.linalg.norm(v, axis=1))[:, None] * v
    err = np.abs(merged["model.embed_tokens.weight"] - want).max()
    assert err < 1e-5, err
    save_file(merged, os.path.join(d, "merged.safetensors"), metadata={"format": "pt"})
    save_file({k: np.ascontiguousarray(v) for k, v in logits.items()}, os.path.join(d, "reference.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(REPO, model_rel(base), "config.json")) as f:
        tied = json.load(f).get("tie_word_embeddings", False)
    fixturelib.write_json(os.path.join(d, "expected.json"), {
        "name": name, "format": "mlx_dora",
        "producer": {"tool": "mlx-lm", "calls": "load_model; freeze; linear_to_lora_layers(use_dora=True) -> "
                     "save_safetensors(trainable_parameters); fresh load_model + load_adapters -> forward (logits); "
                     "DoRALinear/DoRAEmbedding.fuse() as mlx_lm fuse does", "versions": json.loads(mlx_versions)},
        "generator": GENERATOR, "seed": seed, "base_model": model_rel(base), "base_dtype": "F32",
        "tied_embeddings": tied, "merged_file": "merged.safetensors", "merged_tensors": sorted(merged),
        "adapter_files": ["adapter_config.json", "adapters.safetensors"], "prompts": ps,
        "modules": [{"module": m, "scale": lp["scale"], "adapter_keys": [m + ".lora_a", m + ".lora_b", m + ".m"],
                     "base_class": "Embedding" if m.endswith("embed_tokens") else "Linear"}
                    for m in sorted({k.rsplit(".", 1)[0] for k in ad})],
        "notes": "mlx-lm DoRA with keys " + ", ".join(keys) + ": DoRAEmbedding on model.embed_tokens (lora_a "
                 "[vocab, r], lora_b [r, hidden], m [vocab]; fuse: (m / ||E + scale lora_a lora_b||_row) (E + ...)), "
                 "DoRALinear on q/v. lora_a random as mlx-lm initializes it (uniform), lora_b N(0, 0.05^2), "
                 "m = init * (1 + 0.1 N(0,1)). reference logits_<p>: mlx-lm's unfused forward (the lookup through "
                 "DoRAEmbedding.__call__" + (", the tied head through DoRAEmbedding.as_linear" if tied else "") +
                 "). The fused embedding was checked against a float64 evaluation of the formula."})


GENS = {"peft_dora": gen_peft_dora, "peft_dora_bf16": gen_peft_dora_bf16, "peft_dora_pair": gen_peft_dora_pair,
        "peft_dora_qwen2": gen_peft_dora_qwen2, "peft_dora_phi3": gen_peft_dora_phi3,
        "peft_loha": gen_peft_loha, "lycoris_loha": gen_lycoris_loha, "lokr_live": gen_lokr_live}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--mlx-python", default=None)
    a = ap.parse_args()
    os.chdir(REPO)
    names = a.only or list(GENS) + ["mlx_dora", "mlx_dora_embed", "mlx_dora_embed_tied"]
    for n in names:
        print("generating", n, flush=True)
        if n == "mlx_dora":
            gen_mlx_dora(a.mlx_python)
        elif n == "mlx_dora_embed":
            gen_mlx_dora_embed(a.mlx_python)
        elif n == "mlx_dora_embed_tied":
            gen_mlx_dora_embed(a.mlx_python, "mlx_dora_embed_tied", "qwen2_f32")
        else:
            GENS[n]()


if __name__ == "__main__":
    main()
