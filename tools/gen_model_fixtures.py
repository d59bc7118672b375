#!/usr/bin/env python3
"""Generate tiny random-weight Hugging Face checkpoints + reference outputs for graft's tests.

Developer tool (not run by CI); the outputs are committed under tests/fixtures/models/.
Needs: torch, transformers, tokenizers, safetensors, numpy.

For every model in MODELS this writes tests/fixtures/models/<name>/:
  config.json, model.safetensors, generation_config.json   (transformers save_pretrained)
  tokenizer.json, tokenizer_config.json                   (copied from tests/fixtures/tokenizers/<tok>/)
  reference.json          prompts (text, ids, 16 greedy ids, top-1/top-2 gaps), dtype, notes
  reference.safetensors   logits_<i>      F32 [T, vocab]: full forward over prompt i's ids
                          logits_bf16_<i> (bf16 models only) same, computed natively in bfloat16
  reference_hidden.safetensors
                          hidden_<i>      F32 [T, hidden]: the last entry of output_hidden_states
                                          (after the final RMSNorm, what lm_head reads), same
                                          forward as logits_<i> (graft's embeddings)

Everything is reproducible: each model's weights come from a fixed per-model seed (the first
seed in SEED_BASE + k, k = 0..SEED_TRIES-1, whose greedy decode keeps a top-1/top-2 logit gap of
at least MIN_GAP at every step of every prompt, so the greedy references are not near-ties).

All references are computed from the checkpoint as re-loaded from disk, with eager attention.
For *_bf16 checkpoints the weights are stored in bfloat16 and "logits_<i>" / "greedy" are
computed by the bf16 checkpoint upcast to float32 (model.float()) -- exactly graft's arithmetic
(BF16 weights, F32 activations) up to summation order; "logits_bf16_<i>" is transformers'
native bfloat16 forward, for a looser informational check.

config.json style: transformers 5 writes "rope_parameters" and "dtype"; checkpoints made with
transformers 4.x (most of the Hub) have "rope_theta"/"rope_scaling" and "torch_dtype" instead.
To exercise both in graft's config parser, models with CONFIG_STYLE "legacy" get their
config.json rewritten to the 4.x keys (and the rewrite is verified by reloading it with
transformers and comparing logits bit-for-bit); "v5" models keep what save_pretrained wrote.

Usage: python3 tools/gen_model_fixtures.py [--only NAME ...] [--out DIR] [--hidden-only]
  --hidden-only: (re)write only reference_hidden.safetensors of the committed checkpoints, from
  their reference.json ids (the weights are not regenerated; the recomputed logits must match the
  committed logits_<i> to 1e-5, so the hidden states belong to the same reference run).
"""
import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import zlib

import numpy as np
import torch
import fixturelib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOK_DIR = os.path.join(REPO, "tests", "fixtures", "tokenizers")
OUT_DIR = os.path.join(REPO, "tests", "fixtures", "models")

INIT_STD = 0.2        # weights ~ N(0, 0.2^2): logits have std ~1-2, so they are far from flat
NORM_JITTER = 0.1     # RMSNorm weights ~ 1 + 0.1 * N(0, 1)
NEW_TOKENS = 16
SEED_BASE = 1234
SEED_TRIES = 200
MIN_GAP = 0.02        # required min top-1/top-2 gap over all greedy steps (float32 reference)

COMMON = dict(
    hidden_size=64, num_hidden_layers=2, intermediate_size=128, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, max_position_embeddings=256, hidden_act="silu",
)

LLAMA3_ROPE = {
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    # 64 rather than 32: with head_dim 16 and theta 5e5 the per-pair wavelengths are
    # 6.3, 32.5, 169, 875, ... so with 64 (high_freq_wavelen = 64/4 = 16, low_freq_wavelen = 64)
    # pair 0 is kept, pair 1 lands in the *smoothly interpolated* band and pairs 2.. are
    # divided by 8 -- all three branches of the llama3 formula are exercised.  (With 32 the
    # wavelength 32.5 of pair 1 would just clear 32 and the smooth band would be empty.)
    "original_max_position_embeddings": 64,
}

