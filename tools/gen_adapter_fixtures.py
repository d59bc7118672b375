#!/usr/bin/env python3
"""Generate small reference adapter fixtures (PEFT, LyCORIS, mlx-lm, kohya/ComfyUI) for graft's tests.

Developer tool (not run by CI); the outputs are committed under tests/fixtures/adapters/.
Needs: torch, transformers, peft, lycoris-lora, mlx + mlx-lm, safetensors, numpy.

Every fixture is built against one of the tiny checkpoints in tests/fixtures/models/ (llama_f32, or
llama_bf16 for the bf16 case) and written to tests/fixtures/adapters/<name>/:

  adapter files        exactly as the producing tool writes them (PEFT save_pretrained:
                       adapter_config.json + adapter_model.safetensors; LyCORIS save_weights: one
                       .safetensors; mlx-lm: adapters.safetensors + adapter_config.json; kohya: one file)
  merged.safetensors   the tensors that the producing tool's own merge changed, in the base dtype
                       (PEFT merge_and_unload, LyCORIS merge_to, mlx_lm fuse, ComfyUI rule for kohya);
                       names are the base checkpoint's tensor names
  merged_safe_merge.safetensors   (peft_bf16 only) merge_and_unload(safe_merge=True): double rounding
  merged_forward.safetensors      (lycoris_* only) W + scale*kron(w1, w2), the weight LyCORIS's own forward
                       uses; LyCORIS 4.1.3 merge_to() applies scale twice (merged.safetensors records that)
  expected.json        format, producer + versions, per-module rank / alpha / effective scale (read
                       from the tool's own in-memory module where it has one), adapter key names and
                       shapes, the merge formula, a bit-exact float32 recipe, a tolerance hint, the
                       dtype path and notes

Fixtures: peft_lora, peft_rslora, peft_patterns, peft_modules_to_save, peft_embed, peft_bf16, peft_lokr,
peft_lokr_decompose_both, lycoris_lokr, lycoris_lokr_decompose_both, mlx_lora, kohya_lora (the last one is
re-keyed from peft_lora's files, merged with the ComfyUI rule).  Total ~2.9 MB.

The random init of every adapter is replaced by non-trivial values: each adapter factor that the tool
initialises to zero (lora_B, lokr_w1/w1_a, lycoris lokr_w2/w2_b, mlx lora_b, PEFT embedding A) is set
to N(0, 0.05^2) from a per-fixture seeded generator, so every delta is non-zero.  mlx-lm is instead
really trained for a few iterations (which makes lora_b non-zero) so that its files are the genuine
output of `mlx_lm lora`.  All seeds are fixed; a rerun reproduces the files (CPU, same versions).

After writing, every fixture is re-checked independently with numpy (float64): merged - base is
compared against scale * delta(factors read back from the adapter file) for every module.

Usage: python3 tools/gen_adapter_fixtures.py [--only NAME ...] [--out DIR] [--keep-tmp] [--verify-only]
(--only takes generator names: peft_lokr also writes peft_lokr_decompose_both, lycoris_lokr also writes
lycoris_lokr_decompose_both; kohya_lora needs peft_lora in the same --out.)  Takes ~2 minutes on CPU.
The script re-executes itself with PYTHONHASHSEED=0 and HF_HUB_OFFLINE=1 (PEFT writes target_modules in set
order), so two runs write byte-identical files.
"""
import argparse
import contextlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import numpy as np
import fixturelib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_REL = os.path.join("tests", "fixtures", "models")
OUT_DIR = os.path.join(REPO, "tests", "fixtures", "adapters")
GENERATOR = "tools/gen_adapter_fixtures.py"
PERTURB_STD = 0.05

PROJ_ATTN = ["q_proj", "k_proj", "v_proj", "o_proj"]
PROJ_MLP = ["gate_proj", "up_proj", "down_proj"]
ALL_PROJ = PROJ_ATTN + PROJ_MLP

SEEDS = {
    "peft_lora": 1001, "peft_rslora": 1002, "peft_patterns": 1003, "peft_modules_to_save": 1004,
    "peft_embed": 1005, "peft_bf16": 1006, "peft_lokr": 1007, "peft_lokr_decompose_both": 1008,
    "lycoris_lokr": 1009, "lycoris_lokr_decompose_both": 1010, "mlx_lora": 1011, "kohya_lora": 1012,
}

# ----------------------------------------------------------------------------------------------
# small helpers


def versions():
    return fixturelib.versions(["torch", "transformers", "peft", "lycoris-lora", "mlx", "mlx-lm", "safetensors", "numpy"])


def model_rel(name):
    # relative to the repo root: tools chdir there, so paths recorded by the tools are relative too
    return os.path.join(MODELS_REL, name)


def st_dtype_name(t):
    import torch
    return {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}[t.dtype]


def load_st(path):
    from safetensors.torch import load_file
    return load_file(path)


def st_header(path):
    """(tensor name -> (dtype, shape)), metadata) straight from the safetensors header."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = json.loads(f.read(n))
    meta = hdr.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"]) for k, v in hdr.items()}, meta


def save_merged(path, tensors):
    from safetensors.torch import save_file
    tensors = {k: v.detach().contiguous().clone() for k, v in sorted(tensors.items())}
    save_file(tensors, path, metadata={"format": "pt"})


def changed_tensors(base_sd, merged_sd):
    """Tensors of merged_sd that differ (bitwise) from base_sd; dtype must be unchanged."""
    import torch
    out = {}
    for k, v in merged_sd.items():
        if k not in base_sd:
            # tied checkpoints (llama_bf16) store no lm_head.weight; the merged state dict still lists it
            if k == "lm_head.weight" and torch.equal(v, merged_sd["model.embed_tokens.weight"]):
                continue
            raise RuntimeError(f"merged model has a tensor the base lacks: {k}")
        b = base_sd[k]
        if v.dtype != b.dtype:
            raise RuntimeError(f"{k}: merged dtype {v.dtype} != base dtype {b.dtype}")
        if v.shape != b.shape or not torch.equal(v, b):
            out[k] = v
    return out


def load_hf(name, dtype):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model_rel(name), dtype=dtype)
    m.eval()
    return m


def base_state(name):
    return load_st(os.path.join(REPO, model_rel(name), "model.safetensors"))


def perturb_zero_params(model, names_filter, seed, std=PERTURB_STD):
    """Every trainable adapter parameter that is all zero gets N(0, std^2) (sorted name order, own RNG)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    done = []
    with torch.no_grad():
        for n, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if not any(s in n for s in names_filter):
                continue
            if torch.count_nonzero(p) == 0:
                p.copy_((torch.randn(p.shape, generator=g, dtype=torch.float32) * std).to(p.dtype))
                done.append(n)
    return done


