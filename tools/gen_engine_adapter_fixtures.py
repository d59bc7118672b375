#!/usr/bin/env python3
"""Generate LoRA-adapter + reference-logits fixtures for graft's engine (runtime adapter) tests.

Developer tool (not run by CI); the outputs are committed under tests/fixtures/engine_adapters/.
Needs: torch, transformers, peft, mlx + mlx-lm (CPU is fine), safetensors, numpy.

Every fixture is built against one of the tiny checkpoints in tests/fixtures/models/<model>/ (hidden 64,
intermediate 128, vocab 384, 2 layers) and uses the prompts (ids) of that model's reference.json.
All logits are F32 [T, vocab] = a full forward over prompt i's ids (no KV cache), eager attention.
"greedy" = NEW_TOKENS pure-argmax steps (full recompute each step, EOS ignored), top2_gap[k] = top1 - top2
logit at step k.  Every adapter's random seed is the first of SEED_BASE(fixture) + k whose greedy decode keeps
min top2 gap >= MIN_GAP on every prompt (so greedy references are not near-ties).

bf16 checkpoints (llama_bf16, mistral_bf16, qwen2_bf16, qwen3_bf16): the adapter is created on the model as
stored (bf16; PEFT's autocast_adapter_dtype upcasts adapter weights, so the files are F32) and every reference
is computed as tests/fixtures/models does: the bf16 checkpoint upcast with model.float() (BF16 weights, F32
activations) plus the F32 adapter branch -- graft's arithmetic.  reference.json also records
max_abs_diff_if_merged_into_bf16: how far the logits move if an engine instead rounds W + delta to bf16.

Layout (tests/fixtures/engine_adapters/):

  <model>/peft_lora/                for all 9 models
      adapter_config.json, adapter_model.safetensors   PEFT save_pretrained; r=4, lora_alpha=8 (scale 2.0),
                                                       q,k,v,o,gate,up,down_proj of both layers, F32
      reference.safetensors   logits_<i>: PEFT forward, adapter active and UNMERGED (base + scale*B(A x))
      reference.json          prompts (text, ids, greedy with adapter, top2 gaps), seed, versions, notes
  <model>/peft_lora_b/              llama_f32 and qwen2_bf16 only: second PEFT adapter, r=2, lora_alpha=2
                                    (scale 1.0) on q_proj, v_proj, down_proj, F32
  <model>/two_adapters.safetensors  logits_<i>: base + 0.7 * (peft_lora branch) + (-1.3) * (peft_lora_b branch),
                                    i.e. W_eff = W + 0.7*2.0*B1@A1 - 1.3*1.0*B2@A2 (weights multiply each
                                    adapter's own alpha/r scale).  PEFT: both adapters loaded, set_adapter([a, b])
                                    on the LoraModel, per-layer scaling[name] *= weight, unmerged forward.
  <model>/two_adapters.json         weights, effective scales, greedy, notes

  embed/peft_embed_<m>/   m = llama_f32 (untied), qwen2_f32 (tied), qwen3_bf16 (tied): PEFT LoRA on embed_tokens
                          + q_proj, r=4 alpha=8.  Files as PEFT writes them, INCLUDING the full unmodified base
                          embedding copy (...embed_tokens.base_layer.weight, save_embedding_layers='auto').
      reference.safetensors  logits_<i>: graft's semantics = the embedding delta applies to the input lookup AND,
                             when the head is tied, to the output head (E' = E + s*(B@A)^T is the shared weight).
                             Computed as PeftModel(...).merge_and_unload() of the F32 model (the tied Parameter
                             is shared, so the merge changes lm_head too -- checked and recorded).
                             logits_peft_unmerged_<i>: PEFT's UNMERGED forward, informational.  On a tied model
                             it adapts only the lookup (the head keeps E) -- NOT graft's semantics.  On the
                             untied llama_f32 both keys agree to float rounding.
  embed/mlx_embed_<m>/    m = llama_f32, qwen2_f32: mlx-lm native adapter built with mlx-lm's own
                          linear_to_lora_layers (keys model.embed_tokens, self_attn.q_proj; num_layers=1 so only
                          model.layers.1.self_attn.q_proj), rank 4, scale 2.0; adapters.safetensors written with
                          mx.save_safetensors(tree_flatten(model.trainable_parameters())) and adapter_config.json
                          with mlx_lm.utils.save_config, exactly as `mlx_lm lora` does.
      reference.safetensors  logits_<i>: mlx_lm.load(base, adapter_path=dir) forward in F32 (mlx CPU).  Tied
                             qwen2: LoRAEmbedding.as_linear applies the delta to the head too, i.e.
                             E' = E + 2.0 * lora_a @ lora_b on lookup and head (verified numerically).
  embed/peft_lm_head_llama_f32/  PEFT LoRA on lm_head + q_proj of the untied llama_f32 (r=4, alpha=8);
                          reference.safetensors logits_<i> = unmerged PEFT forward.  Files include PEFT's full
                          lm_head copy (...lm_head.base_layer.weight, save_embedding_layers='auto').
  embed/peft_lm_head_qwen2_f32/  PEFT LoRA on lm_head + q_proj of the TIED qwen2_f32.  graft must REFUSE it.
                          Adapter files + expected.json only (no reference).  PEFT itself does not refuse.

Checks (all re-run by --verify-only, from the files on disk only, without PEFT / mlx code): every reference is
recomputed by merging the adapter factors read with safetensors.numpy in float64 (W + s*B@A, embedding
E + s*(B@A)^T, mlx W + s*(a@b)^T / E + s*a@b), casting to F32, loading into a transformers model of the base
checkpoint (F32, or bf16 upcast) and running its forward.  Asserted: |stored - recomputed| <= VERIFY_TOL (1e-4;
observed 5e-6..2e-5) for torch references, <= VERIFY_TOL_MLX (5e-4) for mlx references (different kernels).
For tied models the alternative "lookup only" semantics are recomputed too and must differ by >> tolerance
(and must match logits_peft_unmerged_<i>).

Tolerance hint for graft's tests: graft (F32 activations) vs these references ~1e-5..1e-4 absolute on logits
of magnitude ~1-10 (summation order, different rsqrt/exp/softmax kernels); 1e-3 absolute is a safe test
bound; greedy ids must match exactly (min top2 gap >= MIN_GAP = 0.02 everywhere).

Usage: OMP_NUM_THREADS=1 python3 tools/gen_engine_adapter_fixtures.py [--only GROUP ...] [--out DIR] [--verify-only]
GROUPS: peft_lora, two_adapters (needs peft_lora), peft_embed, mlx_embed, peft_lm_head.
The script re-executes itself with PYTHONHASHSEED=0 (PEFT writes target_modules in set order), HF offline and
OMP_NUM_THREADS=1, and uses one torch thread, so reruns write byte-identical files (CPU, same versions).
Takes ~2-2.5 minutes on one (shared) CPU core; --verify-only ~15 s.
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
import zlib

import numpy as np
import fixturelib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_REL = os.path.join("tests", "fixtures", "models")
OUT_DIR = os.path.join(REPO, "tests", "fixtures", "engine_adapters")
GENERATOR = "tools/gen_engine_adapter_fixtures.py"

ALL_MODELS = ["llama_f32", "llama_bf16", "llama3rope_f32", "mistral_f32", "mistral_bf16",
              "qwen2_f32", "qwen2_bf16", "qwen3_f32", "qwen3_bf16", "gemma2_f32", "gemma3_f32", "phi3_f32"]
TWO_ADAPTER_MODELS = ["llama_f32", "qwen2_bf16"]
PEFT_EMBED_MODELS = ["llama_f32", "qwen2_f32", "qwen3_bf16"]
MLX_EMBED_MODELS = ["llama_f32", "qwen2_f32"]

ALL_PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_A = dict(r=4, lora_alpha=8, target_modules=ALL_PROJ)                       # scale 2.0
# Phi-3 stores q/k/v and gate/up fused: the same adapter on every linear of its layout.
PHI3_PROJ = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]


def lora_a_for(name):
    return dict(LORA_A, target_modules=PHI3_PROJ) if model_info(name)["arch"] == "phi3" else LORA_A
LORA_B = dict(r=2, lora_alpha=2, target_modules=["q_proj", "v_proj", "down_proj"])  # scale 1.0
TWO_WEIGHTS = {"a": 0.7, "b": -1.3}     # a = peft_lora, b = peft_lora_b
EMBED_LORA = dict(r=4, lora_alpha=8, target_modules=["embed_tokens", "q_proj"])
LM_HEAD_LORA = dict(r=4, lora_alpha=8, target_modules=["lm_head", "q_proj"])
MLX_LORA_PARAMS = {"rank": 4, "scale": 2.0, "dropout": 0.0, "keys": ["model.embed_tokens", "self_attn.q_proj"]}
MLX_NUM_LAYERS = 1

PERTURB_STD = 0.05
NEW_TOKENS = 16
MIN_GAP = 0.02
GREEDY_RULE = ("pure argmax over the full logits row, full recompute each step (no KV cache), no sampling / "
               "processors, EOS (id 2) NOT treated specially (a continuation may contain it)")
SEED_BASE = 3000
SEED_TRIES = 100
MAX_PROMPTS = 3
VERIFY_TOL = 1e-4
VERIFY_TOL_MLX = 5e-4
MIN_SEMANTIC_GAP = 1e-2   # tied: "lookup only" must differ from the reference by at least this much

# ----------------------------------------------------------------------------------------------
# small helpers


def versions():
    return fixturelib.versions(["torch", "transformers", "peft", "mlx", "mlx-lm", "safetensors", "numpy"])


def seed_base(fixture):
    return SEED_BASE + zlib.crc32(fixture.encode()) % 100000


def model_rel(name):
    return os.path.join(MODELS_REL, name)


def model_info(name):
    with open(os.path.join(REPO, model_rel(name), "reference.json")) as f:
        ref = json.load(f)
    return {"name": name, "arch": ref["arch"], "dtype": ref["dtype"], "tied": bool(ref["tied_lm_head"]),
            "prompts": [{"text": p["text"], "ids": p["ids"], "greedy": p["greedy"]}
                        for p in ref["prompts"][:MAX_PROMPTS]]}


def rnd(x, n=6):
    return float(f"{x:.{n}g}")


def load_native(name):
    """The checkpoint as stored (bf16 stays bf16): what a user trains the adapter on."""
    import torch
    from transformers import AutoModelForCausalLM
    dtype = torch.bfloat16 if model_info(name)["dtype"] == "bf16" else torch.float32
    m = AutoModelForCausalLM.from_pretrained(model_rel(name), dtype=dtype,
                                             attn_implementation="eager")
    return m.eval()


def load_ref(name):
    """graft's arithmetic: F32 weights, or the bf16 checkpoint upcast with model.float() (tie preserved)."""
    m = load_native(name)
    if model_info(name)["dtype"] == "bf16":
        m = m.float()
    return m


