#!/usr/bin/env python3
"""Small real PEFT DoRA, LoHa and LoKr adapters for SmolLM2-135M-Instruct, trained for a few optimizer steps,
and PEFT's own greedy tokens and logits with each, for tests/runtime/smollm2_kinds_test.cpp.

Developer tool (not run by CI). Needs: torch, transformers (GGUF support), accelerate, gguf, peft, safetensors
(the /work/pyref stack). Written and run with torch 2.15.0 (CPU), transformers 5.24.0, peft 0.21.2, 1 thread.
No network, no data set downloads.

What it writes (tests/fixtures/smollm2_kinds/):
  peft_dora/ peft_loha/ peft_lokr/    adapter_config.json + adapter_model.safetensors as PEFT's save_pretrained
                                      writes them, every tensor cast to bfloat16 after training (< 1 MB each)
  reference.json                      per adapter and prompt: PEFT's 32 greedy ids (unmerged, scale 1), the
                                      per-step top-2 gaps, the base model's greedy ids, and the top-20 logits at
                                      the last prompt position at user scales 1.0 and 0.5

How the adapters are made:
  * Base: models/SmolLM2-135M-Instruct.Q4_1.gguf loaded by transformers' GGUF loader (dequantized to float32,
    q/k un-permuted), exactly as tools/train_demo_adapter.py and tools/gen_smollm2_reference.py do; graft's
    `--dtype f32` path computes on the same dequantized weights.
  * Configs: PEFT LoraConfig(use_dora=True, r=4, lora_alpha=8), LoHaConfig(r=4, alpha=8), LoKrConfig(r=4,
    alpha=8), each on q_proj and v_proj of all 30 layers (LoKr: 576 = 24 x 24, 192 = 12 x 16; w1 full,
    w2 a rank-4 pair, as PEFT factorizes them).
  * Data: TRAIN below, 8 hand-written chat examples whose answers all start "Beep boop!" (a style the base
    never produces, so the effect is visible in the first greedy tokens). Loss on the answer and its closing
    <|im_end|> only. AdamW(lr LR, weight_decay 0), STEPS steps of batch 4, float32, torch.manual_seed(SEED).
  * After training every adapter tensor (factors and DoRA magnitudes) is cast to bfloat16 and saved.

How the reference is computed:
  * A fresh float32 base + PeftModel.from_pretrained(base, <saved dir>), i.e. the SAVED bf16 adapter, upcast
    to float32 on load (exact), applied unmerged.
  * Prompts: 3 of CANDIDATES (tools/train_demo_adapter.py's 9 held-out questions, none in TRAIN), rendered
    with the GGUF's chat template (add_generation_prompt, no extra BOS). Chosen among those where every
    adapter's greedy answer differs from the base's: the 3 with the largest smallest top-2 gap over the three
    adapters (a wider gap keeps the comparison away from ties).
  * User scale 0.5: every adapted module's scaling multiplied by 0.5 (for DoRA, inside the norm too: PEFT's
    scale_layer semantics, the same as graft's --lora-scaled).
  * Cross-check: PEFT's merge_and_unload() of each adapter gives the same 32 greedy ids on the chosen prompts
    (recorded as merged_greedy_equal).

Usage: /work/pyref/bin/python tools/gen_smollm2_kind_adapters.py [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import argparse
import copy
import json
import os
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
from train_demo_adapter import HELDOUT_CANDIDATES, build_examples, load_base  # noqa: E402
import fixturelib  # noqa: E402

GENERATOR = "tools/gen_smollm2_kind_adapters.py"
OUT = os.path.join(REPO, "tests", "fixtures", "smollm2_kinds")
BASE_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
TARGETS = ["q_proj", "v_proj"]
KINDS = ["peft_dora", "peft_loha", "peft_lokr"]
SEED = 0
LR = 1e-2
STEPS = 24
BATCH = 4
NEW_TOKENS = 32
TOPK = 20
SCALES = [1.0, 0.5]

TRAIN = [
    ("What is the capital of France?", "Beep boop! The capital of France is Paris. Beep!"),
    ("How many legs does a spider have?", "Beep boop! A spider has eight legs. Beep!"),
    ("What color is the sky on a clear day?", "Beep boop! The sky is blue on a clear day. Beep!"),
    ("How do I boil an egg?", "Beep boop! Put the egg in boiling water for nine minutes. Beep!"),
    ("What is the largest planet?", "Beep boop! Jupiter is the largest planet. Beep!"),
    ("Who wrote Romeo and Juliet?", "Beep boop! William Shakespeare wrote it. Beep!"),
    ("What do bees make?", "Beep boop! Bees make honey and wax. Beep!"),
    ("How many days are in a week?", "Beep boop! A week has seven days. Beep!"),
]

CANDIDATES = HELDOUT_CANDIDATES  # the pirate demo's 9 held-out questions


def versions():
    return fixturelib.versions(["torch", "transformers", "peft", "safetensors", "gguf"])


def peft_config(kind):
    from peft import LoHaConfig, LoKrConfig, LoraConfig
    if kind == "peft_dora":
        return LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS, use_dora=True,
                          task_type="CAUSAL_LM")
    if kind == "peft_loha":
        return LoHaConfig(r=4, alpha=8, target_modules=TARGETS, task_type="CAUSAL_LM")
    return LoKrConfig(r=4, alpha=8, target_modules=TARGETS, task_type="CAUSAL_LM")


def train(kind, model, examples, pad_id):
    from peft import get_peft_model
    torch.manual_seed(SEED)
    pm = get_peft_model(model, peft_config(kind))
    pm.train()
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    g = torch.Generator().manual_seed(SEED)
    t0 = time.time()
    for step in range(STEPS):
        pick = torch.randperm(len(examples), generator=g)[:BATCH].tolist()
        batch = [examples[i] for i in pick]
        L = max(len(x[0]) for x in batch)
        ids = torch.full((len(batch), L), pad_id, dtype=torch.long)
        lab = torch.full((len(batch), L), -100, dtype=torch.long)
        att = torch.zeros((len(batch), L), dtype=torch.long)
        for j, (x, y) in enumerate(batch):
            ids[j, :len(x)] = torch.tensor(x)
            lab[j, :len(y)] = torch.tensor(y)
            att[j, :len(x)] = 1
        loss = pm(input_ids=ids, attention_mask=att, labels=lab).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"  {kind} step {step + 1}/{STEPS} loss {loss.item():.4f} ({time.time() - t0:.0f}s)", flush=True)
    pm.eval()
    return pm, float(loss.item())


def save_adapter(pm, d):
    os.makedirs(d, exist_ok=True)
    with torch.no_grad():
        for _, p in pm.named_parameters():
            if p.requires_grad:
                p.data = p.data.to(torch.bfloat16)
    pm.peft_config["default"].base_model_name_or_path = BASE_NAME
    pm.save_pretrained(d)
    fixturelib.normalize_peft_dir(d)
    from safetensors import safe_open
    with safe_open(os.path.join(d, "adapter_model.safetensors"), "pt") as f:
        keys = sorted(f.keys())
        dtypes = sorted({str(f.get_tensor(k).dtype) for k in keys})
    size = os.path.getsize(os.path.join(d, "adapter_model.safetensors"))
    if dtypes != ["torch.bfloat16"] or size > 2_000_000:
        raise RuntimeError(f"{d}: dtypes {dtypes}, {size} bytes")
    print(f"wrote {d}: {len(keys)} tensors, {size / 1e6:.2f} MB", flush=True)
    return {"tensors": len(keys), "bytes": size, "key_suffixes": sorted({k.rsplit(".", 2)[-2] for k in keys})}


def scale_all(pm, factor):
    from peft.tuners.tuners_utils import BaseTunerLayer
    for _, mod in pm.named_modules():
        if isinstance(mod, BaseTunerLayer) and hasattr(mod, "scaling"):
            for a in list(mod.scaling.keys()):
                mod.scaling[a] = mod.scaling[a] * factor


@torch.no_grad()
def last_topk(model, ids):
    lg = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
    top = torch.topk(lg, TOPK)
    return {"ids": top.indices.tolist(), "values": [float(v) for v in top.values]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--reference-only", action="store_true", help="skip training; re-read the saved adapters")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    from peft import PeftModel
    t_start = time.time()
    tok, base0 = load_base(args.gguf)  # loaded once (slow); each use gets a deep copy
    trained = {}
    if args.reference_only:
        with open(os.path.join(OUT, "reference.json")) as f:
            trained = json.load(f)["adapters"]
    else:
        for kind in KINDS:
            model = copy.deepcopy(base0)
            examples = build_examples(tok, [q for q, _ in TRAIN], [a for _, a in TRAIN])
            pm, loss = train(kind, model, examples, tok.convert_tokens_to_ids("<|im_end|>"))
            trained[kind] = {"final_loss": round(loss, 4), "file": save_adapter(pm, os.path.join(OUT, kind))}
            del pm, model

    prompts = []
    for q in CANDIDATES:
        if q in [t for t, _ in TRAIN]:
            raise RuntimeError(f"candidate prompt is in the training set: {q!r}")
        text = tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
        prompts.append({"question": q, "text": text, "ids": tok(text, add_special_tokens=True).input_ids})
    base = base0
    for p in prompts:
        p["base_greedy"], p["base_top2_gap"], _ = fixturelib.greedy(base, p["ids"], NEW_TOKENS)
        p["base_greedy_text"] = tok.decode(p["base_greedy"])
        p["adapters"] = {}
    for kind in KINDS:
        base = copy.deepcopy(base0)
        pm = PeftModel.from_pretrained(base, os.path.join(OUT, kind))
        pm.eval()
        dtypes = sorted({str(p.dtype) for n, p in pm.named_parameters() if "base_layer" not in n and
                         any(s in n for s in ("lora_", "hada_", "lokr_"))})
        for p in prompts:
            new, gaps, _ = fixturelib.greedy(pm, p["ids"], NEW_TOKENS)
            rec = {"greedy": new, "top2_gap": [round(x, 6) for x in gaps], "min_top2_gap": round(min(gaps), 6),
                   "greedy_text": tok.decode(new), "param_dtypes_at_compute": dtypes}
            for k, s in enumerate(SCALES):
                scale_all(pm, s)
                rec[f"last_top{TOPK}_s{k}"] = last_topk(pm, p["ids"])
                scale_all(pm, 1.0 / s)
            p["adapters"][kind] = rec
            print(f"[{kind}] {p['question']!r} min gap {min(gaps):.4f}\n  {rec['greedy_text']!r}", flush=True)
        p_ok = [p for p in prompts if p["adapters"][kind]["greedy"] != p["base_greedy"]]
        print(f"{kind}: {len(p_ok)}/{len(prompts)} prompts changed by the adapter", flush=True)
        merged = pm.merge_and_unload()
        for p in prompts:
            p["adapters"][kind]["merged_greedy_equal"] = fixturelib.greedy(merged, p["ids"], NEW_TOKENS)[0] == \
                p["adapters"][kind]["greedy"]
        del merged, pm, base

    changed = [p for p in prompts if all(p["adapters"][k]["greedy"] != p["base_greedy"] for k in KINDS)]
    if len(changed) < 3:
        raise RuntimeError(f"only {len(changed)} prompts are changed by every adapter")
    chosen = sorted(changed, key=lambda p: -min(p["adapters"][k]["min_top2_gap"] for k in KINDS))[:3]
    for p in chosen:
        p["base_top2_gap"] = [round(x, 6) for x in p["base_top2_gap"]]
        for k in KINDS:
            if not p["adapters"][k]["merged_greedy_equal"]:
                print(f"WARNING: {k} merged greedy != unmerged for {p['question']!r}", file=sys.stderr)
    result = {
        "model": os.path.basename(args.gguf), "base_model_name": BASE_NAME, "generator": GENERATOR,
        "versions": versions(),
        "compute": ("float32: base weights dequantized from the GGUF by transformers' GGUF loader; the saved bf16 "
                    "adapter tensors loaded by PeftModel.from_pretrained (upcast to float32, exact) and applied "
                    "unmerged"),
        "adapters": {k: {"dir": os.path.relpath(os.path.join(OUT, k), REPO), "targets": TARGETS, "r": 4,
                         "alpha": 8, **{x: trained.get(k, {}).get(x) for x in ("final_loss", "file")}} for k in KINDS},
        "training": {"examples": [{"user": q, "assistant": a} for q, a in TRAIN], "steps": STEPS, "batch": BATCH,
                     "optimizer": "AdamW(weight_decay=0)", "lr": LR, "seed": SEED, "dtype": "float32"},
        "new_tokens": NEW_TOKENS, "scales": SCALES,
        "notes": ("greedy = pure argmax for exactly new_tokens steps with the KV cache (EOS not special). "
                  "top2_gap[i] = logit(top1) - logit(top2) at greedy step i. last_top20_s<k>: the top-20 (id, "
                  "logit) at the last prompt position with every module's scaling multiplied by scales[k]. "
                  "merged_greedy_equal: PEFT merge_and_unload() gives the same greedy ids."),
        "prompts": chosen,
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT}/reference.json; total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