def _json_fmt(obj, indent=0, width=110):
    """json with containers that fit in `width` columns kept on one line (readable diffs, small files)."""
    flat = json.dumps(obj)
    pad = "  " * indent
    if not isinstance(obj, (dict, list)) or len(flat) + len(pad) <= width:
        return flat
    inner = "  " * (indent + 1)
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k)}: {_json_fmt(v, indent + 1, width)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    items = [inner + _json_fmt(v, indent + 1, width) for v in obj]
    return "[\n" + ",\n".join(items) + "\n" + pad + "]"


RECIPE_NOTE = ("bit_exact_recipe: the float32 operation order that reproduces the merged file(s) bit-for-bit, "
               "observed on the generating machine (x86-64 CPU; torch / mlx CPU kernels) and asserted by "
               "`tools/gen_adapter_fixtures.py --verify-only`. It is a property of those kernels, not a contract: "
               "a merge that follows another order should compare with tolerance_hint instead.")
TOLERANCE_HINT = ("F32: |graft - merged| <= (r + 2) * 2^-24 * (|W| + |scale| * sum_k |B[o,k] * A[k,i]|) per element "
                  "(for LoKr use |scale| * kron(|w1|, |w2|) with factored halves as |a| @ |b|). BF16: "
                  "|graft - merged| <= ulp_bf16(max(|W|, |delta|, |merged|)) per element -- NOT 1 ulp of the "
                  "merged value: where W + delta ~ 0 single and double rounding differ by many result ulps "
                  "(see peft_bf16 rounding_stats).")


def write_json(path, obj):
    if "format" in obj and "merge_formula" in obj and "bit_exact_recipe" not in obj:
        key = "peft_lora_bf16" if obj["format"] == "peft_lora" and obj.get("base_dtype") == "BF16" else obj["format"]
        out = {}
        for k, v in obj.items():
            out[k] = v
            if k == "merge_formula":
                out["bit_exact_recipe"] = RECIPES[key]
                out["bit_exact_recipe_note"] = RECIPE_NOTE
                out["tolerance_hint"] = TOLERANCE_HINT
        obj = out
    with open(path, "w") as f:
        f.write(_json_fmt(obj) + "\n")


def tensor_list(path):
    hdr, meta = st_header(path)
    return {"tensors": {k: {"dtype": v[0], "shape": v[1]} for k, v in sorted(hdr.items())}, "metadata": meta}


# ----------------------------------------------------------------------------------------------
# PEFT


def peft_modules_info(peft_model, kind="lora"):
    """Per wrapped module: rank / alpha / scale exactly as PEFT holds them in memory."""
    from peft.tuners.tuners_utils import BaseTunerLayer
    info = []
    for name, mod in peft_model.named_modules():
        if not isinstance(mod, BaseTunerLayer):
            continue
        if not hasattr(mod, "scaling") or "default" not in getattr(mod, "scaling", {}):
            continue
        path = name[len("base_model.model."):]
        base = mod.get_base_layer()
        ent = {
            "module": path,
            "weight": path + ".weight",
            "base_class": type(base).__name__,
            "weight_shape": list(base.weight.shape),
            "rank": int(mod.r["default"]),
            "alpha": float(mod.lora_alpha["default"]) if kind == "lora" else float(mod.alpha["default"]),
            "scale": float(mod.scaling["default"]),
        }
        info.append(ent)
    info.sort(key=lambda e: e["module"])
    return info


def peft_save(peft_model, out_dir):
    peft_model.save_pretrained(out_dir)
    # the model card is boilerplate; keep only what a loader reads
    readme = os.path.join(out_dir, "README.md")
    if os.path.exists(readme):
        os.remove(readme)


def peft_reload_and_merge(base_name, dtype, out_dir, safe_merge=False):
    from peft import PeftModel
    base = load_hf(base_name, dtype)
    pm = PeftModel.from_pretrained(base, out_dir)
    merged = pm.merge_and_unload(safe_merge=safe_merge)
    return {k: v.detach().clone() for k, v in merged.state_dict().items()}, pm


def attach_peft_keys(modules, adapter_path, key_kind):
    hdr, _ = st_header(adapter_path)
    for e in modules:
        prefix = "base_model.model." + e["module"] + "."
        e["adapter_keys"] = sorted(k for k in hdr if k.startswith(prefix))
    return hdr


def gen_peft_lora_like(name, out, *, base_name="llama_f32", dtype_name="float32", cfg_kwargs, notes,
                       extra_setup=None, write_safe_merge=False):
    import torch
    from peft import LoraConfig, get_peft_model
    dtype = getattr(torch, dtype_name)
    seed = SEEDS[name]
    torch.manual_seed(seed)
    model = load_hf(base_name, dtype)
    cfg = LoraConfig(**cfg_kwargs)
    pm = get_peft_model(model, cfg)
    perturbed = perturb_zero_params(pm, ["lora_"], seed + 500000)
    extra = extra_setup(pm, seed) if extra_setup else {}
    modules = peft_modules_info(pm)
    in_memory = {n: p.dtype for n, p in pm.named_parameters() if "lora_" in n}
    adapter_param_dtype = sorted({str(d).replace("torch.", "") for d in in_memory.values()})

    d = os.path.join(out, name)
    fixturelib.reset_dir(d)
    peft_save(pm, d)
    # merge in memory too (to check that the round trip through the files is exact)
    inmem_merged = {k: v.detach().clone() for k, v in pm.merge_and_unload().state_dict().items()}

    base_sd = base_state(base_name)
    merged_sd, _ = peft_reload_and_merge(base_name, dtype, d)
    changed = changed_tensors(base_sd, merged_sd)
    ch_inmem = changed_tensors(base_sd, inmem_merged)
    assert sorted(changed) == sorted(ch_inmem), (sorted(changed), sorted(ch_inmem))
    for k in changed:
        assert torch.equal(changed[k], ch_inmem[k]), f"{name}: file round trip changed {k}"
    save_merged(os.path.join(d, "merged.safetensors"), changed)

    safe_changed = None
    if write_safe_merge:
        safe_sd, _ = peft_reload_and_merge(base_name, dtype, d, safe_merge=True)
        safe_changed = changed_tensors(base_sd, safe_sd)
        save_merged(os.path.join(d, "merged_safe_merge.safetensors"), safe_changed)

    adapter_file = os.path.join(d, "adapter_model.safetensors")
    attach_peft_keys(modules, adapter_file, "lora")
    with open(os.path.join(d, "adapter_config.json")) as f:
        acfg = json.load(f)
    return dict(dir=d, modules=modules, changed=changed, safe_changed=safe_changed, acfg=acfg,
                perturbed=perturbed, adapter_param_dtype=adapter_param_dtype, extra=extra,
                adapter_file=adapter_file)


PEFT_LINEAR_FORMULA = ("delta = (lora_B.weight @ lora_A.weight) * scale, computed in float32 "
                       "(peft lora.Linear.get_delta_weight: matmul first, then multiply by scaling); "
                       "merged = W + delta (in-place weight.data += delta, merge_and_unload(safe_merge=False))")


def peft_expected(name, r, base_name, base_dtype, fmt, extra_notes, merge_formula, extra_fields=None):
    acfg = r["acfg"]
    exp = {
        "name": name,
        "format": fmt,
        "producer": {"tool": "peft", "calls": "get_peft_model -> save_pretrained; "
                     "PeftModel.from_pretrained(base, dir).merge_and_unload()", "versions": versions()},
        "generator": GENERATOR,
        "seed": SEEDS[name],
        "base_model": model_rel(base_name),
        "base_dtype": base_dtype,
        "adapter_files": ["adapter_config.json", "adapter_model.safetensors"],
        "adapter_dtype": sorted({v["dtype"] for v in tensor_list(r["adapter_file"])["tensors"].values()}),
        "adapter_tensors": tensor_list(r["adapter_file"]),
        "adapter_config": acfg,
        "merged_file": "merged.safetensors",
        "merged_dtype": base_dtype,
        "merged_tensors": sorted(r["changed"].keys()),
        "merge_formula": merge_formula,
        "modules": r["modules"],
        "perturbed_parameters": r["perturbed"],
        "notes": extra_notes,
    }
    if extra_fields:
        exp.update(extra_fields)
    return exp


def gen_peft_lora(out):
    name = "peft_lora"
    r = gen_peft_lora_like(name, out, cfg_kwargs=dict(r=4, lora_alpha=8, target_modules=ALL_PROJ,
                                                        lora_dropout=0.0, bias="none"), notes=[])
    exp = peft_expected(name, r, "llama_f32", "F32", "peft_lora", [
        "Plain PEFT LoRA, r=4, lora_alpha=8 => scale = 8/4 = 2.0 on all 14 Linear modules.",
        "On-disk keys have the adapter name stripped: base_model.model.<module>.lora_A.weight / .lora_B.weight "
        "(in memory they are ...lora_A.default.weight).",
        "lora_B (zero-initialised by PEFT) was set to N(0, 0.05^2) so the deltas are non-zero.",
    ], PEFT_LINEAR_FORMULA)
    write_json(os.path.join(r["dir"], "expected.json"), exp)
    return exp


def gen_peft_rslora(out):
    name = "peft_rslora"
    r = gen_peft_lora_like(name, out, cfg_kwargs=dict(r=4, lora_alpha=16, use_rslora=True,
                                                        target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
                           notes=[])
    exp = peft_expected(name, r, "llama_f32", "F32", "peft_lora", [
        "use_rslora=True: scale = lora_alpha / sqrt(r) = 16 / 2 = 8.0 (plain alpha/r would give 4.0).",
    ], PEFT_LINEAR_FORMULA)
    write_json(os.path.join(r["dir"], "expected.json"), exp)
    return exp


def gen_peft_patterns(out):
    name = "peft_patterns"
    rank_pattern = {"q_proj": 8, "layers.1.mlp.down_proj": 2}
    alpha_pattern = {"v_proj": 32}
    r = gen_peft_lora_like(name, out, cfg_kwargs=dict(
        r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "down_proj"],
        rank_pattern=rank_pattern, alpha_pattern=alpha_pattern, lora_dropout=0.0), notes=[])
    exp = peft_expected(name, r, "llama_f32", "F32", "peft_lora", [
        "rank_pattern / alpha_pattern keys are matched by PEFT (utils/other.py:get_pattern_key) with "
        "re.match(r'(.*\\.)?(<key>)$', module_name) against the model's module name WITHOUT the "
        "'base_model.model.' prefix (e.g. 'model.layers.1.mlp.down_proj'); the first key in dict order wins; "
        "r and alpha are resolved independently; the '.' in a key is a regex wildcard.",
        "Resolved: q_proj r=8 alpha=8 (scale 1.0); k_proj r=4 alpha=8 (2.0); v_proj r=4 alpha=32 (8.0); "
        "layers.0 down_proj r=4 alpha=8 (2.0); layers.1 down_proj r=2 alpha=8 (4.0).",
        "The per-module rank is also visible as the row count of lora_A; the effective scale is NOT stored "
        "in the tensors -- an importer must resolve the patterns from adapter_config.json.",
        "PEFT writes adapter_config.json with json.dumps(sort_keys=True), so rank_pattern / alpha_pattern are "
        "stored in ALPHABETICAL key order, not in the order the user gave; 'first matching key wins' at load "
        "time therefore means first in the on-disk (sorted) order. (No two keys overlap in this fixture.)",
    ], PEFT_LINEAR_FORMULA)
    write_json(os.path.join(r["dir"], "expected.json"), exp)
    return exp


def gen_peft_modules_to_save(out):
    import torch
    name = "peft_modules_to_save"

    def setup(pm, seed):
        g = torch.Generator().manual_seed(seed + 700000)
        w = pm.base_model.model.lm_head.modules_to_save["default"].weight
        with torch.no_grad():
            w.add_(torch.randn(w.shape, generator=g) * PERTURB_STD)
        return {}

    r = gen_peft_lora_like(name, out, cfg_kwargs=dict(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                        modules_to_save=["lm_head"], lora_dropout=0.0),
                           notes=[], extra_setup=setup)
    hdr, _ = st_header(r["adapter_file"])
    mts_keys = sorted(k for k in hdr if "lm_head" in k)
    exp = peft_expected(name, r, "llama_f32", "F32", "peft_lora", [
        "modules_to_save=['lm_head']: PEFT keeps a trainable full copy of lm_head (in memory "
        "base_model.model.lm_head.modules_to_save.default.weight); it was perturbed by N(0, 0.05^2) so it "
        "differs from the base.",
        f"On disk the full copy is written as {mts_keys} (the 'modules_to_save.default.' infix is stripped). "
        "It is an unscaled full replacement of lm_head.weight; merge_and_unload puts the copy in place.",
    ], PEFT_LINEAR_FORMULA + "; modules_to_save tensors replace the base tensor verbatim",
        extra_fields={"replacements": [{"weight": "lm_head.weight", "adapter_key": k} for k in mts_keys]})
    write_json(os.path.join(r["dir"], "expected.json"), exp)
    return exp


def gen_peft_embed(out):
    name = "peft_embed"
    r = gen_peft_lora_like(name, out, cfg_kwargs=dict(r=4, lora_alpha=8,
                                                        target_modules=["embed_tokens", "q_proj", "v_proj"],
                                                        lora_dropout=0.0), notes=[])
    hdr, _ = st_header(r["adapter_file"])
    emb_keys = sorted(k for k in hdr if "embed_tokens" in k)
    exp = peft_expected(name, r, "llama_f32", "F32", "peft_lora", [
        "LoRA on nn.Embedding: keys base_model.model.model.embed_tokens.lora_embedding_A / lora_embedding_B "
        "(nn.ParameterDict entries, so NO '.weight' suffix); A is [r, num_embeddings] = [4, 384], "
        "B is [embedding_dim, r] = [64, 4]; delta = (B @ A).T * scale -> [384, 64] "
        "(peft lora.Embedding.get_delta_weight uses transpose(B @ A, True)).",
        "PEFT initialises lora_embedding_A to zeros and lora_embedding_B to N(0,1) (reverse of Linear); "
        "A was set to N(0, 0.05^2).",
        "Because 'embed_tokens' is in target_modules, save_pretrained (save_embedding_layers='auto') ALSO writes "
        f"the full, unmodified base embedding: keys {[k for k in emb_keys if 'lora' not in k]} "
        "(with a 'base_layer' infix). It equals the base tensor bit-for-bit; an importer must accept it as an "
        "exact-shape replacement (= no-op) or ignore it, and must not double-apply it.",
    ], PEFT_LINEAR_FORMULA + "; Embedding: merged = W + ((B @ A).T * scale)",
        extra_fields={"embedding_keys": emb_keys})
    write_json(os.path.join(r["dir"], "expected.json"), exp)
    return exp


def gen_peft_bf16(out):
    import torch
    name = "peft_bf16"
    r = gen_peft_lora_like(name, out, base_name="llama_bf16", dtype_name="bfloat16",
                           cfg_kwargs=dict(r=4, lora_alpha=8, target_modules=ALL_PROJ, lora_dropout=0.0),
                           notes=[], write_safe_merge=True)
    # characterise the dtype path against explicit single / double rounding
    base_sd = base_state("llama_bf16")
    ad = load_st(r["adapter_file"])
    stats = {}
    n_single = n_double = n_total = 0
    max_res_ulps = max_big_ulps = 0.0
    for e in r["modules"]:
        a = ad[f"base_model.model.{e['module']}.lora_A.weight"]
        b = ad[f"base_model.model.{e['module']}.lora_B.weight"]
        w = base_sd[e["weight"]]
        delta = (b.float() @ a.float()) * e["scale"]
        single = (w.float() + delta).to(torch.bfloat16)
        double = (w.float() + delta.to(torch.bfloat16).float()).to(torch.bfloat16)
        m = r["changed"][e["weight"]]
        ms = r["safe_changed"][e["weight"]]
        assert torch.equal(m, single), f"{name}: unsafe merge is not single rounding at {e['weight']}"
        assert torch.equal(ms, double), f"{name}: safe merge is not double rounding at {e['weight']}"
        n_total += m.numel()
        n_single += int((m != double).sum())
        mf, df = m.float(), double.float()
        ulp_res = torch.exp2(torch.floor(torch.log2(mf.abs().clamp_min(2.0 ** -126))) - 7)
        ulp_big = torch.exp2(torch.floor(torch.log2(torch.maximum(torch.maximum(w.float().abs(), delta.abs()),
                                                                  mf.abs()).clamp_min(2.0 ** -126))) - 7)
        max_res_ulps = max(max_res_ulps, float(((mf - df).abs() / ulp_res).max()))
        max_big_ulps = max(max_big_ulps, float(((mf - df).abs() / ulp_big).max()))
    stats = {"elements": n_total, "elements_where_single_and_double_rounding_differ": n_single,
             "max_difference_in_ulps_of_merged_value": max_res_ulps,
             "max_difference_in_ulps_of_max(|W|,|delta|,|merged|)": max_big_ulps}
    exp = peft_expected(name, r, "llama_bf16", "BF16", "peft_lora", [
        "Base llama_bf16 loaded with dtype=torch.bfloat16 (tied embeddings; only projections are targeted).",
        f"Adapter parameters live in {r['adapter_param_dtype']} in memory: get_peft_model's default "
        "autocast_adapter_dtype=True upcasts bf16 adapter weights to float32, and save_pretrained writes them "
        "as they are -> adapter_model.safetensors is F32.",
        "lora_A values are exactly bf16-representable (PEFT creates the layer in the base dtype, kaiming-inits "
        "it in bf16, then upcasts to f32); lora_B was perturbed in f32 and is not.",
        "merged.safetensors = merge_and_unload() (safe_merge=False, the default): delta = (B @ A) * scale in "
        "float32 (adapter is f32 so the cast_to_fp32 branch is not taken), then bf16_weight.data += f32_delta. "
        "PyTorch computes the in-place add in float32 and rounds once (RNE) to bf16: "
        "merged == bf16(f32(W) + delta) bit-for-bit (verified for every module).",
        "merged_safe_merge.safetensors = merge_and_unload(safe_merge=True): orig += delta.to(bf16), i.e. "
        "double rounding: merged == bf16(f32(W) + f32(bf16(delta))) bit-for-bit (verified).",
        f"The two policies differ in {n_single} of {n_total} merged elements: at most {max_big_ulps:g} ulp of "
        f"max(|W|, |delta|, |merged|), but up to {max_res_ulps:g} ulps of the merged value itself where "
        "W + delta nearly cancels.",
    ], PEFT_LINEAR_FORMULA + " ; bf16 base: single rounding bf16(W_f32 + delta_f32)",
        extra_fields={"safe_merge_file": "merged_safe_merge.safetensors",
                      "dtype_path": {"adapter_in_memory": r["adapter_param_dtype"],
                                     "adapter_on_disk": "F32", "delta_compute": "F32",
                                     "merge_default": "safe_merge=False: bf16(W + delta) single RNE rounding",
                                     "merge_safe": "safe_merge=True: bf16(W + bf16(delta)) double rounding"},
                      "rounding_stats": stats})
    write_json(os.path.join(r["dir"], "expected.json"), exp)
    return exp


def gen_peft_lokr_variant(out, name, cfg_kwargs, notes):
    import torch
    from peft import LoKrConfig, get_peft_model
    seed = SEEDS[name]
    d = os.path.join(out, name)
    fixturelib.reset_dir(d)

    def build():
        torch.manual_seed(seed)
        m = load_hf("llama_f32", torch.float32)
        pm = get_peft_model(m, LoKrConfig(**cfg_kwargs))
        pert = perturb_zero_params(pm, ["lokr_"], seed + 500000)
        return pm, pert

    pm, perturbed = build()
    modules = []
    from peft.tuners.tuners_utils import BaseTunerLayer
    for mname, mod in pm.named_modules():
        if isinstance(mod, BaseTunerLayer) and hasattr(mod, "lokr_w1"):
            path = mname[len("base_model.model."):]
            present = sorted(a for a in mod.adapter_layer_names if "default" in getattr(mod, a))
            modules.append({"module": path, "weight": path + ".weight",
                            "weight_shape": list(mod.get_base_layer().weight.shape),
                            "rank": int(mod.r["default"]), "alpha": float(mod.alpha["default"]),
                            "scale": float(mod.scaling["default"]), "factors": present,
                            "both_factors_full": ("lokr_w1" in present and "lokr_w2" in present)})
    modules.sort(key=lambda e: e["module"])
    peft_save(pm, d)
    base_sd = base_state("llama_f32")
    merged_sd, _ = peft_reload_and_merge("llama_f32", torch.float32, d)
    changed = changed_tensors(base_sd, merged_sd)
    save_merged(os.path.join(d, "merged.safetensors"), changed)
    adapter_file = os.path.join(d, "adapter_model.safetensors")
    attach_peft_keys(modules, adapter_file, "lokr")
    with open(os.path.join(d, "adapter_config.json")) as f:
        acfg = json.load(f)
    r = dict(dir=d, modules=modules, changed=changed, acfg=acfg, perturbed=perturbed, adapter_file=adapter_file)
    formula = ("w1 = lokr_w1 or lokr_w1_a @ lokr_w1_b; w2 = lokr_w2 or lokr_w2_a @ lokr_w2_b; "
               "delta = torch.kron(w1, w2) * (alpha / r) (peft lokr make_kron: kron first, then * scale), "
               "float32; merged = W + delta (LycorisLayer.merge, weight.data += delta). PEFT uses alpha/r ALWAYS, "
               "also when both factors are full.")
    exp = peft_expected(name, r, "llama_f32", "F32", "peft_lokr", notes, formula)
    write_json(os.path.join(d, "expected.json"), exp)
    return exp


def gen_peft_lokr(out):
    return [
        gen_peft_lokr_variant(out, "peft_lokr", dict(r=4, alpha=8, target_modules=["q_proj", "v_proj"]), [
            "PEFT LoKr r=4 alpha=8 on q_proj, v_proj. factorization(64) = (8, 8), factorization(32) = (4, 8): "
            "q_proj: w1 [8,8], w2 [8,8]; v_proj: w1 [4,8], w2 [8,8]. w2 is full because r=4 is not < max(8,8)/2; "
            "so BOTH factors are full in every module, and PEFT still scales by alpha/r = 2.0 "
            "(LyCORIS / ComfyUI would use 1.0 for the same tensors -- decide by provenance).",
            "Keys: base_model.model.<module>.lokr_w1 / lokr_w2 (ParameterDict entries, no '.weight').",
            "PEFT initialises lokr_w1 (or lokr_w1_a) to zero; it was set to N(0, 0.05^2).",
        ]),
        gen_peft_lokr_variant(out, "peft_lokr_decompose_both",
                              dict(r=2, alpha=4, decompose_both=True,
                                   target_modules=["q_proj", "v_proj", "down_proj"]), [
            "PEFT LoKr r=2 alpha=4 decompose_both=True on q_proj, v_proj, down_proj: r < max/2 on both "
            "sides everywhere, so every module stores lokr_w1_a [a, r], lokr_w1_b [r, c], lokr_w2_a [b, r], "
            "lokr_w2_b [r, d]; scale = alpha/r = 2.0.",
            "Shapes (W = [a*b, c*d], w1 = [a, c], w2 = [b, d]): q_proj (64x64): a=c=8, b=d=8; v_proj (32x64): "
            "a=4 c=8, b=8 d=8; down_proj (64x128): a=8 c=8, b=8 d=16.",
            "PEFT initialises lokr_w1_a to zero; it was set to N(0, 0.05^2).",
        ]),
    ]


# ----------------------------------------------------------------------------------------------
# LyCORIS


def gen_lycoris_variant(out, name, *, dim, alpha, decompose_both, targets, exclude, notes):
    import torch
    from lycoris import LycorisNetwork, create_lycoris
    from lycoris.wrapper import create_lycoris_from_weights
    seed = SEEDS[name]
    d = os.path.join(out, name)
    fixturelib.reset_dir(d)
    preset = {"target_module": targets, "target_name": [], "exclude_name": exclude,
              "module_algo_map": {}, "name_algo_map": {}, "lora_prefix": "lycoris"}
    LycorisNetwork.apply_preset(preset)
    torch.manual_seed(seed)
    model = load_hf("llama_f32", torch.float32)
    with contextlib.redirect_stdout(io.StringIO()):
        net = create_lycoris(model, 1.0, linear_dim=dim, linear_alpha=alpha, algo="lokr",
                             decompose_both=decompose_both)
    net.apply_to()
    perturbed = []
    g = torch.Generator().manual_seed(seed + 500000)
    with torch.no_grad():
        for n, p in sorted(net.named_parameters(), key=lambda kv: kv[0]):
            if torch.count_nonzero(p) == 0:
                p.copy_(torch.randn(p.shape, generator=g) * PERTURB_STD)
                perturbed.append(n)
    modules = []
    for lora in sorted(net.loras, key=lambda l: l.lora_name):
        org = lora.org_module[0]
        path = next(n for n, m in model.named_modules() if m is org)
        present = [k for k in ["lokr_w1", "lokr_w1_a", "lokr_w1_b", "lokr_w2", "lokr_w2_a", "lokr_w2_b"]
                   if hasattr(lora, k) and isinstance(getattr(lora, k), torch.nn.Parameter)]
        modules.append({"module": path, "weight": path + ".weight", "lycoris_name": lora.lora_name,
                        "weight_shape": list(org.weight.shape), "dim": int(lora.lora_dim),
                        "configured_alpha": float(alpha), "alpha_saved": float(lora.alpha),
                        "scale": float(lora.scale), "factors": present,
                        "both_factors_full": bool(lora.use_w1 and lora.use_w2)})
    adapter_file = os.path.join(d, "adapter.safetensors")
    net.save_weights(adapter_file, torch.float32, {})

    # LyCORIS's own merge, from the saved file into a fresh base (what a user does to bake a LoKr)
    LycorisNetwork.apply_preset(preset)
    base2 = load_hf("llama_f32", torch.float32)
    with contextlib.redirect_stdout(io.StringIO()):
        net2, _ = create_lycoris_from_weights(1.0, adapter_file, base2)
    net2.apply_to()
    base_sd = base_state("llama_f32")
    # the weight LyCORIS's own forward uses (_rebuild_forward: base_weight + get_weight(shape) * scalar),
    # taken from the reloaded network BEFORE merging
    fwd = {}
    with torch.no_grad():
        for lora in net2.loras:
            org = lora.org_module[0]
            path = next(n for n, m in base2.named_modules() if m is org)
            fwd[path + ".weight"] = org.weight.detach() + lora.get_weight(lora.shape).to(org.weight.dtype) * lora.scalar
        fwd_check = 0.0
        for lora in net2.loras:
            org = lora.org_module[0]
            path = next(n for n, m in base2.named_modules() if m is org)
            xin = torch.randn(5, org.in_features, generator=torch.Generator().manual_seed(seed))
            fwd_check = max(fwd_check, float((org(xin) - xin @ fwd[path + ".weight"].T).abs().max()))
    assert fwd_check < 1e-5, fwd_check
    net2.merge_to(1.0)
    merged_sd = {k: v.detach().clone() for k, v in base2.state_dict().items()}
    changed = changed_tensors(base_sd, merged_sd)
    save_merged(os.path.join(d, "merged.safetensors"), changed)
    fwd_changed = changed_tensors(base_sd, fwd)
    assert sorted(fwd_changed) == sorted(changed)
    save_merged(os.path.join(d, "merged_forward.safetensors"), fwd_changed)

    # also merge with the in-memory network (same numbers expected) and record the scale actually applied
    net.merge_to(1.0)
    inmem = changed_tensors(base_sd, {k: v.detach() for k, v in model.state_dict().items()})
    same = sorted(inmem) == sorted(changed) and all(torch.equal(inmem[k], changed[k]) for k in changed)
    ad = load_st(adapter_file)

    def factor(p, w):
        if p + f"lokr_{w}" in ad:
            return ad[p + f"lokr_{w}"].double()
        return ad[p + f"lokr_{w}_a"].double() @ ad[p + f"lokr_{w}_b"].double()

    for e in modules:
        p = e["lycoris_name"] + "."
        k = torch.kron(factor(p, "w1"), factor(p, "w2"))
        for key, src in (("merge_to_scale_applied", changed), ("forward_scale_applied", fwd_changed)):
            diff = src[e["weight"]].double() - base_sd[e["weight"]].double()
            e[key] = round(float((diff * k).sum() / (k * k).sum()), 6)
        assert abs(e["forward_scale_applied"] - e["scale"]) < 1e-5, e
        e["adapter_keys"] = sorted(key for key in ad if key.startswith(p))
    formula = ("Per module (LyCORIS lokr.py): w1 = lokr_w1 or lokr_w1_a @ lokr_w1_b; w2 = lokr_w2 or "
               "lokr_w2_a @ lokr_w2_b; scale = alpha/dim (the saved 'alpha' is already forced to dim when both "
               "factors are full => scale 1). merged_forward.safetensors = W + kron(w1, w2) * scale (float32), the "
               "weight LyCORIS's own forward uses (_rebuild_forward / bypass) and the ComfyUI loader rule. "
               "merged.safetensors = LyCORIS merge_to(1.0) output = W + kron(w1, w2) * scale^2, because "
               "get_diff_weight() multiplies get_weight() -- which already includes scale -- by scale again. "
               "Identical where scale == 1 (both factors full).")
    exp = {
        "name": name,
        "format": "lycoris_lokr",
        "producer": {"tool": "lycoris-lora", "calls": "LycorisNetwork.apply_preset + create_lycoris(algo='lokr') "
                     "-> apply_to -> save_weights(file, torch.float32, {}); merge: create_lycoris_from_weights(1.0, "
                     "file, fresh base) -> apply_to -> merge_to(1.0)", "versions": versions()},
        "generator": GENERATOR,
        "seed": seed,
        "base_model": model_rel("llama_f32"),
        "base_dtype": "F32",
        "adapter_files": ["adapter.safetensors"],
        "adapter_dtype": ["F32"],
        "adapter_tensors": tensor_list(adapter_file),
        "lycoris_config": {"algo": "lokr", "linear_dim": dim, "linear_alpha": alpha,
                           "decompose_both": decompose_both, "factor": -1, "preset": preset},
        "merged_file": "merged.safetensors",
        "merged_forward_file": "merged_forward.safetensors",
        "merged_dtype": "F32",
        "merged_tensors": sorted(changed.keys()),
        "merge_formula": formula,
        "in_memory_merge_equals_file_merge": same,
        "modules": modules,
        "perturbed_parameters": perturbed,
        "notes": notes + [
            "LyCORIS 4.1.3 merge_to() is inconsistent with its own forward when scale != 1: it applies "
            "scale^2 (see merge_to_scale_applied vs forward_scale_applied per module). For graft, the "
            "forward/ComfyUI semantics (merged_forward.safetensors, scale once) are the ones to match; "
            "merged.safetensors documents what baking with LyCORIS's merge_to produces.",
        ],
    }
    write_json(os.path.join(d, "expected.json"), exp)
    return exp


def gen_lycoris_lokr(out):
    return [
        gen_lycoris_variant(out, "lycoris_lokr", dim=4, alpha=2.0, decompose_both=False,
                            targets=["LlamaAttention", "LlamaMLP"],
                            exclude=[r".*\.(k_proj|o_proj|up_proj)$"], notes=[
            "LyCORIS LoKr, linear_dim=4, linear_alpha=2 on q_proj, v_proj, gate_proj, down_proj of both layers "
            "(preset target_module=['LlamaAttention','LlamaMLP'], exclude_name k/o/up to keep the fixture small; "
            "lm_head is not inside those blocks).",
            "Names: 'lycoris_' + module path with '.' -> '_' (e.g. lycoris_model_layers_0_self_attn_q_proj); "
            "tensors <name>.lokr_w1, <name>.lokr_w2 or <name>.lokr_w2_a/_b, and <name>.alpha (0-d F32).",
            "Both factors full (q_proj/v_proj: w2 is [8,8] and dim=4 is not < 8/2) => LyCORIS forces "
            "alpha := dim, scale 1.0, and SAVES alpha = 4.0 (= dim) -- the configured alpha 2 is ignored. For "
            "gate_proj/down_proj w2 is factored (dim 4 < 16/2) => alpha stays 2.0, scale = alpha/dim = 0.5.",
            "Loader rule (ComfyUI comfy/weight_adapter/lokr.py): dim = w2_b.shape[0] (or w1_b.shape[0]) when a "
            "factor is decomposed, scale = alpha/dim; with no decomposed factor scale = 1.0 regardless of alpha. "
            "LyCORIS's own loader (create_lycoris_from_weights) infers lora_dim from w1_a/w2_a.shape[1] and, with "
            "both factors full, uses lora_dim = 1 and alpha := 1 -> scale 1.",
            "LyCORIS initialises lokr_w2 / lokr_w2_b to zero; they were set to N(0, 0.05^2).",
        ]),
        gen_lycoris_variant(out, "lycoris_lokr_decompose_both", dim=2, alpha=1.0, decompose_both=True,
                            targets=["LlamaAttention"], exclude=[r".*\.(k_proj|o_proj)$"], notes=[
            "LyCORIS LoKr, linear_dim=2, linear_alpha=1, decompose_both=True on q_proj and v_proj: every module "
            "stores lokr_w1_a/_b and lokr_w2_a/_b, alpha = 1.0, scale = alpha/dim = 0.5.",
        ]),
    ]


# ----------------------------------------------------------------------------------------------
# mlx-lm


MLX_TRAIN_TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "hello world, this is a tiny training set",
    "graft merges adapters into base weights",
    "low rank adaptation adds B times A to W",
]