def peft_save(pm, d, **kw):
    pm.save_pretrained(d, **kw)
    readme = os.path.join(d, "README.md")   # model card boilerplate
    if os.path.exists(readme):
        os.remove(readme)


def perturb(model, patterns, seed, std=PERTURB_STD):
    """Parameters whose name contains one of `patterns` get N(0, std^2) (sorted name order, own RNG)."""
    import torch
    g = torch.Generator().manual_seed(seed)
    done = []
    with torch.no_grad():
        for n, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            if any(s in n for s in patterns):
                p.copy_((torch.randn(p.shape, generator=g, dtype=torch.float32) * std).to(p.dtype))
                done.append(n)
    return done


def torch_logits_fn(model):
    import torch

    @torch.no_grad()
    def fn(ids):
        return model(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    return fn


def mlx_logits_fn(model):
    import mlx.core as mx

    def fn(ids):
        out = model(mx.array([ids]))[0].astype(mx.float32)
        mx.eval(out)
        return np.array(out)
    return fn


def run_prompts(logits_fn, prompts):
    """Full logits per prompt + greedy continuation (pure argmax, full recompute) with top-1/top-2 gaps."""
    res = []
    for p in prompts:
        full = logits_fn(p["ids"])
        seq, gaps = list(p["ids"]), []
        for _ in range(NEW_TOKENS):
            last = logits_fn(seq)[-1].astype(np.float64)
            order = np.argsort(-last, kind="stable")
            gaps.append(float(last[order[0]] - last[order[1]]))
            seq.append(int(order[0]))
        res.append({"logits": full.astype(np.float32), "greedy": seq[len(p["ids"]):], "gaps": gaps})
    return res


def min_gap(res):
    return min(min(r["gaps"]) for r in res)


def save_logits(path, arrays, meta_note):
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v, np.float32) for k, v in sorted(arrays.items())}, path,
              metadata={"note": f"{GENERATOR}: {meta_note}"})   # ONE key: safetensors writes a map in hash order


def load_logits(path):
    from safetensors.numpy import load_file
    return load_file(path)


def prompt_entries(prompts, res, base_res=None):
    out = []
    for i, (p, r) in enumerate(zip(prompts, res)):
        e = {"text": p["text"], "ids": p["ids"], "greedy": r["greedy"],
             "top2_gap": [round(x, 6) for x in r["gaps"]], "min_top2_gap": round(min(r["gaps"]), 6),
             "base_greedy": p["greedy"], "greedy_differs_from_base": r["greedy"] != p["greedy"]}
        if base_res is not None:
            dl = r["logits"].astype(np.float64) - base_res[i]["logits"]
            e["max_abs_logit_change_vs_base"] = rnd(float(np.abs(dl).max()), 4)
            e["rms_logit_change_vs_base"] = rnd(float(np.sqrt((dl ** 2).mean())), 4)
        out.append(e)
    return out


def base_logits(name, prompts):
    fn = torch_logits_fn(load_ref(name))
    return [{"logits": fn(p["ids"])} for p in prompts]


def search_seed(fixture, build_and_eval, what):
    """First seed (SEED_BASE(fixture) + k) whose greedy min top2 gap >= MIN_GAP.  build_and_eval(seed) -> res."""
    base = seed_base(fixture)
    for k in range(SEED_TRIES):
        res = build_and_eval(base + k)
        g = min_gap(res)
        if g >= MIN_GAP:
            return base + k, k, res
        print(f"  {fixture}: seed {base + k} min gap {g:.4f} < {MIN_GAP} ({what}), next seed", flush=True)
    raise SystemExit(f"{fixture}: no seed in {SEED_TRIES} tries gives min gap >= {MIN_GAP}")


def quiet():
    warnings.filterwarnings("ignore")
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


# ----------------------------------------------------------------------------------------------
# independent reconstruction (numpy merge + plain transformers forward), used by every check


def st_np64(path):
    """safetensors -> float64 numpy (bf16 via torch, since numpy has no bfloat16)."""
    from safetensors import safe_open
    import torch
    out = {}
    with safe_open(path, "pt") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k).to(torch.float64).numpy()
    return out