# name, architecture, tokenizer, dtype, tied head, extra config, config.json style
MODELS = [
    dict(name="llama_f32", arch="llama", tok="tiny_bpe", dtype="f32", tied=False,
         cfg=dict(rope_theta=10000.0, rms_norm_eps=1e-5), style="legacy"),
    dict(name="llama_bf16", arch="llama", tok="tiny_bpe", dtype="bf16", tied=True,
         cfg=dict(rope_theta=10000.0, rms_norm_eps=1e-5), style="v5"),
    dict(name="llama3rope_f32", arch="llama", tok="tiny_bpe", dtype="f32", tied=False,
         cfg=dict(rope_theta=500000.0, rms_norm_eps=1e-5, rope_scaling=LLAMA3_ROPE), style="legacy"),
    dict(name="mistral_f32", arch="mistral", tok="tiny_spm", dtype="f32", tied=False,
         cfg=dict(rope_theta=10000.0, rms_norm_eps=1e-5, sliding_window=None), style="legacy"),
    dict(name="mistral_bf16", arch="mistral", tok="tiny_spm", dtype="bf16", tied=False,
         cfg=dict(rope_theta=10000.0, rms_norm_eps=1e-5, sliding_window=None), style="v5"),
    dict(name="qwen2_f32", arch="qwen2", tok="tiny_bpe", dtype="f32", tied=True,
         cfg=dict(rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=False, sliding_window=None),
         style="legacy"),
    dict(name="qwen2_bf16", arch="qwen2", tok="tiny_bpe", dtype="bf16", tied=True,
         cfg=dict(rope_theta=1000000.0, rms_norm_eps=1e-6, use_sliding_window=False, sliding_window=None),
         style="v5"),
    dict(name="qwen3_f32", arch="qwen3", tok="tiny_bpe", dtype="f32", tied=False,
         cfg=dict(rope_theta=1000000.0, rms_norm_eps=1e-6, head_dim=32, attention_bias=False,
                  use_sliding_window=False, sliding_window=None), style="legacy"),
    dict(name="qwen3_bf16", arch="qwen3", tok="tiny_bpe", dtype="bf16", tied=True,
         cfg=dict(rope_theta=1000000.0, rms_norm_eps=1e-6, head_dim=32, attention_bias=False,
                  use_sliding_window=False, sliding_window=None), style="v5"),
    # Gemma 2: soft-caps small enough to bend these logits (scores ~1-5, logits up to ~10; the real
    # 50 / 30 would leave them untouched and the test could not fail), a sliding window of 4 (the
    # long prompt has > 20 tokens, so layer 0 really drops positions), query_pre_attn_scalar 24
    # != head_dim 16 (the scale differs from 1/sqrt(head_dim)), 3 layers (local, global, local).
    dict(name="gemma2_f32", arch="gemma2", tok="tiny_bpe", dtype="f32", tied=True,
         cfg=dict(rope_theta=10000.0, rms_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh",
                  hidden_activation="gelu_pytorch_tanh", num_hidden_layers=3, query_pre_attn_scalar=24,
                  attn_logit_softcapping=2.0, final_logit_softcapping=10.0, sliding_window=4),
         style="v5", chat_template="gemma.jinja"),
    # Gemma 3 (text): q/k norms, layers local, global, local with the local RoPE base 10000 and the
    # global one 1e6 with linear scaling 2 (as the 4B+ checkpoints scale their global layers).
    dict(name="gemma3_f32", arch="gemma3_text", tok="tiny_bpe", dtype="f32", tied=True,
         cfg=dict(rms_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh", hidden_activation="gelu_pytorch_tanh",
                  num_hidden_layers=3, query_pre_attn_scalar=24, sliding_window=4,
                  layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                  rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
         style="v5", chat_template="gemma.jinja"),
    # Phi-3: fused qkv_proj / gate_up_proj, partial_rotary_factor 0.5 (RoPE on 8 of each head's 16
    # dims, as Phi-4-mini rotates 3/4), a sliding window of 4 on every layer (the long prompt drops
    # positions), 3 layers. Legacy style: partial_rotary_factor at the top level, as 4.x writes it.
    dict(name="phi3_f32", arch="phi3", tok="tiny_bpe", dtype="f32", tied=False,
         cfg=dict(rope_theta=10000.0, rms_norm_eps=1e-5, num_hidden_layers=3, partial_rotary_factor=0.5,
                  sliding_window=4, original_max_position_embeddings=256),
         style="legacy", chat_template="phi3.jinja"),
]

# Prompt texts per tokenizer.  Prompt 1 is the long one (> 20 tokens with either tokenizer).
PROMPTS = {
    "tiny_bpe": [
        "Hello world",
        "Once upon a time, there was a little robot.",
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    ],
    "tiny_spm": [
        "Hello world",
        "Once upon a time, there was a little robot.",
        "def add(a, b):\n    return a + b",
    ],
}


def config_class(arch):
    import transformers as T
    return {"llama": T.LlamaConfig, "mistral": T.MistralConfig, "qwen2": T.Qwen2Config,
            "qwen3": T.Qwen3Config, "gemma2": T.Gemma2Config, "gemma3_text": T.Gemma3TextConfig,
            "phi3": T.Phi3Config}[arch]


def model_class(arch):
    import transformers as T
    return {"llama": T.LlamaForCausalLM, "mistral": T.MistralForCausalLM, "qwen2": T.Qwen2ForCausalLM,
            "qwen3": T.Qwen3ForCausalLM, "gemma2": T.Gemma2ForCausalLM, "gemma3_text": T.Gemma3ForCausalLM,
            "phi3": T.Phi3ForCausalLM}[arch]


def tokenizer_info(tok_name):
    """(vocab size incl. added tokens, special ids) from tokenizer.json + tokenizer_config.json."""
    from tokenizers import Tokenizer
    d = os.path.join(TOK_DIR, tok_name)
    tk = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json")) as f:
        tcfg = json.load(f)

    def tid(key):
        v = tcfg.get(key)
        if isinstance(v, dict):
            v = v.get("content")
        return tk.token_to_id(v) if v else None

    return tk.get_vocab_size(with_added_tokens=True), dict(
        bos_token_id=tid("bos_token"), eos_token_id=tid("eos_token"), pad_token_id=tid("pad_token"))


def encode(tok_name, text):
    """Encode with transformers' AutoTokenizer (add_special_tokens=True, i.e. BOS per the
    tokenizer config) and cross-check against the raw `tokenizers` library."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer
    d = os.path.join(TOK_DIR, tok_name)
    hf = AutoTokenizer.from_pretrained(d)
    ids = hf(text, add_special_tokens=True).input_ids
    raw = Tokenizer.from_file(os.path.join(d, "tokenizer.json")).encode(text, add_special_tokens=True).ids
    if ids != raw:
        raise SystemExit(f"{tok_name}: AutoTokenizer and tokenizers disagree on {text!r}:\n  {ids}\n  {raw}")
    return ids


def build_config(spec, vocab, special):
    cfg = dict(COMMON)
    cfg.update(spec["cfg"])
    cfg.update(vocab_size=vocab, tie_word_embeddings=spec["tied"], **special)
    return config_class(spec["arch"])(**cfg)


@torch.no_grad()
def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    for name, p in sorted(model.named_parameters()):
        if name.endswith("norm.weight"):  # input/post-attention/final RMSNorm, qwen3 q_norm/k_norm
            # Gemma's RMSNorm multiplies by (1 + w): jitter w around 0 for the same effective weights.
            offset = 0.0 if model.config.model_type.startswith("gemma") else 1.0
            p.copy_(offset + NORM_JITTER * torch.randn(p.shape, generator=g))
        else:  # embeddings, projections, lm_head, qwen2 q/k/v biases
            p.copy_(INIT_STD * torch.randn(p.shape, generator=g))


@torch.no_grad()
def full_logits(model, ids):
    return model(input_ids=torch.tensor([ids])).logits[0].float()


@torch.no_grad()
def full_hidden(model, ids):
    """The final hidden states [T, hidden]: output_hidden_states' last entry, which in HF Llama-family
    models is after the final norm. Checked against last_hidden_state and against the logits (the
    head applied to it), so a transformers change in what that entry means cannot pass silently."""
    out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    h = out.hidden_states[-1][0]
    if not torch.equal(h, model.model(input_ids=torch.tensor([ids])).last_hidden_state[0]):
        raise SystemExit("hidden_states[-1] is not last_hidden_state (after the final norm)")
    if not torch.allclose(model.lm_head(h).float(), out.logits[0].float(), atol=1e-5, rtol=0):
        raise SystemExit("lm_head(hidden_states[-1]) does not give the logits")
    return h.float()


def save_hidden(ref, prompt_ids, dst):
    from safetensors.torch import save_file
    tensors = {f"hidden_{i}": full_hidden(ref, ids).contiguous() for i, ids in enumerate(prompt_ids)}
    save_file(tensors, os.path.join(dst, "reference_hidden.safetensors"),
              metadata={"generator": "tools/gen_model_fixtures.py"})
    os.chmod(os.path.join(dst, "reference_hidden.safetensors"), 0o644)


def hidden_only(spec, out_root):
    """reference_hidden.safetensors for a committed checkpoint, which must reproduce its logits."""
    from safetensors.torch import load_file
    dst = os.path.join(out_root, spec["name"])
    with open(os.path.join(dst, "reference.json")) as f:
        prompt_ids = [p["ids"] for p in json.load(f)["prompts"]]
    ref = ref_model(dst, spec)
    committed = load_file(os.path.join(dst, "reference.safetensors"))
    for i, ids in enumerate(prompt_ids):
        d = float((full_logits(ref, ids) - committed[f"logits_{i}"]).abs().max())
        if d > 1e-5:
            raise SystemExit(f"{spec['name']}: prompt {i} logits differ from the committed ones by {d}")
    save_hidden(ref, prompt_ids, dst)
    print(f"{spec['name']}: reference_hidden.safetensors for {len(prompt_ids)} prompts")


@torch.no_grad()
def greedy(model, ids, n):
    """Pure argmax decoding (no processors, EOS ignored), full recompute each step."""
    seq, gaps = list(ids), []
    for _ in range(n):
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1].float()
        top2 = torch.topk(logits, 2)
        gaps.append(float(top2.values[0] - top2.values[1]))
        seq.append(int(top2.indices[0]))
    return seq[len(ids):], gaps


@torch.no_grad()
def generate_check(model, ids, n, pad_id):
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         do_sample=False, max_new_tokens=n, min_new_tokens=0, eos_token_id=None,
                         pad_token_id=pad_id if pad_id is not None else 0,
                         temperature=None, top_p=None, top_k=None)
    return out[0, len(ids):].tolist()


def to_legacy_config(path, spec):
    """Rewrite a transformers-5 config.json to the transformers-4.x key names."""
    with open(path) as f:
        c = json.load(f)
    rp = c.pop("rope_parameters", None) or {}
    out = {}
    for k, v in c.items():
        if k == "dtype":
            out["torch_dtype"] = v
        else:
            out[k] = v
    out["rope_theta"] = rp.get("rope_theta")
    if rp.get("partial_rotary_factor", 1.0) != 1.0:  # 4.x keeps it at the top level (Phi-3/4)
        out["partial_rotary_factor"] = rp["partial_rotary_factor"]
    rp = {k: v for k, v in rp.items() if k != "partial_rotary_factor"}
    if rp.get("rope_type", "default") != "default":
        out["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
    else:
        out["rope_scaling"] = None
    out.pop("layer_types", None)  # 4.x-era Qwen2/Qwen3 configs have no layer_types
    with open(path, "w") as f:
        json.dump(dict(sorted(out.items())), f, indent=2)
        f.write("\n")


def load(model_dir, arch, torch_dtype):
    m = model_class(arch).from_pretrained(model_dir, dtype=torch_dtype, attn_implementation="eager")
    return m.eval()


def ref_model(model_dir, spec):
    """The model whose arithmetic graft reproduces: f32 weights, or bf16 weights upcast to f32.
    (Upcasting the loaded bf16 model keeps the rotary inv_freq buffer in float32, as it is
    computed at init; casting an in-memory model to bf16 and back would round it.)"""
    if spec["dtype"] == "bf16":
        return load(model_dir, spec["arch"], torch.bfloat16).float()
    return load(model_dir, spec["arch"], torch.float32)


def references(model_dir, spec, prompt_ids, pad_id):
    """Reload the checkpoint and compute the references the tests use."""
    ref = ref_model(model_dir, spec)
    native = load(model_dir, spec["arch"], torch.bfloat16) if spec["dtype"] == "bf16" else None
    out = {"logits": [], "logits_bf16": [], "greedy": [], "gaps": [], "greedy_bf16": []}
    for ids in prompt_ids:
        out["logits"].append(full_logits(ref, ids))
        g, gaps = greedy(ref, ids, NEW_TOKENS)
        out["greedy"].append(g)
        out["gaps"].append(gaps)
        if native is not None:
            out["logits_bf16"].append(full_logits(native, ids))
            out["greedy_bf16"].append(greedy(native, ids, NEW_TOKENS)[0])
    return ref, out


def make_one(spec, out_root, verbose=True):
    from transformers import GenerationConfig
    name, arch = spec["name"], spec["arch"]
    vocab, special = tokenizer_info(spec["tok"])
    texts = PROMPTS[spec["tok"]]
    prompt_ids = [encode(spec["tok"], t) for t in texts]
    assert len(prompt_ids[1]) > 20, (name, len(prompt_ids[1]))
    cfg = build_config(spec, vocab, special)
    cls = model_class(arch)
    save_dtype = torch.bfloat16 if spec["dtype"] == "bf16" else torch.float32
    base = SEED_BASE + zlib.crc32(name.encode()) % 100000

    tmp = tempfile.mkdtemp(prefix=f"graft_{name}_")
    try:
        for attempt in range(SEED_TRIES):
            seed = base + attempt
            torch.manual_seed(seed)
            model = cls(cfg)
            randomize(model, seed)
            model = model.to(save_dtype)
            model.generation_config = GenerationConfig(do_sample=False, **{k: v for k, v in special.items() if v is not None})
            shutil.rmtree(tmp)
            model.save_pretrained(tmp, safe_serialization=True)
            if spec["style"] == "legacy":
                v5 = ref_model(tmp, spec)
                v5_logits = [full_logits(v5, ids) for ids in prompt_ids]
                to_legacy_config(os.path.join(tmp, "config.json"), spec)
            ref, out = references(tmp, spec, prompt_ids, special["pad_token_id"])
            if spec["style"] == "legacy" and not all(torch.equal(a, b) for a, b in zip(v5_logits, out["logits"])):
                raise SystemExit(f"{name}: legacy config.json does not reload to the same logits")
            min_gap = min(min(g) for g in out["gaps"])
            if min_gap >= MIN_GAP:
                break
            if verbose:
                print(f"  {name}: seed {seed} min gap {min_gap:.4f} < {MIN_GAP}, next seed")
        else:
            raise SystemExit(f"{name}: no seed in {SEED_TRIES} tries gives min gap >= {MIN_GAP}")

        # Cross-checks: generate() agrees with the argmax loop; the legacy config.json reloads
        # to bit-identical logits compared with the in-memory model that was saved.
        for ids, g in zip(prompt_ids, out["greedy"]):
            gen = generate_check(ref, ids, NEW_TOKENS, special["pad_token_id"])
            if gen != g:
                raise SystemExit(f"{name}: generate() {gen} != argmax loop {g}")
        saved = model.state_dict()
        reloaded = load(tmp, arch, save_dtype).state_dict()
        for k, v in saved.items():
            if not torch.equal(v, reloaded[k]):
                raise SystemExit(f"{name}: {k} does not round-trip through save_pretrained")

        dst = os.path.join(out_root, name)
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        os.makedirs(dst)
        for fn in ("config.json", "model.safetensors", "generation_config.json"):
            shutil.copy(os.path.join(tmp, fn), os.path.join(dst, fn))
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(TOK_DIR, spec["tok"], fn), os.path.join(dst, fn))
        if spec.get("chat_template"):  # transformers 5's separate chat_template.jinja
            shutil.copy(os.path.join(REPO, "tests", "fixtures", "chat_templates", spec["chat_template"]),
                        os.path.join(dst, "chat_template.jinja"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    from safetensors.torch import save_file
    tensors = {f"logits_{i}": l.contiguous() for i, l in enumerate(out["logits"])}
    tensors.update({f"logits_bf16_{i}": l.contiguous() for i, l in enumerate(out["logits_bf16"])})
    save_file(tensors, os.path.join(dst, "reference.safetensors"), metadata={"generator": "tools/gen_model_fixtures.py"})
    save_hidden(ref, prompt_ids, dst)

    prompts = []
    for i, (t, ids) in enumerate(zip(texts, prompt_ids)):
        p = {"text": t, "ids": ids, "greedy": out["greedy"][i],
             "top2_gap": [round(x, 6) for x in out["gaps"][i]],
             "min_top2_gap": round(min(out["gaps"][i]), 6)}
        if out["logits_bf16"]:
            d = (out["logits_bf16"][i] - out["logits"][i]).abs()
            p["greedy_bf16_native"] = out["greedy_bf16"][i]
            p["max_abs_diff_bf16_native_vs_f32"] = round(float(d.max()), 6)
        prompts.append(p)
    rope = dict(cfg.rope_parameters) if getattr(cfg, "rope_parameters", None) else {}
    notes = (
        f"Tiny random-weight {arch} ({'tied' if spec['tied'] else 'untied'} lm_head, "
        f"{'bfloat16' if spec['dtype'] == 'bf16' else 'float32'} weights, tokenizer {spec['tok']}, "
        f"config.json style '{spec['style']}'), seed {seed}, weights N(0,{INIT_STD}^2), RMSNorm weights "
        f"1+{NORM_JITTER}*N(0,1). ids = tokenizer(text, add_special_tokens=True). "
        f"logits_<i> (reference.safetensors) = F32 [T, vocab] logits of a full forward over ids; "
        f"greedy = {NEW_TOKENS} pure-argmax steps (EOS ignored), top2_gap[k] = top1 - top2 logit at step k. "
        "Eager attention, transformers " + __import__("transformers").__version__ + ", torch " + torch.__version__ + ".")
    if spec["dtype"] == "bf16":
        notes += (" bf16: logits_<i> and greedy come from the bf16 checkpoint upcast with model.float() "
                  "(bf16 weights, f32 compute = graft's arithmetic); logits_bf16_<i> and greedy_bf16_native "
                  "are transformers' native bfloat16 forward (informational, loose tolerance).")
    ref_json = {
        "model": name, "generator": "tools/gen_model_fixtures.py", "arch": arch,
        "dtype": spec["dtype"], "tied_lm_head": spec["tied"], "tokenizer": spec["tok"], "seed": seed,
        "config_style": spec["style"], "vocab_size": vocab, "rope": rope,
        "new_tokens": NEW_TOKENS, "notes": notes, "prompts": prompts,
    }
    fixturelib.dump_json(ref_json, os.path.join(dst, "reference.json"))
    for fn in os.listdir(dst):
        os.chmod(os.path.join(dst, fn), 0o644)
    if verbose:
        print(f"{name}: seed {seed}, vocab {vocab}, prompt lens {[len(i) for i in prompt_ids]}, "
              f"min gaps {[p['min_top2_gap'] for p in prompts]}")
        for p in prompts:
            extra = ""
            if "greedy_bf16_native" in p:
                extra = (f" | native bf16 {'same' if p['greedy_bf16_native'] == p['greedy'] else 'DIFFERS'}, "
                         f"max|dlogit| {p['max_abs_diff_bf16_native_vs_f32']}")
            print(f"   greedy {p['greedy']}{extra}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="model names to (re)generate (default: all)")
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--hidden-only", action="store_true",
                    help="only (re)write reference_hidden.safetensors of the committed checkpoints")
    args = ap.parse_args()
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    torch.set_num_threads(1)  # tiny models: deterministic and fast enough single-threaded
    for spec in MODELS:
        for t in ("tokenizer.json", "tokenizer_config.json"):
            if not os.path.exists(os.path.join(TOK_DIR, spec["tok"], t)):
                raise SystemExit(f"missing {spec['tok']}/{t}; run tools/gen_tokenizer_fixtures.py first")
    names = set(args.only or [m["name"] for m in MODELS])
    unknown = names - {m["name"] for m in MODELS}
    if unknown:
        raise SystemExit(f"unknown models: {sorted(unknown)}")
    for spec in MODELS:
        if spec["name"] in names:
            hidden_only(spec, args.out) if args.hidden_only else make_one(spec, args.out)


if __name__ == "__main__":
    main()