def gen_mlx_lora(out, keep_tmp=False):
    import torch
    from safetensors.numpy import load_file as np_load
    name = "mlx_lora"
    d = os.path.join(out, name)
    fixturelib.reset_dir(d)
    tmp = tempfile.mkdtemp(prefix="graft_mlx_")
    try:
        base_dir = os.path.join(tmp, "base")
        os.makedirs(base_dir)
        for f in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "generation_config.json"]:
            shutil.copy(os.path.join(REPO, model_rel("llama_f32"), f), base_dir)
        os.makedirs(os.path.join(tmp, "data"))
        for split in ["train", "valid"]:
            with open(os.path.join(tmp, "data", f"{split}.jsonl"), "w") as f:
                for t in MLX_TRAIN_TEXT:
                    f.write(json.dumps({"text": t}) + "\n")
        cfg = (
            "model: base\n"
            "train: true\n"
            "fine_tune_type: lora\n"
            "data: data\n"
            f"seed: {SEEDS[name]}\n"
            "num_layers: -1\n"
            "batch_size: 1\n"
            "iters: 5\n"
            "val_batches: 1\n"
            "steps_per_report: 5\n"
            "steps_per_eval: 1000\n"
            "save_every: 1000\n"
            "learning_rate: 5.0e-3\n"
            "adapter_path: adapter\n"
            "max_seq_length: 64\n"
            "lora_parameters:\n"
            "  rank: 4\n"
            "  scale: 20.0\n"
            "  dropout: 0.0\n"
        )
        with open(os.path.join(tmp, "lora_config.yaml"), "w") as f:
            f.write(cfg)
        env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
        r = subprocess.run([sys.executable, "-m", "mlx_lm", "lora", "--config", "lora_config.yaml"], cwd=tmp,
                           env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("mlx_lm lora failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
        r = subprocess.run([sys.executable, "-m", "mlx_lm", "fuse", "--model", "base", "--adapter-path", "adapter",
                            "--save-path", "fused"], cwd=tmp, env=env, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("mlx_lm fuse failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
        adir = os.path.join(tmp, "adapter")
        shutil.copy(os.path.join(adir, "adapters.safetensors"), d)
        shutil.copy(os.path.join(adir, "adapter_config.json"), d)
        fused_files = sorted(f for f in os.listdir(os.path.join(tmp, "fused")) if f.endswith(".safetensors"))
        fused = {}
        for f in fused_files:
            fused.update(load_st(os.path.join(tmp, "fused", f)))
        base_sd = base_state("llama_f32")
        missing = sorted(set(base_sd) - set(fused))
        changed = changed_tensors(base_sd, fused)
        save_merged(os.path.join(d, "merged.safetensors"), changed)
        extra_files = sorted(os.listdir(adir))
    finally:
        if keep_tmp:
            print("  mlx tmp dir kept:", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    with open(os.path.join(d, "adapter_config.json")) as f:
        acfg = json.load(f)
    scale = float(acfg["lora_parameters"]["scale"])
    ad_file = os.path.join(d, "adapters.safetensors")
    hdr, _ = st_header(ad_file)
    modules = []
    for k in sorted(hdr):
        if k.endswith(".lora_a"):
            path = k[: -len(".lora_a")]
            modules.append({"module": path, "weight": path + ".weight",
                            "weight_shape": list(base_sd[path + ".weight"].shape),
                            "rank": int(hdr[k][1][1]), "scale": scale,
                            "adapter_keys": [k, path + ".lora_b"]})
    exp = {
        "name": name,
        "format": "mlx_lora",
        "producer": {"tool": "mlx-lm", "calls": "python -m mlx_lm lora --config lora_config.yaml (train 5 iters, "
                     "batch 1, lr 5e-3, adam) ; python -m mlx_lm fuse --model base --adapter-path adapter "
                     "--save-path fused", "versions": versions()},
        "generator": GENERATOR,
        "seed": SEEDS[name],
        "base_model": model_rel("llama_f32"),
        "base_dtype": "F32",
        "adapter_files": ["adapter_config.json", "adapters.safetensors"],
        "adapter_dtype": sorted({v[0] for v in hdr.values()}),
        "adapter_tensors": tensor_list(ad_file),
        "mlx_training_config_yaml": cfg,
        "files_written_by_mlx_lm_lora": extra_files,
        "merged_file": "merged.safetensors",
        "merged_dtype": "F32",
        "merged_tensors": sorted(changed.keys()),
        "fused_model_missing_tensors": missing,
        "merge_formula": ("mlx_lm/tuner/lora.py LoRALinear.fuse: delta = ((scale * lora_b.T) @ lora_a.T)"
                          ".astype(W.dtype); merged = W + delta. scale is folded into B BEFORE the product; "
                          "float32 throughout here."),
        "modules": modules,
        "notes": [
            "mlx-lm stores the transposes of the PEFT factors: lora_a [in, r], lora_b [r, out]; normalized "
            "A = lora_a.T [r, in], B = lora_b.T [out, r].",
            f"scale = lora_parameters.scale = {scale} verbatim (absolute; no alpha, no division by rank).",
            "Keys are model.layers.<i>.<block path>.lora_a / .lora_b (no '.weight'); num_layers=-1 adapts all "
            "blocks; with no lora_parameters.keys every Linear inside each block is adapted (the 7 projections).",
            "adapter_config.json is the whole training-args namespace dumped by mlx_lm (paths relative to the tmp "
            "working dir: model 'base', data 'data', adapter_path 'adapter').",
            "Adapter values are genuinely trained (5 Adam steps at lr 5e-3 from mlx-lm's own init: lora_a ~ "
            "U(+-1/sqrt(in)), lora_b = 0), not perturbed.",
        ],
    }
    write_json(os.path.join(d, "expected.json"), exp)
    return exp


# ----------------------------------------------------------------------------------------------
# kohya / ComfyUI (built from the peft_lora adapter)


def gen_kohya_lora(out):
    import torch
    from safetensors.torch import save_file
    name = "kohya_lora"
    src = os.path.join(out, "peft_lora", "adapter_model.safetensors")
    if not os.path.exists(src):
        raise RuntimeError("kohya_lora is built from peft_lora: generate peft_lora first")
    d = os.path.join(out, name)
    fixturelib.reset_dir(d)
    ad = load_st(src)
    no_alpha = "model.layers.1.mlp.down_proj"
    tensors = {}
    modules = []
    base_sd = base_state("llama_f32")
    merged = {}
    paths = sorted({k[len("base_model.model."):-len(".lora_A.weight")] for k in ad if k.endswith(".lora_A.weight")})
    for path in paths:
        kname = "lora_unet_" + path.replace(".", "_")
        down = ad[f"base_model.model.{path}.lora_A.weight"].contiguous()
        up = ad[f"base_model.model.{path}.lora_B.weight"].contiguous()
        tensors[kname + ".lora_down.weight"] = down
        tensors[kname + ".lora_up.weight"] = up
        rank = down.shape[0]
        if path == no_alpha:
            alpha = None
            s = 1.0
        else:
            alpha = 8.0
            tensors[kname + ".alpha"] = torch.tensor(alpha, dtype=torch.float32)
            s = alpha / rank
        # ComfyUI comfy/weight_adapter/lora.py calculate_weight: lora_diff = mm(up.flatten(1), down.flatten(1));
        # weight += ((strength * alpha) * lora_diff).type(weight.dtype) ; alpha already divided by rank
        w = base_sd[path + ".weight"].float().clone()
        lora_diff = torch.mm(up.flatten(start_dim=1).float(), down.flatten(start_dim=1).float()).reshape(w.shape)
        w += ((1.0 * s) * lora_diff).type(w.dtype)
        merged[path + ".weight"] = w
        modules.append({"module": path, "weight": path + ".weight", "kohya_name": kname,
                        "weight_shape": list(w.shape), "rank": rank, "alpha": alpha, "scale": s,
                        "adapter_keys": sorted(k for k in tensors if k.startswith(kname + "."))})
    adapter_file = os.path.join(d, "adapter.safetensors")
    save_file(dict(sorted(tensors.items())), adapter_file, metadata={"format": "pt"})
    changed = changed_tensors(base_sd, merged)
    assert sorted(changed) == sorted(merged)
    save_merged(os.path.join(d, "merged.safetensors"), changed)
    exp = {
        "name": name,
        "format": "kohya_lora",
        "producer": {"tool": GENERATOR, "calls": "re-keyed copy of peft_lora/adapter_model.safetensors; merged "
                     "computed with the ComfyUI rule in float32", "versions": versions()},
        "generator": GENERATOR,
        "seed": SEEDS[name],
        "base_model": model_rel("llama_f32"),
        "base_dtype": "F32",
        "adapter_files": ["adapter.safetensors"],
        "adapter_dtype": ["F32"],
        "adapter_tensors": tensor_list(adapter_file),
        "merged_file": "merged.safetensors",
        "merged_dtype": "F32",
        "merged_tensors": sorted(changed.keys()),
        "merge_formula": ("ComfyUI (comfy/weight_adapter/lora.py + comfy/lora.py): alpha_scale = alpha / "
                          "lora_down.shape[0] if '<name>.alpha' exists else 1.0; lora_diff = mm(lora_up.flatten(1), "
                          "lora_down.flatten(1)).reshape(W.shape) in float32; W += ((strength * alpha_scale) * "
                          "lora_diff).type(W.dtype) with strength = 1.0"),
        "scale_rule": "scale = alpha / r, r = rows of lora_down; a MISSING .alpha key means scale 1.0 "
                      "(ComfyUI / A1111 loader rule; kohya training would have used alpha = r, i.e. also 1.0)",
        "modules": modules,
        "module_without_alpha": no_alpha,
        "notes": [
            "Same factors as peft_lora (lora_down = lora_A, lora_up = lora_B), keys "
            "lora_unet_<HF module path, '.'->'_'>.lora_down.weight [r, in] / .lora_up.weight [out, r] / .alpha "
            "(0-d F32 tensor, 8.0 => scale 2.0).",
            f"{no_alpha} has NO .alpha key => scale 1.0 (so its merged tensor differs from peft_lora's, which "
            "uses 2.0 for the same factors).",
            "Importers must resolve names forward from the model's tensor names (lora_unet_ + path with '.'->'_'), "
            "never by parsing underscores back into dots.",
        ],
    }
    write_json(os.path.join(d, "expected.json"), exp)
    return exp


# ----------------------------------------------------------------------------------------------
# independent numpy verification


def _np(path):
    from safetensors import safe_open
    import torch
    out = {}
    with safe_open(path, "pt") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k).to(torch.float64).numpy()
    return out


# Bit-exact recipes: the exact float32 operation order of each producing tool on this CPU, emulated in numpy.
# torch's CPU float32 GEMM here accumulates over k = 0..r-1 in order with fused multiply-add; mlx's CPU matmul
# (mlx_lm fuse) accumulates over k in order WITHOUT fma.  Recorded in expected.json as "bit_exact_recipe" and
# asserted below, so a C++ test that follows the recipe may compare with == instead of a tolerance.

RECIPES = {
    "peft_lora": "P = B @ A accumulated over k = 0..r-1 in order, each step acc = fma(B[o,k], A[k,i], acc) in "
                 "float32 (acc starts at 0); D = f32(P * scale); Embedding: D = D^T; merged = f32(W + D)",
    "peft_lora_bf16": "D as for F32 (fma k-order, then * scale, float32); merged = bf16_rne(f32(f32(W) + D)); "
                      "merged_safe_merge = bf16_rne(f32(f32(W) + f32(bf16_rne(D))))",
    "kohya_lora": "P = lora_up @ lora_down with fma k-order in float32 (torch.mm); D = f32(P * scale); "
                  "merged = f32(W + D)",
    "peft_lokr": "w1 = lokr_w1 or lokr_w1_a @ lokr_w1_b, w2 likewise, each factored product accumulated over "
                 "k = 0..r-1 in order in float32, WITH or WITHOUT fma (torch picks the kernel by shape: observed "
                 "no-fma for [16,4]@[4,8], fma for [8,4]@[4,16]); K = kron(w1, w2) (each element one f32 "
                 "product); D = f32(K * scale); merged = f32(W + D)",
    "lycoris_lokr": "w1/w2 as for peft_lokr (k-order f32 matmul when factored, fma or not by shape); K = kron(w1, w2); "
                    "K1 = K if scale == 1 else f32(K * scale); merged_forward = f32(W + K1); "
                    "merged (merge_to) = f32(W + f32(K1 * scale))",
    "mlx_lora": "S = f32(scale * lora_b^T) [out, r]; P = S @ lora_a^T accumulated over k = 0..r-1 in order "
                "WITHOUT fma (acc = f32(acc + f32(S[o,k] * lora_a[i,k])), acc starts at 0); merged = f32(W + P)",
}


def _f32(path):
    from safetensors import safe_open
    import torch
    out = {}
    with safe_open(path, "pt") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k).to(torch.float32).numpy()
    return out


def _mm_seq(b, a, fma):
    """float32 [m, r] @ [r, n], k in order; fma emulated exactly enough in float64 (product exact)."""
    acc = np.zeros((b.shape[0], a.shape[1]), np.float32)
    for k in range(b.shape[1]):
        if fma:
            acc = (np.outer(b[:, k].astype(np.float64), a[k].astype(np.float64)) + acc).astype(np.float32)
        else:
            acc = (acc + np.outer(b[:, k], a[k]).astype(np.float32)).astype(np.float32)
    return acc


def _bf16_rne(x):
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def check_recipe(d, exp):
    """Assert every merged tensor equals the bit-exact recipe; returns the number of tensors checked."""
    fmt = exp["format"]
    base = _f32(os.path.join(REPO, exp["base_model"], "model.safetensors"))
    ad_name = {"mlx_lora": "adapters.safetensors"}.get(fmt, "adapter_model.safetensors" if fmt.startswith("peft")
                                                       else "adapter.safetensors")
    ad = _f32(os.path.join(d, ad_name))
    files = {"merged": _f32(os.path.join(d, exp["merged_file"]))}
    if "merged_forward_file" in exp:
        files["merged_forward"] = _f32(os.path.join(d, exp["merged_forward_file"]))
    if "safe_merge_file" in exp:
        files["merged_safe_merge"] = _f32(os.path.join(d, exp["safe_merge_file"]))
    one = np.float32(1.0)

    def factor(p, w, fma):
        if p + f"lokr_{w}" in ad:
            return ad[p + f"lokr_{w}"]
        return _mm_seq(ad[p + f"lokr_{w}_a"], ad[p + f"lokr_{w}_b"], fma)

    def krons(p):
        # torch's CPU GEMM uses an fma kernel for some shapes and not for others: accept either per factor
        return [np.kron(factor(p, "w1", f1), factor(p, "w2", f2)).astype(np.float32)
                for f1 in (True, False) for f2 in (True, False)]

    n = 0
    for e in exp["modules"]:
        w = e["weight"]
        W = base[w]
        s = np.float32(e["scale"])
        want = {}
        if fmt in ("peft_lora", "kohya_lora"):
            if fmt == "kohya_lora":
                p = e["kohya_name"] + "."
                bb, aa, tr = ad[p + "lora_up.weight"], ad[p + "lora_down.weight"], False
            else:
                p = "base_model.model." + e["module"] + "."
                if p + "lora_A.weight" in ad:
                    bb, aa, tr = ad[p + "lora_B.weight"], ad[p + "lora_A.weight"], False
                else:
                    bb, aa, tr = ad[p + "lora_embedding_B"], ad[p + "lora_embedding_A"], True
            D = (_mm_seq(bb, aa, True) * s).astype(np.float32)
            if tr:
                D = D.T
            if exp["base_dtype"] == "BF16":
                want["merged"] = _bf16_rne((W + D).astype(np.float32))
                want["merged_safe_merge"] = _bf16_rne((W + _bf16_rne(D)).astype(np.float32))
            else:
                want["merged"] = (W + D).astype(np.float32)
        elif fmt == "peft_lokr":
            p = "base_model.model." + e["module"] + "."
            want["merged"] = [(W + (K * s).astype(np.float32)).astype(np.float32) for K in krons(p)]
        elif fmt == "lycoris_lokr":
            p = e["lycoris_name"] + "."
            K1s = [K if s == one else (K * s).astype(np.float32) for K in krons(p)]
            want["merged_forward"] = [(W + K1).astype(np.float32) for K1 in K1s]
            want["merged"] = [(W + (K1 * s).astype(np.float32)).astype(np.float32) for K1 in K1s]
        elif fmt == "mlx_lora":
            S = (s * ad[e["module"] + ".lora_b"].T).astype(np.float32)
            want["merged"] = (W + _mm_seq(S, np.ascontiguousarray(ad[e["module"] + ".lora_a"].T), False)
                              ).astype(np.float32)
        for key, arrs in want.items():
            got = files[key][w]
            arrs = arrs if isinstance(arrs, list) else [arrs]
            if not any(np.array_equal(got, arr) for arr in arrs):
                bad = min(int((got != arr).sum()) for arr in arrs)
                raise AssertionError(f"{d}: {key} {w}: recipe not bit-exact ({bad} of {got.size} differ)")
            n += 1
    return n


def verify_fixture(d):
    with open(os.path.join(d, "expected.json")) as f:
        exp = json.load(f)
    res = [verify_merged(d, exp, exp["merged_file"], "merge_to_scale_applied" if exp["format"] == "lycoris_lokr"
                         else "scale")]
    if "merged_forward_file" in exp:
        res.append(verify_merged(d, exp, exp["merged_forward_file"], "scale"))
    if "safe_merge_file" in exp:
        res.append(verify_merged(d, exp, exp["safe_merge_file"], "scale", bf16_double_rounding=True))
    check_recipe(d, exp)
    return res[0][0], max(r[1] for r in res)


def bf16_ulp(x):
    return 2.0 ** (np.floor(np.log2(np.maximum(np.abs(x), 2.0 ** -126))) - 7)


def verify_merged(d, exp, merged_file, scale_key, bf16_double_rounding=False):
    """Recompute merged - base from the adapter files + expected.json scales in float64 (numpy)."""
    base = _np(os.path.join(REPO, exp["base_model"], "model.safetensors"))
    merged = _np(os.path.join(d, merged_file))
    fmt = exp["format"]
    bf16 = exp["base_dtype"] == "BF16"
    worst = 0.0
    checked = []
    ad_path = os.path.join(d, exp["adapter_files"][-1] if fmt != "mlx_lora" else "adapters.safetensors")
    if fmt.startswith("peft"):
        ad_path = os.path.join(d, "adapter_model.safetensors")
    ad = _np(ad_path)

    def kron_factor(p, which, absval=False):
        f = np.abs if absval else (lambda x: x)
        if p + f"lokr_{which}" in ad:
            return f(ad[p + f"lokr_{which}"])
        return f(ad[p + f"lokr_{which}_a"]) @ f(ad[p + f"lokr_{which}_b"])

    expect_changed = set()
    for e in exp["modules"]:
        w = e["weight"]
        s = e[scale_key]
        if fmt == "peft_lora":
            p = "base_model.model." + e["module"] + "."
            if p + "lora_A.weight" in ad:
                bb, aa, tr = ad[p + "lora_B.weight"], ad[p + "lora_A.weight"], False
            else:
                bb, aa, tr = ad[p + "lora_embedding_B"], ad[p + "lora_embedding_A"], True
            delta, dmag = s * (bb @ aa), abs(s) * (np.abs(bb) @ np.abs(aa))
            if tr:
                delta, dmag = delta.T, dmag.T
        elif fmt == "peft_lokr":
            p = "base_model.model." + e["module"] + "."
            delta = s * np.kron(kron_factor(p, "w1"), kron_factor(p, "w2"))
            dmag = abs(s) * np.kron(kron_factor(p, "w1", True), kron_factor(p, "w2", True))
        elif fmt == "lycoris_lokr":
            p = e["lycoris_name"] + "."
            alpha = float(ad[p + "alpha"])
            assert abs(alpha / e["dim"] - e["scale"]) < 1e-12, (alpha, e)
            # (LyCORIS merge_to applies the scale twice: scale_key picks merge_to's or the forward's scale)
            delta = s * np.kron(kron_factor(p, "w1"), kron_factor(p, "w2"))
            dmag = abs(s) * np.kron(kron_factor(p, "w1", True), kron_factor(p, "w2", True))
        elif fmt == "mlx_lora":
            aa, bb = ad[e["module"] + ".lora_a"], ad[e["module"] + ".lora_b"]
            delta, dmag = s * (aa @ bb).T, abs(s) * (np.abs(aa) @ np.abs(bb)).T
        elif fmt == "kohya_lora":
            p = e["kohya_name"] + "."
            r = ad[p + "lora_down.weight"].shape[0]
            s2 = float(ad[p + "alpha"]) / r if p + "alpha" in ad else 1.0
            assert s2 == s
            uu, dd = ad[p + "lora_up.weight"], ad[p + "lora_down.weight"]
            delta, dmag = s * (uu @ dd), abs(s) * (np.abs(uu) @ np.abs(dd))
        else:
            raise RuntimeError(fmt)
        got = merged[w] - base[w]
        assert got.shape == delta.shape, (w, got.shape, delta.shape)
        if bf16:
            # single RNE rounding: |err| <= 0.5 ulp(exact); double (safe_merge: delta rounded to bf16 first):
            # |err| <= 0.5 ulp(delta) + 0.5 ulp(result). Reported as a fraction of that bound.
            bound = 0.5 * bf16_ulp(base[w] + delta)
            if bf16_double_rounding:
                bound = bound + 0.5 * bf16_ulp(delta) + 0.5 * bf16_ulp(got + base[w])
            err = np.max(np.abs(got - delta) / bound)
            assert err <= 1.0 + 1e-6, (d, merged_file, w, err)
        else:
            # |err| <= (r + 2) * 2^-24 * (|W| + |s| * sum_k |B[o,k] A[k,i]|) for any summation order
            mag = np.abs(base[w]) + dmag + 1e-30
            err = np.max(np.abs(got - delta) / mag) / 2.0 ** -24
            assert err < 24, (d, w, err)
        worst = max(worst, float(err))
        expect_changed.add(w)
        checked.append(w)
    for rep in exp.get("replacements", []):
        assert np.array_equal(merged[rep["weight"]], ad[rep["adapter_key"]]), rep
        expect_changed.add(rep["weight"])
    assert expect_changed == set(merged), (d, sorted(set(merged) ^ expect_changed))
    return len(checked), worst


# ----------------------------------------------------------------------------------------------


GENERATORS = [
    ("peft_lora", gen_peft_lora),
    ("peft_rslora", gen_peft_rslora),
    ("peft_patterns", gen_peft_patterns),
    ("peft_modules_to_save", gen_peft_modules_to_save),
    ("peft_embed", gen_peft_embed),
    ("peft_bf16", gen_peft_bf16),
    ("peft_lokr", gen_peft_lokr),          # also peft_lokr_decompose_both
    ("lycoris_lokr", gen_lycoris_lokr),    # also lycoris_lokr_decompose_both
    ("mlx_lora", gen_mlx_lora),
    ("kohya_lora", gen_kohya_lora),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", help="generator names (see GENERATORS)")
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--keep-tmp", action="store_true")
    ap.add_argument("--verify-only", action="store_true")
    args = ap.parse_args()
    # target_modules is a set inside PEFT (written to adapter_config.json in set order) and LyCORIS/PEFT walk
    # dicts/sets too: pin the string hash seed so reruns write byte-identical files; never touch the network.
    want = {"PYTHONHASHSEED": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false"}
    if any(os.environ.get(k) != v for k, v in want.items()):
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                  dict(os.environ, **want))
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    os.chdir(REPO)
    warnings.filterwarnings("ignore")
    import torch
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    if not args.verify_only:
        for gname, fn in GENERATORS:
            if args.only and gname not in args.only:
                continue
            print(f"[gen] {gname}", flush=True)
            if gname == "mlx_lora":
                fn(out, keep_tmp=args.keep_tmp)
            else:
                fn(out)
    for root, _, files in os.walk(out):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)   # safetensors / PEFT write 0600
    total = 0
    print(f"\n{'fixture':32s} {'modules':>7s} {'worst err':>10s} {'bytes':>9s}")
    for name in sorted(os.listdir(out)):
        d = os.path.join(out, name)
        if not os.path.isfile(os.path.join(d, "expected.json")):
            continue
        n, worst = verify_fixture(d)
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        total += size
        print(f"{name:32s} {n:7d} {worst:10.3g} {size:9d}")
    print(f"{'total':32s} {'':7s} {'':10s} {total:9d}")
    print("worst err: F32 = max |got-exp| / ((|W| + |s|*|B||A|) * 2^-24) (ulps of operand magnitude); "
          "BF16 = fraction of the rounding bound (0.5 ulp for one rounding)")


if __name__ == "__main__":
    main()