def st_dtypes(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = json.loads(f.read(n))
    hdr.pop("__metadata__", None)
    return {k: v["dtype"] for k, v in hdr.items()}, {k: v["shape"] for k, v in hdr.items()}


def base_params64(name):
    """Base parameters as float64 (bf16 values exactly)."""
    m = load_ref(name)
    return {k: v.detach().double().numpy() for k, v in m.state_dict().items()}


def peft_deltas(adapter_dir, base64):
    """{param name: float64 delta} from a PEFT LoRA dir, computed without PEFT (scale = lora_alpha / r)."""
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["peft_type"] == "LORA" and not cfg.get("use_rslora") and not cfg.get("use_dora"), cfg
    assert not cfg.get("rank_pattern") and not cfg.get("alpha_pattern"), cfg
    scale = cfg["lora_alpha"] / cfg["r"]
    path = os.path.join(adapter_dir, "adapter_model.safetensors")
    ad = st_np64(path)
    dtypes, _ = st_dtypes(path)
    pre = "base_model.model."
    deltas, copies = {}, []
    for k in sorted(ad):
        assert k.startswith(pre), k
        mod = k[len(pre):]
        if mod.endswith(".lora_A.weight"):
            m = mod[: -len(".lora_A.weight")]
            a, b = ad[k], ad[pre + m + ".lora_B.weight"]
            assert dtypes[k] == "F32" and a.shape[0] == cfg["r"] == b.shape[1]
            deltas[m + ".weight"] = scale * (b @ a)
        elif mod.endswith(".lora_embedding_A"):
            m = mod[: -len(".lora_embedding_A")]
            a, b = ad[k], ad[pre + m + ".lora_embedding_B"]       # A [r, vocab], B [hidden, r]
            assert dtypes[k] == "F32" and a.shape[0] == cfg["r"] == b.shape[1]
            deltas[m + ".weight"] = scale * (b @ a).T
        elif mod.endswith(".base_layer.weight"):
            # save_embedding_layers='auto': an unmodified copy of the base weight -> must equal it bit-for-bit
            w = mod[: -len(".base_layer.weight")] + ".weight"
            assert np.array_equal(ad[k], base64[w]), f"{adapter_dir}: {k} is not the base weight"
            copies.append(k)
        else:
            assert mod.endswith(".lora_B.weight") or mod.endswith(".lora_embedding_B"), k
    return deltas, copies, scale, cfg


def mlx_deltas(adapter_dir):
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["fine_tune_type"] == "lora"
    s = float(cfg["lora_parameters"]["scale"])
    ad = st_np64(os.path.join(adapter_dir, "adapters.safetensors"))
    deltas = {}
    for k in sorted(ad):
        if k.endswith(".lora_a"):
            m = k[: -len(".lora_a")]
            a, b = ad[k], ad[m + ".lora_b"]
            # Embedding: lora_a [vocab, r], lora_b [r, hidden] -> E delta = s * a @ b  [vocab, hidden]
            # Linear:    lora_a [in, r],    lora_b [r, out]    -> W delta = s * (a @ b)^T [out, in]
            deltas[m + ".weight"] = s * (a @ b) if m.endswith("embed_tokens") else s * (a @ b).T
    return deltas, s, cfg


def forward_with(name, prompts, base64, deltas, tie_head=True):
    """Logits of the base checkpoint with W := f32(W + delta) for every delta, via a plain transformers model.
    tie_head=False unties a tied head first (head keeps the base E): the "lookup only" semantics."""
    import torch
    m = load_ref(name)
    info = model_info(name)
    if info["tied"] and not tie_head:
        m.lm_head.weight = torch.nn.Parameter(m.lm_head.weight.detach().clone())
    params = dict(m.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for k, d in deltas.items():
            p = params[k]
            assert tuple(p.shape) == d.shape, (k, p.shape, d.shape)
            p.copy_(torch.from_numpy((base64[k] + d).astype(np.float32)))
    if info["tied"] and tie_head:
        assert m.lm_head.weight is m.model.embed_tokens.weight
    fn = torch_logits_fn(m)
    return [fn(p["ids"]) for p in prompts]


def bf16_merged_forward(name, prompts, base64, deltas):
    """As forward_with, but merged weights rounded to bf16 (an engine that merges into bf16 storage)."""
    import torch
    m = load_ref(name)
    params = dict(m.named_parameters(remove_duplicate=False))
    with torch.no_grad():
        for k, d in deltas.items():
            params[k].copy_(torch.from_numpy((base64[k] + d).astype(np.float32)).bfloat16().float())
    fn = torch_logits_fn(m)
    return [fn(p["ids"]) for p in prompts]


def max_diff(stored, key_fmt, computed):
    return max(float(np.abs(stored[key_fmt.format(i)] - c).max()) for i, c in enumerate(computed))


# ----------------------------------------------------------------------------------------------
# <model>/peft_lora


def peft_reference_model(name, adapter_dir, adapter_name="default"):
    from peft import PeftModel
    return PeftModel.from_pretrained(load_ref(name), adapter_dir, adapter_name=adapter_name).eval()


def build_peft(name, d, cfg_kwargs, seed, patterns, save_kw=None):
    """get_peft_model on the checkpoint as stored, perturb the named factors, save_pretrained to d."""
    import torch
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(seed)
    pm = get_peft_model(load_native(name), LoraConfig(lora_dropout=0.0, bias="none", **cfg_kwargs))
    perturbed = perturb(pm, patterns, seed + 500000)
    fixturelib.reset_dir(d)
    peft_save(pm, d, **(save_kw or {}))
    return perturbed


def gen_peft_lora(out, name):
    info = model_info(name)
    fixture = f"{name}/peft_lora"
    d = os.path.join(out, name, "peft_lora")

    def attempt(seed):
        build_peft(name, d, lora_a_for(name), seed, ["lora_B"])
        return run_prompts(torch_logits_fn(peft_reference_model(name, d)), info["prompts"])

    seed, tries, res = search_seed(fixture, attempt, "adapter active")
    base = base_logits(name, info["prompts"])
    save_logits(os.path.join(d, "reference.safetensors"), {f"logits_{i}": r["logits"] for i, r in enumerate(res)},
                "logits_<i>: PEFT forward, adapter unmerged (base + scale * B(A x)), F32 [T, vocab]")
    dtypes, shapes = st_dtypes(os.path.join(d, "adapter_model.safetensors"))
    with open(os.path.join(d, "adapter_config.json")) as f:
        acfg = json.load(f)
    ref = {
        "fixture": fixture, "generator": GENERATOR, "model": name, "base_model": model_rel(name),
        "arch": info["arch"], "dtype": info["dtype"], "tied_lm_head": info["tied"],
        "seed": seed, "seed_attempts": tries + 1,
        "adapter": {"format": "peft_lora", "files": ["adapter_config.json", "adapter_model.safetensors"],
                    "r": acfg["r"], "lora_alpha": acfg["lora_alpha"], "scale": acfg["lora_alpha"] / acfg["r"],
                    "target_modules": sorted(acfg["target_modules"]), "tensor_dtypes": sorted(set(dtypes.values())),
                    "num_tensors": len(shapes),
                    "init": f"lora_A: PEFT default (kaiming-uniform, torch seed {seed}); lora_B (PEFT zero init) "
                            f"replaced by N(0, {PERTURB_STD}^2) from torch.Generator seed {seed + 500000}"},
        "reference_file": "reference.safetensors",
        "reference_keys": {"logits_<i>": "F32 [T, vocab]: PeftModel.from_pretrained(base, this dir) forward over "
                                         "prompts[i].ids, adapter active and UNMERGED: y = W x + scale * B (A x)"},
        "new_tokens": NEW_TOKENS, "greedy_rule": GREEDY_RULE,
        "min_top2_gap": round(min_gap(res), 6),
        "prompts": prompt_entries(info["prompts"], res, base),
        "versions": versions(),
        "notes": [
            "Reference = base + LoRA branch, unmerged, eager attention, full forward (no KV cache); greedy = "
            f"{NEW_TOKENS} pure-argmax steps with full recompute, EOS ignored.",
            "Merging W' = W + scale * B @ A in F32 gives the same logits to ~1e-5 (verification below).",
        ],
    }
    if info["dtype"] == "bf16":
        ref["notes"].append(
            "bf16 checkpoint: the adapter was created on the bf16 model (PEFT autocast_adapter_dtype upcasts the "
            "adapter to F32, so lora_A values are bf16-representable; lora_B is not); the reference is the bf16 "
            "checkpoint upcast with model.float() + the F32 adapter branch (BF16 weights, F32 activations).")
    ref["verification"] = verify_peft_lora(out, name, ref)
    fixturelib.dump_json(ref, os.path.join(d, "reference.json"))
    print(f"{fixture}: seed {seed}, min gap {ref['min_top2_gap']}, greedy differs from base "
          f"{[p['greedy_differs_from_base'] for p in ref['prompts']]}, max|dlogit| vs base "
          f"{[p['max_abs_logit_change_vs_base'] for p in ref['prompts']]}", flush=True)


def verify_peft_lora(out, name, ref=None):
    d = os.path.join(out, name, "peft_lora")
    info = model_info(name)
    base64 = base_params64(name)
    deltas, copies, _, _ = peft_deltas(d, base64)
    assert not copies
    assert len(deltas) == len(lora_a_for(name)["target_modules"]) * load_native(name).config.num_hidden_layers, \
        sorted(deltas)
    stored = load_logits(os.path.join(d, "reference.safetensors"))
    err = max_diff(stored, "logits_{}", forward_with(name, info["prompts"], base64, deltas))
    assert err <= VERIFY_TOL, (d, err)
    v = {"numpy_merged_vs_reference_max_abs": rnd(err, 3), "tolerance_asserted": VERIFY_TOL,
         "method": "W' = f32(W + scale * B @ A) from the adapter file in float64 (numpy), loaded into a plain "
                   "transformers model of the base checkpoint, forward compared with logits_<i>"}
    if info["dtype"] == "bf16":
        v["max_abs_diff_if_merged_into_bf16"] = rnd(max_diff(stored, "logits_{}", bf16_merged_forward(
            name, info["prompts"], base64, deltas)), 3)
    return v


# ----------------------------------------------------------------------------------------------
# <model>/peft_lora_b + two_adapters


def two_adapter_model(name, out):
    from peft.tuners.lora import LoraLayer
    pm = peft_reference_model(name, os.path.join(out, name, "peft_lora"), adapter_name="a")
    pm.load_adapter(os.path.join(out, name, "peft_lora_b"), adapter_name="b")
    pm.base_model.set_adapter(["a", "b"])        # LoraModel.set_adapter accepts a list: both branches summed
    scales = {}
    for mname, mod in pm.named_modules():
        if isinstance(mod, LoraLayer):
            assert list(mod.active_adapters) == ["a", "b"], mod.active_adapters
            for an, w in TWO_WEIGHTS.items():
                if an in mod.scaling:
                    mod.scaling[an] = mod.scaling[an] * w
                    scales.setdefault(an, set()).add(mod.scaling[an])
    pm.eval()
    return pm, {k: sorted(v) for k, v in scales.items()}


def gen_two_adapters(out, name):
    info = model_info(name)
    fixture = f"{name}/peft_lora_b"
    if not os.path.isfile(os.path.join(out, name, "peft_lora", "adapter_model.safetensors")):
        raise SystemExit(f"{fixture}: generate {name}/peft_lora first (--only peft_lora)")
    d = os.path.join(out, name, "peft_lora_b")
    eff = {}

    def attempt(seed):
        build_peft(name, d, LORA_B, seed, ["lora_B"])
        pm, scales = two_adapter_model(name, out)
        eff.update(scales)
        return run_prompts(torch_logits_fn(pm), info["prompts"])

    seed, tries, res = search_seed(fixture, attempt, "both adapters active")
    base = base_logits(name, info["prompts"])
    save_logits(os.path.join(out, name, "two_adapters.safetensors"),
                {f"logits_{i}": r["logits"] for i, r in enumerate(res)},
                "logits_<i>: base + 0.7 * peft_lora branch + (-1.3) * peft_lora_b branch, unmerged, F32 [T, vocab]")
    with open(os.path.join(d, "adapter_config.json")) as f:
        bcfg = json.load(f)
    ref = {
        "fixture": f"{name}/two_adapters", "generator": GENERATOR, "model": name, "base_model": model_rel(name),
        "dtype": info["dtype"], "tied_lm_head": info["tied"],
        "adapters": [
            {"dir": "peft_lora", "weight": TWO_WEIGHTS["a"], "r": LORA_A["r"], "lora_alpha": LORA_A["lora_alpha"],
             "scale": LORA_A["lora_alpha"] / LORA_A["r"], "effective_scale": eff["a"][0],
             "target_modules": sorted(LORA_A["target_modules"])},
            {"dir": "peft_lora_b", "weight": TWO_WEIGHTS["b"], "r": bcfg["r"], "lora_alpha": bcfg["lora_alpha"],
             "scale": bcfg["lora_alpha"] / bcfg["r"], "effective_scale": eff["b"][0],
             "target_modules": sorted(bcfg["target_modules"]), "seed": seed, "seed_attempts": tries + 1,
             "init": f"lora_A: PEFT default (torch seed {seed}); lora_B: N(0, {PERTURB_STD}^2) from "
                     f"torch.Generator seed {seed + 500000}"},
        ],
        "formula": "W_eff = W + 0.7 * (2.0 * B_a @ A_a) + (-1.3) * (1.0 * B_b @ A_b) for every module either adapter "
                   "targets (a: all 7 projections; b: q_proj, v_proj, down_proj); the user weight multiplies each "
                   "adapter's own alpha/r scale; effective scales a: 1.4, b: -1.3",
        "reference_file": "two_adapters.safetensors",
        "reference_keys": {"logits_<i>": "F32 [T, vocab]: both adapters active and unmerged: y = W x + 1.4 B_a(A_a x) "
                                         "- 1.3 B_b(A_b x)"},
        "how_computed": "PeftModel.from_pretrained(base, peft_lora, adapter_name='a'); load_adapter(peft_lora_b, "
                        "adapter_name='b'); model.base_model.set_adapter(['a', 'b']) (PEFT sums the branches of all "
                        "active adapters); every LoraLayer.scaling['a'] *= 0.7, scaling['b'] *= -1.3; forward. "
                        "NOT add_weighted_adapter (which would build a new combined adapter, and for differing ranks "
                        "concatenates or SVDs). Base: " + ("bf16 checkpoint upcast to F32." if info["dtype"] == "bf16"
                                                            else "F32 checkpoint."),
        "new_tokens": NEW_TOKENS, "greedy_rule": GREEDY_RULE,
        "min_top2_gap": round(min_gap(res), 6),
        "prompts": prompt_entries(info["prompts"], res, base),
        "versions": versions(),
    }
    ref["verification"] = verify_two_adapters(out, name)
    fixturelib.dump_json(ref, os.path.join(out, name, "two_adapters.json"))
    print(f"{name}/two_adapters: peft_lora_b seed {seed}, min gap {ref['min_top2_gap']}, "
          f"max err {ref['verification']['numpy_merged_vs_reference_max_abs']}", flush=True)


def verify_two_adapters(out, name):
    info = model_info(name)
    base64 = base_params64(name)
    da, _, sa, _ = peft_deltas(os.path.join(out, name, "peft_lora"), base64)
    db, _, sb, _ = peft_deltas(os.path.join(out, name, "peft_lora_b"), base64)
    assert sa == 2.0 and sb == 1.0 and len(db) == 6
    deltas = {k: TWO_WEIGHTS["a"] * v for k, v in da.items()}
    for k, v in db.items():
        deltas[k] = deltas[k] + TWO_WEIGHTS["b"] * v
    stored = load_logits(os.path.join(out, name, "two_adapters.safetensors"))
    err = max_diff(stored, "logits_{}", forward_with(name, info["prompts"], base64, deltas))
    assert err <= VERIFY_TOL, (name, "two_adapters", err)
    # sanity: the reference is neither adapter alone
    only_a = max_diff(load_logits(os.path.join(out, name, "peft_lora", "reference.safetensors")), "logits_{}",
                      forward_with(name, info["prompts"], base64, deltas))
    return {"numpy_merged_vs_reference_max_abs": rnd(err, 3), "tolerance_asserted": VERIFY_TOL,
            "max_abs_diff_vs_peft_lora_alone": rnd(only_a, 4),
            "method": "W' = f32(W + 0.7*2.0*B_a@A_a - 1.3*1.0*B_b@A_b) (float64 numpy from the two adapter files), "
                      "plain transformers forward, compared with logits_<i>"}


# ----------------------------------------------------------------------------------------------
# embed/peft_embed_<model>


def peft_ewt_unmerged(name, d):
    """PEFT's own tied variant: the same factors with ensure_weight_tying=True (PEFT then also wraps lm_head with
    lora_A = emb_B^T, lora_B = emb_A^T sharing storage), unmerged forward."""
    import torch
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict
    from safetensors.torch import load_file
    cfg = LoraConfig.from_pretrained(d)
    cfg.ensure_weight_tying = True
    cfg.inference_mode = True
    pm = get_peft_model(load_ref(name), cfg)
    set_peft_model_state_dict(pm, load_file(os.path.join(d, "adapter_model.safetensors")))
    emb = pm.base_model.model.model.embed_tokens
    head = pm.base_model.model.lm_head
    assert torch.equal(head.lora_A["default"].weight, emb.lora_embedding_B["default"].t())
    assert torch.equal(head.lora_B["default"].weight, emb.lora_embedding_A["default"].t())
    return pm.eval()


def gen_peft_embed(out, name):
    import torch
    from peft import PeftModel
    info = model_info(name)
    fixture = f"embed/peft_embed_{name}"
    d = os.path.join(out, "embed", f"peft_embed_{name}")
    facts = {}

    def merged_model():
        pm = PeftModel.from_pretrained(load_ref(name), d).eval()
        e0 = pm.base_model.model.model.embed_tokens.base_layer.weight.detach().clone()
        h0 = pm.base_model.model.lm_head.weight.detach().clone()
        m = pm.merge_and_unload()
        m.eval()
        facts.update({
            "lm_head_is_embed_tokens_after_merge": m.lm_head.weight is m.model.embed_tokens.weight,
            "config_tie_word_embeddings_after_merge": bool(m.config.tie_word_embeddings),
            "embed_tokens_max_abs_change": rnd(float((m.model.embed_tokens.weight - e0).abs().max()), 4),
            "lm_head_max_abs_change": rnd(float((m.lm_head.weight - h0).abs().max()), 4),
        })
        return m

    def attempt(seed):
        build_peft(name, d, EMBED_LORA, seed, ["lora_B", "lora_embedding_A", "lora_embedding_B"])
        return run_prompts(torch_logits_fn(merged_model()), info["prompts"])

    seed, tries, res = search_seed(fixture, attempt, "merged = graft semantics")
    unmerged = run_prompts(torch_logits_fn(PeftModel.from_pretrained(load_ref(name), d).eval()), info["prompts"])
    arrays = {f"logits_{i}": r["logits"] for i, r in enumerate(res)}
    arrays.update({f"logits_peft_unmerged_{i}": r["logits"] for i, r in enumerate(unmerged)})
    save_logits(os.path.join(d, "reference.safetensors"), arrays,
                "logits_<i>: graft semantics (embedding delta on lookup AND tied head) = PEFT merge_and_unload "
                "forward; logits_peft_unmerged_<i>: PEFT unmerged forward (lookup only), informational")
    if info["tied"]:
        assert facts["lm_head_is_embed_tokens_after_merge"] and facts["lm_head_max_abs_change"] > 0, facts
    else:
        assert not facts["lm_head_is_embed_tokens_after_merge"] and facts["lm_head_max_abs_change"] == 0, facts
    ewt = ewt_factor = None
    if info["tied"]:
        pm = peft_ewt_unmerged(name, d)
        ewt_res = [torch_logits_fn(pm)(p["ids"]) for p in info["prompts"]]
        ewt = max(float(np.abs(a - r["logits"]).max()) for a, r in zip(ewt_res, res))
        assert ewt <= VERIFY_TOL, ewt
        # what merge_and_unload does with the ensure_weight_tying variant: least-squares factor of the applied delta
        emb = pm.base_model.model.model.embed_tokens
        e0 = emb.base_layer.weight.detach().double().clone()
        delta = emb.get_delta_weight("default").detach().double()
        em = pm.merge_and_unload().model.embed_tokens.weight.detach().double()
        ewt_factor = round(float(((em - e0) * delta).sum() / (delta * delta).sum()), 4)
    dtypes, shapes = st_dtypes(os.path.join(d, "adapter_model.safetensors"))
    base = base_logits(name, info["prompts"])
    ref = {
        "fixture": fixture, "generator": GENERATOR, "model": name, "base_model": model_rel(name),
        "arch": info["arch"], "dtype": info["dtype"], "tied_lm_head": info["tied"],
        "seed": seed, "seed_attempts": tries + 1,
        "adapter": {"format": "peft_lora", "files": ["adapter_config.json", "adapter_model.safetensors"],
                    "r": EMBED_LORA["r"], "lora_alpha": EMBED_LORA["lora_alpha"],
                    "scale": EMBED_LORA["lora_alpha"] / EMBED_LORA["r"],
                    "target_modules": sorted(EMBED_LORA["target_modules"]),
                    "tensors": {k: [dtypes[k], shapes[k]] for k in sorted(shapes)},
                    "init": f"lora_A (q_proj): PEFT default (torch seed {seed}); lora_B (q_proj), lora_embedding_A "
                            f"(PEFT zero init) and lora_embedding_B (PEFT N(0,1) init) all replaced by "
                            f"N(0, {PERTURB_STD}^2) from torch.Generator seed {seed + 500000}"},
        "reference_file": "reference.safetensors",
        "reference_keys": {
            "logits_<i>": "F32 [T, vocab]: GRAFT SEMANTICS. E' = E + scale * (B @ A)^T replaces the embedding for "
                          "the input lookup" + (" AND for the tied output head (shared weight)" if info["tied"] else
                                                "; the untied lm_head is unchanged") +
                          "; q_proj W' = W + scale * B @ A. Computed as PeftModel.from_pretrained(F32 base, dir)"
                          ".merge_and_unload() forward.",
            "logits_peft_unmerged_<i>": "F32 [T, vocab]: PEFT's UNMERGED forward (informational). " + (
                "On this TIED model it adapts only the lookup; the head still uses the base E. NOT what graft "
                "should produce." if info["tied"] else "Untied model: equals logits_<i> to float rounding.")},
        "peft_merge_facts": facts,
        "new_tokens": NEW_TOKENS, "greedy_rule": GREEDY_RULE,
        "greedy_semantics": "greedy / top2_gap below are for logits_<i> semantics (merged)",
        "min_top2_gap": round(min_gap(res), 6),
        "prompts": prompt_entries(info["prompts"], res, base),
        "versions": versions(),
        "notes": [
            "PEFT embedding LoRA keys have no '.weight': base_model.model.model.embed_tokens.lora_embedding_A "
            "[r, vocab] and .lora_embedding_B [hidden, r]; delta = scale * (B @ A)^T [vocab, hidden].",
            "save_embedding_layers='auto' also wrote base_model.model.model.embed_tokens.base_layer.weight: the "
            "full, UNMODIFIED base embedding (" + dtypes["base_model.model.model.embed_tokens.base_layer.weight"] +
            ", bit-identical to the checkpoint). It is not a delta; an importer must ignore it or treat it as a "
            "no-op replacement, and must never add it.",
        ],
    }
    if info["tied"]:
        ref["notes"] += [
            "Tied head: transformers 5 keeps lm_head.weight and model.embed_tokens.weight as ONE Parameter (also "
            "after model.float()); PEFT wraps only embed_tokens, so its unmerged forward changes the lookup only, "
            "while merge_and_unload adds the delta in place to the shared Parameter, which changes lm_head as well "
            "(peft_merge_facts: lm_head still IS embed_tokens after the merge, both moved by the same max change; "
            "config.tie_word_embeddings stays true). logits_<i> therefore = graft's semantics; PEFT warns "
            "'Model has tie_word_embeddings=True and a tied layer is part of the adapter, but ensure_weight_tying "
            "is not set to True'.",
            "Cross-check: the same factors loaded with LoraConfig(ensure_weight_tying=True) make PEFT also wrap "
            "lm_head with lora_A = emb_B^T, lora_B = emb_A^T (storage shared); that UNMERGED forward equals "
            f"logits_<i> within {rnd(ewt, 3)} (max abs).  Caveat: merge_and_unload of such an "
            f"ensure_weight_tying model applies the embedding delta {ewt_factor} times to the shared tensor "
            "(measured, peft_ensure_weight_tying_merge_delta_factor; 2 = once via embed_tokens and once via the "
            "tied lm_head LoRA), so it is not used as a reference.",
            "Note also: with ensure_weight_tying=True save_pretrained additionally writes lm_head.lora_A/B (= the "
            "transposed embedding factors) and lm_head.base_layer.weight; this fixture uses the DEFAULT "
            "(ensure_weight_tying=False) files, which carry embedding factors only.",
        ]
        ref["peft_ensure_weight_tying_unmerged_vs_reference_max_abs"] = rnd(ewt, 3)
        ref["peft_ensure_weight_tying_merge_delta_factor"] = ewt_factor
    if info["dtype"] == "bf16":
        ref["notes"].append("bf16 checkpoint: adapter created on the bf16 model (factors F32 on disk, the "
                            "base_layer copy BF16); references from the bf16 checkpoint upcast with model.float().")
    ref["verification"] = verify_peft_embed(out, name)
    fixturelib.dump_json(ref, os.path.join(d, "reference.json"))
    print(f"{fixture}: seed {seed}, min gap {ref['min_top2_gap']}, verification {ref['verification']}", flush=True)


def verify_peft_embed(out, name):
    info = model_info(name)
    d = os.path.join(out, "embed", f"peft_embed_{name}")
    base64 = base_params64(name)
    deltas, copies, _, _ = peft_deltas(d, base64)
    assert sorted(deltas) == ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                              "model.layers.1.self_attn.q_proj.weight"], sorted(deltas)
    assert copies == ["base_model.model.model.embed_tokens.base_layer.weight"], copies
    stored = load_logits(os.path.join(d, "reference.safetensors"))
    tied_sem = forward_with(name, info["prompts"], base64, deltas, tie_head=True)
    err = max_diff(stored, "logits_{}", tied_sem)
    assert err <= VERIFY_TOL, (d, err)
    v = {"numpy_merged_vs_logits_max_abs": rnd(err, 3), "tolerance_asserted": VERIFY_TOL}
    if info["tied"]:
        lookup = forward_with(name, info["prompts"], base64, deltas, tie_head=False)
        e2 = max_diff(stored, "logits_peft_unmerged_{}", lookup)
        sep = max_diff(stored, "logits_{}", lookup)
        assert e2 <= VERIFY_TOL and sep >= MIN_SEMANTIC_GAP, (d, e2, sep)
        v.update({"numpy_lookup_only_vs_logits_peft_unmerged_max_abs": rnd(e2, 3),
                  "logits_vs_logits_peft_unmerged_max_abs": rnd(sep, 4),
                  "method": "numpy E' = f32(E + s*(B@A)^T), q_proj W' = f32(W + s*B@A) from the adapter file; plain "
                            "transformers forward with E' as the shared (tied) weight -> logits_<i>; with the head "
                            "untied and kept at E -> logits_peft_unmerged_<i>"})
    else:
        e2 = max_diff(stored, "logits_peft_unmerged_{}", tied_sem)
        assert e2 <= VERIFY_TOL, (d, e2)
        v.update({"numpy_merged_vs_logits_peft_unmerged_max_abs": rnd(e2, 3),
                  "method": "numpy E' = f32(E + s*(B@A)^T), q_proj W' = f32(W + s*B@A) from the adapter file; plain "
                            "transformers forward (untied head unchanged) vs both keys"})
    if info["dtype"] == "bf16":
        v["max_abs_diff_if_merged_into_bf16"] = rnd(max_diff(stored, "logits_{}", bf16_merged_forward(
            name, info["prompts"], base64, deltas)), 3)
    return v


# ----------------------------------------------------------------------------------------------
# embed/mlx_embed_<model>


def build_mlx(name, d, seed):
    import mlx.core as mx
    import torch
    import mlx_lm
    from mlx.utils import tree_flatten
    from mlx_lm.lora import CONFIG_DEFAULTS
    from mlx_lm.tuner.utils import linear_to_lora_layers
    from mlx_lm.utils import save_config
    model, _ = mlx_lm.load(model_rel(name))
    model.freeze()                                    # as mlx_lm lora: base frozen, LoRA factors trainable
    mx.random.seed(seed)                              # lora_a: mlx-lm's own uniform init
    linear_to_lora_layers(model, MLX_NUM_LAYERS, dict(MLX_LORA_PARAMS))
    params = dict(tree_flatten(model.trainable_parameters()))
    g = torch.Generator().manual_seed(seed + 500000)
    upd = []
    for k in sorted(params):
        if k.endswith(".lora_b"):                     # mlx-lm zero-inits lora_b
            v = (torch.randn(tuple(params[k].shape), generator=g, dtype=torch.float32) * PERTURB_STD).numpy()
            upd.append((k, mx.array(v)))
    model.load_weights(upd, strict=False)
    weights = dict(tree_flatten(model.trainable_parameters()))
    mx.eval(weights)
    fixturelib.reset_dir(d)
    mx.save_safetensors(os.path.join(d, "adapters.safetensors"), weights)   # = mlx_lm tuner/trainer.py
    args = dict(CONFIG_DEFAULTS)
    args.update({"model": model_rel(name), "train": False, "fine_tune_type": "lora", "data": None, "seed": seed,
                 "num_layers": MLX_NUM_LAYERS, "iters": 0,
                 "adapter_path": os.path.join("tests", "fixtures", "engine_adapters", "embed", os.path.basename(d)),
                 "lora_parameters": dict(MLX_LORA_PARAMS)})
    save_config(args, os.path.join(d, "adapter_config.json"))                  # = mlx_lm lora.py
    return sorted(weights)


def mlx_reference_model(name, d):
    import mlx_lm
    model, _ = mlx_lm.load(model_rel(name), adapter_path=d)
    return model


def gen_mlx_embed(out, name):
    info = model_info(name)
    fixture = f"embed/mlx_embed_{name}"
    d = os.path.join(out, "embed", f"mlx_embed_{name}")
    keys = []

    def attempt(seed):
        keys[:] = build_mlx(name, d, seed)
        return run_prompts(mlx_logits_fn(mlx_reference_model(name, d)), info["prompts"])

    seed, tries, res = search_seed(fixture, attempt, "mlx_lm.load(adapter_path)")
    save_logits(os.path.join(d, "reference.safetensors"), {f"logits_{i}": r["logits"] for i, r in enumerate(res)},
                "logits_<i>: mlx_lm.load(base, adapter_path=dir) forward, F32 (mlx CPU)")
    import mlx.core as mx
    from mlx_lm.tuner.lora import LoRAEmbedding
    m = mlx_reference_model(name, d)
    head_path = "model.embed_tokens.as_linear (LoRAEmbedding.as_linear: E x + s * (x @ lora_b^T) @ lora_a^T)" \
        if info["tied"] else "lm_head (plain nn.Linear, untouched)"
    assert isinstance(m.model.embed_tokens, LoRAEmbedding)
    assert hasattr(m, "lm_head") != info["tied"]
    dtypes, shapes = st_dtypes(os.path.join(d, "adapters.safetensors"))
    base = base_logits(name, info["prompts"])
    ref = {
        "fixture": fixture, "generator": GENERATOR, "model": name, "base_model": model_rel(name),
        "arch": info["arch"], "dtype": info["dtype"], "tied_lm_head": info["tied"],
        "seed": seed, "seed_attempts": tries + 1,
        "adapter": {"format": "mlx_lora", "files": ["adapter_config.json", "adapters.safetensors"],
                    "fine_tune_type": "lora", "num_layers": MLX_NUM_LAYERS, "lora_parameters": MLX_LORA_PARAMS,
                    "tensors": {k: [dtypes[k], shapes[k]] for k in sorted(shapes)},
                    "init": f"lora_a: mlx-lm's own init (uniform +-1/sqrt(rows), mx.random.seed({seed})); lora_b "
                            f"(mlx-lm zero init) replaced by N(0, {PERTURB_STD}^2) from torch.Generator seed "
                            f"{seed + 500000}; NOT trained"},
        "reference_file": "reference.safetensors",
        "reference_keys": {"logits_<i>": "F32 [T, vocab]: mlx_lm.load(base, adapter_path=this dir) forward over "
                                         "prompts[i].ids on the mlx CPU device (float32 throughout). Lookup: E[x] + "
                                         "s * lora_a[x] @ lora_b. Head: " + head_path +
                                         ". q_proj (layer 1 only): W x + s * (x @ lora_a) @ lora_b."},
        "semantics": ("E' = E + scale * lora_a @ lora_b [vocab, hidden] is used for the input lookup" +
                      (" AND for the tied output head" if info["tied"] else "; the untied lm_head is unchanged") +
                      "; model.layers.1.self_attn.q_proj: W' = W + scale * (lora_a @ lora_b)^T; scale = "
                      "lora_parameters.scale = 2.0 verbatim (no alpha, no division by rank)."),
        "new_tokens": NEW_TOKENS, "greedy_rule": GREEDY_RULE,
        "min_top2_gap": round(min_gap(res), 6),
        "prompts": prompt_entries(info["prompts"], res, base),
        "versions": versions(),
        "notes": [
            "Keys: model.embed_tokens.lora_a [vocab, r] = [384, 4], model.embed_tokens.lora_b [r, hidden] = [4, 64]; "
            "model.layers.1.self_attn.q_proj.lora_a [in, r], .lora_b [r, out] (no '.weight' suffix). The "
            "embedding factors are NOT transposed like the Linear ones: for embeddings lora_a runs over the vocab.",
            "lora_parameters.keys: entries are matched EXACTLY against module paths: 'self_attn.q_proj' relative "
            "to each of the last num_layers blocks (here only layer 1), 'model.embed_tokens' against the full "
            "model path (mlx_lm/tuner/utils.py linear_to_lora_layers, which applies keys outside the blocks "
            "regardless of num_layers).",
            "adapter_config.json is the whole mlx_lm lora argument namespace (CONFIG_DEFAULTS updated with this "
            "fixture's values) written with mlx_lm.utils.save_config, as `mlx_lm lora` does; only fine_tune_type, "
            "num_layers and lora_parameters are read by mlx_lm.load. adapters.safetensors has '__metadata__': null "
            "(mx.save_safetensors).",
            "Reproducible only on mlx's CPU device (different kernels elsewhere).",
        ],
    }
    ref["verification"] = verify_mlx_embed(out, name)
    fixturelib.dump_json(ref, os.path.join(d, "reference.json"))
    print(f"{fixture}: seed {seed}, min gap {ref['min_top2_gap']}, verification {ref['verification']}", flush=True)


def verify_mlx_embed(out, name):
    info = model_info(name)
    d = os.path.join(out, "embed", f"mlx_embed_{name}")
    base64 = base_params64(name)
    deltas, s, _ = mlx_deltas(d)
    assert s == 2.0 and sorted(deltas) == ["model.embed_tokens.weight", "model.layers.1.self_attn.q_proj.weight"]
    stored = load_logits(os.path.join(d, "reference.safetensors"))
    merged = forward_with(name, info["prompts"], base64, deltas, tie_head=True)
    err = max_diff(stored, "logits_{}", merged)
    assert err <= VERIFY_TOL_MLX, (d, err)
    v = {"torch_numpy_merged_vs_mlx_reference_max_abs": rnd(err, 3), "tolerance_asserted": VERIFY_TOL_MLX,
         "method": "numpy E' = f32(E + s * lora_a @ lora_b), q_proj W' = f32(W + s * (lora_a @ lora_b)^T) from "
                   "adapters.safetensors, loaded into a transformers model (tied: E' is the shared lookup + head "
                   "weight), forward compared with the mlx logits_<i>"}
    if info["tied"]:
        lookup = forward_with(name, info["prompts"], base64, deltas, tie_head=False)
        sep = max_diff(stored, "logits_{}", lookup)
        assert sep >= MIN_SEMANTIC_GAP, (d, sep)
        v["reference_vs_lookup_only_semantics_max_abs"] = rnd(sep, 4)
    return v


# ----------------------------------------------------------------------------------------------
# embed/peft_lm_head_*


def gen_peft_lm_head(out):
    from peft import PeftModel
    # untied llama_f32: reference
    name = "llama_f32"
    info = model_info(name)
    fixture = f"embed/peft_lm_head_{name}"
    d = os.path.join(out, "embed", f"peft_lm_head_{name}")

    def attempt(seed):
        build_peft(name, d, LM_HEAD_LORA, seed, ["lora_B"])
        return run_prompts(torch_logits_fn(PeftModel.from_pretrained(load_ref(name), d).eval()), info["prompts"])

    seed, tries, res = search_seed(fixture, attempt, "unmerged")
    save_logits(os.path.join(d, "reference.safetensors"), {f"logits_{i}": r["logits"] for i, r in enumerate(res)},
                "logits_<i>: PEFT unmerged forward with the lm_head + q_proj LoRA, F32 [T, vocab]")
    dtypes, shapes = st_dtypes(os.path.join(d, "adapter_model.safetensors"))
    base = base_logits(name, info["prompts"])
    ref = {
        "fixture": fixture, "generator": GENERATOR, "model": name, "base_model": model_rel(name),
        "arch": info["arch"], "dtype": info["dtype"], "tied_lm_head": info["tied"],
        "seed": seed, "seed_attempts": tries + 1,
        "adapter": {"format": "peft_lora", "files": ["adapter_config.json", "adapter_model.safetensors"],
                    "r": LM_HEAD_LORA["r"], "lora_alpha": LM_HEAD_LORA["lora_alpha"],
                    "scale": LM_HEAD_LORA["lora_alpha"] / LM_HEAD_LORA["r"],
                    "target_modules": sorted(LM_HEAD_LORA["target_modules"]),
                    "tensors": {k: [dtypes[k], shapes[k]] for k in sorted(shapes)},
                    "init": f"lora_A: PEFT default (torch seed {seed}); lora_B: N(0, {PERTURB_STD}^2) from "
                            f"torch.Generator seed {seed + 500000}"},
        "reference_file": "reference.safetensors",
        "reference_keys": {"logits_<i>": "F32 [T, vocab]: PeftModel.from_pretrained(base, dir) UNMERGED forward: "
                                         "logits = W_head h + 2.0 * B_head (A_head h); q_proj likewise"},
        "new_tokens": NEW_TOKENS, "greedy_rule": GREEDY_RULE,
        "min_top2_gap": round(min_gap(res), 6),
        "prompts": prompt_entries(info["prompts"], res, base),
        "versions": versions(),
        "notes": [
            "lm_head LoRA keys: base_model.model.lm_head.lora_A.weight [r, hidden] = [4, 64], "
            ".lora_B.weight [vocab, r] = [384, 4] (a plain Linear LoRA).",
            "save_embedding_layers='auto' treats lm_head as an embedding layer and also wrote "
            "base_model.model.lm_head.base_layer.weight: the full, UNMODIFIED base lm_head (F32, bit-identical). "
            "Not a delta: ignore it or treat it as a no-op replacement.",
        ],
    }
    base64 = base_params64(name)
    deltas, copies, _, _ = peft_deltas(d, base64)
    assert copies == ["base_model.model.lm_head.base_layer.weight"], copies
    ref["verification"] = verify_lm_head(out)
    fixturelib.dump_json(ref, os.path.join(d, "reference.json"))
    print(f"{fixture}: seed {seed}, min gap {ref['min_top2_gap']}, verification {ref['verification']}", flush=True)

    # tied qwen2_f32: files only, graft must refuse
    import torch
    from peft import LoraConfig, get_peft_model
    name = "qwen2_f32"
    fixture = f"embed/peft_lm_head_{name}"
    d = os.path.join(out, "embed", f"peft_lm_head_{name}")
    seed = seed_base(fixture)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.manual_seed(seed)
        pm = get_peft_model(load_native(name), LoraConfig(lora_dropout=0.0, bias="none", **LM_HEAD_LORA))
    peft_warn = sorted({str(w.message).split(". ")[0] for w in caught if "tie_word_embeddings" in str(w.message)})
    head = pm.base_model.model.lm_head
    emb = pm.base_model.model.model.embed_tokens
    shared = head.base_layer.weight is emb.weight
    perturb(pm, ["lora_B"], seed + 500000)
    fixturelib.reset_dir(d)
    peft_save(pm, d)
    # what PEFT would do with it: unmerged adapts only the head; merging writes into the shared tensor (lookup too)
    pm2 = PeftModel.from_pretrained(load_ref(name), d)
    e0 = pm2.base_model.model.model.embed_tokens.weight.detach().clone()
    merged = pm2.merge_and_unload()
    emb_changed = float((merged.model.embed_tokens.weight - e0).abs().max())
    dtypes, shapes = st_dtypes(os.path.join(d, "adapter_model.safetensors"))
    exp = {
        "fixture": fixture, "generator": GENERATOR, "model": name, "base_model": model_rel(name),
        "tied_lm_head": True, "seed": seed,
        "expect": "REFUSE: graft must reject this adapter for this model (LoRA on lm_head while lm_head is tied to "
                  "model.embed_tokens: a head-only delta cannot be represented on the single shared weight)",
        "adapter": {"format": "peft_lora", "files": ["adapter_config.json", "adapter_model.safetensors"],
                    "r": LM_HEAD_LORA["r"], "lora_alpha": LM_HEAD_LORA["lora_alpha"],
                    "target_modules": sorted(LM_HEAD_LORA["target_modules"]),
                    "tensors": {k: [dtypes[k], shapes[k]] for k in sorted(shapes)}},
        "peft_behaviour": {
            "refused": False,
            "warnings": peft_warn,
            "lm_head_base_weight_is_embed_tokens_weight": shared,
            "merge_and_unload_changes_input_embedding_max_abs": rnd(emb_changed, 4),
        },
        "versions": versions(),
        "notes": [
            "Written by PEFT itself (get_peft_model + save_pretrained): peft 0.21.2 does NOT refuse lm_head as a "
            "target on a tied model -- it only warns -- and wraps lm_head whose base weight IS the shared "
            "embedding Parameter. Its unmerged forward would adapt the head only; merge_and_unload would add the "
            "delta to the shared tensor and so silently change the input embedding too (see peft_behaviour).",
            "save_embedding_layers='auto' also wrote base_model.model.lm_head.base_layer.weight (the shared "
            "embedding/head weight, unmodified, F32) next to lm_head.lora_A.weight [4, 64] / lora_B.weight [384, 4].",
            "lora_B was set to N(0, 0.05^2) (non-zero) so the adapter is not a no-op.",
        ],
    }
    fixturelib.dump_json(exp, os.path.join(d, "expected.json"))
    print(f"{fixture}: written (graft must refuse); PEFT warnings {len(peft_warn)}, shared {shared}", flush=True)


def verify_lm_head(out):
    name = "llama_f32"
    info = model_info(name)
    d = os.path.join(out, "embed", f"peft_lm_head_{name}")
    base64 = base_params64(name)
    deltas, copies, _, _ = peft_deltas(d, base64)
    assert sorted(deltas) == ["lm_head.weight", "model.layers.0.self_attn.q_proj.weight",
                              "model.layers.1.self_attn.q_proj.weight"], sorted(deltas)
    stored = load_logits(os.path.join(d, "reference.safetensors"))
    err = max_diff(stored, "logits_{}", forward_with(name, info["prompts"], base64, deltas))
    assert err <= VERIFY_TOL, (d, err)
    return {"numpy_merged_vs_reference_max_abs": rnd(err, 3), "tolerance_asserted": VERIFY_TOL,
            "method": "numpy lm_head W' = f32(W + s*B@A), q_proj likewise, plain transformers forward"}


def verify_lm_head_tied(out):
    d = os.path.join(out, "embed", "peft_lm_head_qwen2_f32")
    base64 = base_params64("qwen2_f32")
    deltas, copies, _, _ = peft_deltas(d, base64)
    assert "lm_head.weight" in deltas and copies == ["base_model.model.lm_head.base_layer.weight"], copies
    return {}


# ----------------------------------------------------------------------------------------------


README = """# engine_adapters fixtures

Generated by `tools/gen_engine_adapter_fixtures.py` (see its docstring for the exact semantics, seeds,
checks and tolerances).  Logits are F32 `[T, vocab]` over the prompt ids of
`tests/fixtures/models/<model>/reference.json` (first 3 prompts), full forward, eager attention.

| path | adapter | reference keys |
|---|---|---|
| `<model>/peft_lora/` (all 9 models) | PEFT LoRA r=4 alpha=8 (scale 2) on q,k,v,o,gate,up,down | `reference.safetensors`: `logits_<i>` = base + unmerged LoRA branch |
| `<model>/peft_lora_b/` (llama_f32, qwen2_bf16) | PEFT LoRA r=2 alpha=2 (scale 1) on q,v,down | -- |
| `<model>/two_adapters.safetensors` (same 2 models) | peft_lora at weight 0.7 + peft_lora_b at weight -1.3 | `logits_<i>` = W + 0.7*2*B_a A_a - 1.3*1*B_b A_b |
| `embed/peft_embed_<m>/` (llama_f32, qwen2_f32 tied, qwen3_bf16 tied) | PEFT LoRA on embed_tokens + q_proj | `logits_<i>` = graft semantics (embed delta on lookup AND tied head = PEFT merge_and_unload); `logits_peft_unmerged_<i>` = PEFT unmerged (lookup only; informational) |
| `embed/mlx_embed_<m>/` (llama_f32, qwen2_f32 tied) | mlx-lm LoRA on model.embed_tokens + layers.1 q_proj, scale 2 | `logits_<i>` = mlx_lm.load(adapter_path) forward (tied: as_linear applies the delta on the head) |
| `embed/peft_lm_head_llama_f32/` | PEFT LoRA on lm_head + q_proj (untied) | `logits_<i>` = unmerged PEFT forward |
| `embed/peft_lm_head_qwen2_f32/` | PEFT LoRA on lm_head + q_proj of a TIED model | none: graft must refuse (`expected.json`) |

bf16 models: base = bf16 checkpoint upcast to F32 (`model.float()`), adapter F32.  Greedy continuations
(16 argmax steps, EOS ignored) and top-1/top-2 gaps are in each `reference.json` / `two_adapters.json`.
"""

GROUPS = ["peft_lora", "two_adapters", "peft_embed", "mlx_embed", "peft_lm_head"]


def verify_all(out):
    rows = []
    for name in ALL_MODELS:
        if os.path.isdir(os.path.join(out, name, "peft_lora")):
            rows.append((f"{name}/peft_lora", verify_peft_lora(out, name)))
        if os.path.isfile(os.path.join(out, name, "two_adapters.safetensors")):
            rows.append((f"{name}/two_adapters", verify_two_adapters(out, name)))
    for name in PEFT_EMBED_MODELS:
        if os.path.isdir(os.path.join(out, "embed", f"peft_embed_{name}")):
            rows.append((f"embed/peft_embed_{name}", verify_peft_embed(out, name)))
    for name in MLX_EMBED_MODELS:
        if os.path.isdir(os.path.join(out, "embed", f"mlx_embed_{name}")):
            rows.append((f"embed/mlx_embed_{name}", verify_mlx_embed(out, name)))
    if os.path.isdir(os.path.join(out, "embed", "peft_lm_head_llama_f32")):
        rows.append(("embed/peft_lm_head_llama_f32", verify_lm_head(out)))
    if os.path.isdir(os.path.join(out, "embed", "peft_lm_head_qwen2_f32")):
        rows.append(("embed/peft_lm_head_qwen2_f32", verify_lm_head_tied(out)))
    print(f"\n{'fixture':36s} {'max |stored - numpy-merged forward|':>36s}")
    for fx, v in rows:
        errs = {k: x for k, x in v.items() if k.endswith("max_abs") and "vs_peft_lora_alone" not in k
                and "lookup_only_semantics" not in k and "logits_vs_logits_peft" not in k}
        print(f"{fx:36s} {', '.join(f'{x:.3g}' for x in errs.values()) or '(files only: keys checked)':>36s}")
    total = 0
    for root, _, files in os.walk(out):
        for f in files:
            total += os.path.getsize(os.path.join(root, f))
    print(f"total size {total} bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", choices=GROUPS, help="fixture groups to (re)generate (default: all)")
    ap.add_argument("--models", nargs="*", help="restrict per-model groups to these models")
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--verify-only", action="store_true")
    args = ap.parse_args()
    want = {"PYTHONHASHSEED": "0", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    if any(os.environ.get(k) != v for k, v in want.items()):
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:],
                  dict(os.environ, **want))
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    os.chdir(REPO)
    quiet()
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    t0 = time.time()
    sel = lambda ms: [m for m in ms if not args.models or m in args.models]   # noqa: E731
    if not args.verify_only:
        groups = args.only or GROUPS
        if "peft_lora" in groups:
            for name in sel(ALL_MODELS):
                gen_peft_lora(out, name)
        if "two_adapters" in groups:
            for name in sel(TWO_ADAPTER_MODELS):
                gen_two_adapters(out, name)
        if "peft_embed" in groups:
            for name in sel(PEFT_EMBED_MODELS):
                gen_peft_embed(out, name)
        if "mlx_embed" in groups:
            for name in sel(MLX_EMBED_MODELS):
                gen_mlx_embed(out, name)
        if "peft_lm_head" in groups:
            gen_peft_lm_head(out)
        with open(os.path.join(out, "README.md"), "w") as f:
            f.write(README)
    for root, _, files in os.walk(out):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)   # safetensors / PEFT write 0600
    verify_all(out)
    print(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
