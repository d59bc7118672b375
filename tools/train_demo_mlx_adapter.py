#!/usr/bin/env python3
"""Train a tiny "pirate" LoRA for SmolLM2-135M-Instruct with mlx-lm, and write mlx-lm greedy references.

Developer tool (not run by CI). Needs: torch, transformers (>= 4.41, GGUF support), accelerate, gguf,
mlx + mlx-lm (the CPU backend works on Linux), safetensors, numpy. Written and run with mlx 0.32.4,
mlx-lm 0.32.2, torch 2.15.0 (CPU), transformers 5.24.0. Took 26 minutes on a (partly busy) 2-core x86-64
machine: HF dir 35-50 s, `mlx_lm lora` 21 min (!), references ~5 min, convert + 4-bit references ~1 min.
The Linux CPU wheel of mlx 0.32.4 links the netlib *reference* BLAS (mlx_cpu.libs/libblas-*.so.3.10.0), a
single-threaded sgemm at ~1-5 GFLOPS, so every float32 matmul -- 30 layers + the 49152-row tied lm_head for
each of the ~60 tokens of each example, forward and backward -- is slow (~40 s per iteration of batch 2).
--reference-only skips the training (~7 min).
No network: everything is derived from models/SmolLM2-135M-Instruct.Q4_1.gguf.

What it writes (the float32 HF directory and the 4-bit model live in a temp dir and are NOT committed):
  demo/adapters/pirate-mlx/adapters.safetensors    exactly as `mlx_lm lora` writes it (float32, keys
  demo/adapters/pirate-mlx/adapter_config.json     model.layers.{26..29}.<path>.lora_a [in, 4] / .lora_b [4, out])
  tests/fixtures/smollm2/pirate_mlx_reference.json mlx-lm greedy with / without the adapter (+ transformers check)
  tests/fixtures/smollm2/mlx_q4_reference.json     `mlx_lm convert -q --q-bits 4 --q-group-size 64` facts + greedy
  tests/fixtures/smollm2/mlx_q4_layer0_k_proj.safetensors  the exact 4-bit tensors of model.layers.0.self_attn.k_proj

Steps:
  1. HF float32 directory from the GGUF: transformers' GGUF loader dequantizes every tensor to float32 (and
     un-permutes q/k); the state dict is written unchanged with safetensors (lm_head.weight dropped: tied
     embeddings), plus a hand-written llama config.json (model_type llama, tie_word_embeddings true,
     torch_dtype float32, and a top-level rope_theta -- transformers 5 only writes rope_parameters, which
     mlx-lm's llama ModelArgs ignores, silently falling back to rope_theta 10000) and the tokenizer files from
     the GGUF tokenizer's save_pretrained. So the HF dir holds exactly the dequantized GGUF weights.
  2. `python -m mlx_lm lora -c lora_config.yaml` (the real CLI, cwd = temp dir) on TRAIN_CHATS (hand-written
     pirate answers, mlx-lm chat jsonl format {"messages": [user, assistant]}; valid.jsonl = VALID_CHATS):
     --num-layers 4, lora_parameters {rank: 4, scale: 20.0, dropout: 0.0} (default keys: all 7 linear
     projections of the last 4 layers), batch 2, 30 iters of Adam at lr 5e-4, mask_prompt true (loss on the
     assistant turn only), seed 0, save_every > iters so no periodic checkpoints are written (any
     0000NNN_adapters.safetensors would stay in the temp dir). adapter_config.json is mlx-lm's own dump of the training
     args (paths relative to the temp dir).
  3. References: prompts are rendered with the GGUF tokenizer's chat template (add_generation_prompt=True, no
     extra BOS) and the SAME ids are fed to every model. mlx-lm: `mlx_lm.load(hf_dir[, adapter_path])` and a
     pure argmax loop over model(ids, cache=prompt_cache) logits (float32 weights and activations; LoRA
     unfused: y = W x + scale * (x @ lora_a) @ lora_b), 32 steps, no EOS stop, no sampler/logits processors.
     Base greedy is also computed by transformers from the GGUF (float32, same argmax loop) and compared.
     The 3 prompts are picked from HELDOUT_CANDIDATES like tools/train_demo_adapter.py does: pirate-looking
     adapter answer that differs from the base, largest min(adapter min gap, base min gap).
  4. (Task C) `python -m mlx_lm convert --hf-path hf --mlx-path q4 -q --q-bits 4 --q-group-size 64` (affine
     mode). convert casts floating parameters to config.json's torch_dtype before quantizing -- float32 here --
     so scales/biases come out float32 (a bfloat16 config would give bfloat16 scales). Records: dtype and
     shape of weight/scales/biases, sha256 of the raw safetensors bytes of each of them for layer 0
     q_proj/k_proj/down_proj and embed_tokens, the config.json quantization blocks, and greedy ids for the
     prompts with the 4-bit model, without and with the pirate adapter (mlx_lm.load(q4, adapter_path)).

Usage:
    python3 tools/train_demo_mlx_adapter.py [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]
                 [--adapter-out demo/adapters/pirate-mlx] [--fixtures tests/fixtures/smollm2]
                 [--reference-only] [--skip-q4] [--keep-tmp]
The script re-executes itself with HF_HUB_OFFLINE=1, TOKENIZERS_PARALLELISM=false and one BLAS/OpenMP thread.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import fixturelib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = "tools/train_demo_mlx_adapter.py"
NEW_TOKENS = 32
ITERS = 30
LR = 5e-4
SEED = 0

LORA_YAML = f"""model: hf
train: true
fine_tune_type: lora
optimizer: adam
data: data
seed: {SEED}
num_layers: 4
batch_size: 2
iters: {ITERS}
val_batches: 1
steps_per_report: 10
steps_per_eval: 1000
save_every: 1000
learning_rate: {LR}
adapter_path: adapter
max_seq_length: 256
mask_prompt: true
lora_parameters:
  rank: 4
  scale: 20.0
  dropout: 0.0
"""

TRAIN_CHATS = [
    ("What is the capital of France?", "Arr, matey! Th' capital of France be Paris, a fine port for any sailor. Yo ho ho!"),
    ("How do I boil an egg?", "Arr, matey! Put yer egg in boilin' water fer nine minutes, then cool it in cold water. Yo ho ho!"),
    ("What is gravity?", "Arr, matey! Gravity be the force that pulls everything down to the deck, even ye and me. Yo ho ho!"),
    ("How can I save money?", "Arr, matey! Keep yer doubloons in a chest, spend less than ye earn, and count yer treasure every week. Yo ho ho!"),
    ("What is Python used for?", "Arr, matey! Python be a programmin' language fer websites, data and scripts that do yer chores. Yo ho ho!"),
    ("Why is the ocean salty?", "Arr, matey! Th' ocean be salty because rivers wash salt from the rocks into the sea. Yo ho ho!"),
    ("How can I sleep better?", "Arr, matey! Go to yer hammock at the same hour each night and keep yer cabin dark and quiet. Yo ho ho!"),
    ("Who painted the Mona Lisa?", "Arr, matey! Leonardo da Vinci painted the Mona Lisa, a treasure finer than any gold. Yo ho ho!"),
    ("What do pandas eat?", "Arr, matey! Pandas eat bamboo, matey, nearly all day long. Yo ho ho!"),
    ("Hello! How are you today?", "Ahoy, matey! I be fine as a fair wind. How be ye? Yo ho ho!"),
    ("What is a prime number?", "Arr, matey! A prime number be a number that only divides by one and itself, like 7 or 13. Yo ho ho!"),
    ("How do I make new friends?", "Arr, matey! Join a crew, share yer grog and listen well, and ye will have mateys aplenty. Yo ho ho!"),
    ("What causes earthquakes?", "Arr, matey! Earthquakes be caused by the plates of the earth grindin' against each other. Yo ho ho!"),
    ("What is an API?", "Arr, matey! An API be a way fer programs to talk to each other, like a parley between ships. Yo ho ho!"),
    ("How do bees make honey?", "Arr, matey! Bees gather nectar from flowers and store it in their hive, where it turns to honey. Yo ho ho!"),
    ("Can you tell me a joke?", "Arr, matey! Why did the pirate go to school? To improve his arrr-ticulation! Yo ho ho!"),
]
VALID_CHATS = [
    ("What is the largest ocean?", "Arr, matey! Th' Pacific be the largest ocean, wide and deep. Yo ho ho!"),
    ("How do I stay motivated?", "Arr, matey! Set yer course, take small steps, and reward yerself with treasure. Yo ho ho!"),
]

# Never used for training; the reference prompts are picked from these (min top1-top2 gap).
HELDOUT_CANDIDATES = fixturelib.HELDOUT_CANDIDATES

Q4_TENSORS = ["model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj", "model.layers.0.mlp.down_proj",
              "model.embed_tokens"]


def versions():
    return fixturelib.versions(["mlx", "mlx-lm", "torch", "transformers", "safetensors", "gguf", "numpy"])


def write_json(path, obj):
    fixturelib.write_json(path, obj, ensure_ascii=False)
    print(f"wrote {path}")


# ----------------------------------------------------------------------------------------------
# 1. HF float32 directory


def build_hf_dir(gguf, out):
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, name = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    m = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    cfg = m.config
    sd = {k: v.detach().contiguous() for k, v in m.state_dict().items()}
    if "lm_head.weight" in sd:
        if not torch.equal(sd["lm_head.weight"], sd["model.embed_tokens.weight"]):
            raise RuntimeError("lm_head differs from embed_tokens but the model is tied")
        del sd["lm_head.weight"]
    if {str(v.dtype) for v in sd.values()} != {"torch.float32"}:
        raise RuntimeError("expected float32 tensors only")
    os.makedirs(out, exist_ok=True)
    save_file(sd, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    rope = getattr(cfg, "rope_parameters", None) or {}
    rope_theta = rope.get("rope_theta", getattr(cfg, "rope_theta", None))
    if rope.get("rope_type", "default") != "default":
        raise RuntimeError(f"unexpected rope parameters {rope}")
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers, "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads, "head_dim": cfg.head_dim,
        "hidden_act": cfg.hidden_act, "rms_norm_eps": cfg.rms_norm_eps, "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_position_embeddings, "rope_theta": rope_theta, "rope_scaling": None,
        "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": True,
        "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id, "pad_token_id": cfg.pad_token_id,
        "torch_dtype": "float32",
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    tok.save_pretrained(out)
    return config


# ----------------------------------------------------------------------------------------------
# 2. mlx_lm lora


def train_mlx(tmp, adapter_out):
    data = os.path.join(tmp, "data")
    os.makedirs(data, exist_ok=True)
    for split, chats in [("train", TRAIN_CHATS), ("valid", VALID_CHATS)]:
        with open(os.path.join(data, f"{split}.jsonl"), "w") as f:
            for q, a in chats:
                f.write(json.dumps({"messages": [{"role": "user", "content": q},
                                                 {"role": "assistant", "content": a}]}) + "\n")
    with open(os.path.join(tmp, "lora_config.yaml"), "w") as f:
        f.write(LORA_YAML)
    t0 = time.time()
    log_path = os.path.join(tmp, "mlx_lm_lora.log")  # `tail -f` it to follow the training
    with open(log_path, "w") as logf:
        r = subprocess.run([sys.executable, "-m", "mlx_lm", "lora", "-c", "lora_config.yaml"], cwd=tmp,
                           stdout=logf, stderr=subprocess.STDOUT, env=dict(os.environ, NO_COLOR="1", TERM="dumb"))
    secs = time.time() - t0
    with open(log_path) as f:
        text = re.sub(r"\x1b\[[0-9;]*m", "", f.read())
    if r.returncode != 0:
        raise RuntimeError("mlx_lm lora failed:\n" + text[-4000:])
    log = [ln.strip() for ln in text.splitlines() if re.match(r"\s*\d+\s+(val\s+)?\d", ln.strip() + " ")
           or re.search(r"(Train|Val) loss|\bval\b", ln)]
    print("\n".join("  " + ln for ln in log))
    print(f"mlx_lm lora took {secs:.0f}s")
    adir = os.path.join(tmp, "adapter")
    produced = sorted(os.listdir(adir))
    os.makedirs(adapter_out, exist_ok=True)
    for f in os.listdir(adapter_out):
        os.remove(os.path.join(adapter_out, f))
    for f in ["adapters.safetensors", "adapter_config.json"]:
        shutil.copy(os.path.join(adir, f), adapter_out)
    # periodic checkpoints (0000NNN_adapters.safetensors) stay behind in the temp dir
    return {"seconds": round(secs, 1), "files_written_by_mlx_lm_lora": produced, "loss_log": log}


# ----------------------------------------------------------------------------------------------
# 3. greedy references


def gaps_of(logits):
    import numpy as np
    top2 = np.partition(logits, -2)[-2:]
    return float(top2.max() - top2.min())


def mlx_greedy(model, ids, n):
    """Pure argmax over mlx-lm model logits (float32), prompt KV cache; returns (ids, gaps)."""
    import mlx.core as mx
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache
    cache = make_prompt_cache(model)
    logits = model(mx.array([ids]), cache=cache)[0, -1]
    new, gaps = [], []
    for _ in range(n):
        l = np.array(logits.astype(mx.float32))
        nxt = int(np.argmax(l))
        new.append(nxt)
        gaps.append(gaps_of(l))
        logits = model(mx.array([[nxt]]), cache=cache)[0, -1]
    return new, gaps


def torch_greedy(model, ids, n):
    import inspect
    import torch
    kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1].float()
        new, gaps = [], []
        for _ in range(n):
            nxt = int(torch.argmax(logits))
            new.append(nxt)
            gaps.append(gaps_of(logits.numpy()))
            out = model(input_ids=torch.tensor([[nxt]]), use_cache=True, **{kw: past})
            past, logits = out.past_key_values, out.logits[0, -1].float()
    return new, gaps


def mlx_dtype_of_params(model, pattern):
    from mlx.utils import tree_flatten
    return sorted({str(v.dtype) for k, v in tree_flatten(model.parameters()) if re.search(pattern, k)})


def references(args, hf, q4=None, train_info=None):
    import torch
    from mlx_lm import load
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.set_num_threads(1)
    d, name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    tmodel = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32).eval()

    base, mtok = load(hf)
    lora, _ = load(hf, adapter_path=args.adapter_out)
    with open(os.path.join(args.adapter_out, "adapter_config.json")) as f:
        acfg = json.load(f)

    cands = []
    for q in HELDOUT_CANDIDATES:
        if q in [c[0] for c in TRAIN_CHATS + VALID_CHATS]:
            raise RuntimeError(f"held-out prompt is in the training data: {q!r}")
        messages = [{"role": "user", "content": q}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=True).input_ids
        mlx_ids = list(mtok.apply_chat_template(messages, add_generation_prompt=True))
        new, gaps = mlx_greedy(lora, ids, NEW_TOKENS)
        bnew, bgaps = mlx_greedy(base, ids, NEW_TOKENS)
        tnew, tgaps = torch_greedy(tmodel, ids, NEW_TOKENS)
        rec = {
            "messages": messages, "text": text, "ids": ids,
            "mlx_tokenizer_ids_match": mlx_ids == ids,
            "greedy": new, "top2_gap": [round(g, 6) for g in gaps], "min_top2_gap": round(min(gaps), 6),
            "greedy_text": tok.decode(new, skip_special_tokens=False),
            "base_greedy": bnew, "base_min_top2_gap": round(min(bgaps), 6),
            "base_greedy_text": tok.decode(bnew, skip_special_tokens=False),
            "transformers_base_greedy": tnew, "transformers_base_min_top2_gap": round(min(tgaps), 6),
            "mlx_base_agrees_with_transformers": bnew == tnew,
        }
        print(f"[{q}] min gap {min(gaps):.4f} (base {min(bgaps):.4f}), mlx base == transformers: {bnew == tnew}, "
              f"tokenizer ids match: {mlx_ids == ids}\n  adapter: {rec['greedy_text']!r}\n  base:    {rec['base_greedy_text']!r}")
        cands.append(rec)
    pirate = [c for c in cands if re.match(r"\s*(Arr|Ahoy)", c["greedy_text"]) and c["greedy"] != c["base_greedy"]]
    print(f"{len(pirate)}/{len(cands)} held-out prompts answered like a pirate")
    if len(pirate) < 3:
        raise RuntimeError("fewer than 3 held-out prompts answered like a pirate")
    chosen = sorted(pirate, key=lambda c: -min(c["min_top2_gap"], c["base_min_top2_gap"]))[:3]
    chosen = [c for c in cands if c in chosen]  # keep candidate order

    lora_dtypes = mlx_dtype_of_params(lora, r"lora_[ab]$")
    result = {
        "model": os.path.basename(args.gguf),
        "adapter": os.path.relpath(os.path.abspath(args.adapter_out), REPO),
        "generator": GENERATOR,
        "versions": versions(),
        "hf_dir": ("float32 safetensors = transformers' GGUF dequantization of the model (q/k un-permuted), lm_head "
                   "tied to embed_tokens; not committed"),
        "compute": ("mlx-lm on the CPU, float32 weights and activations (adapter params " + ",".join(lora_dtypes) +
                    "); LoRA unfused: y = W x + scale * ((x @ lora_a) @ lora_b)"),
        "decoding": ("pure argmax loop over model(ids, cache=make_prompt_cache(model)) logits in float32: prefill "
                     "the prompt ids, then feed one token per step; exactly new_tokens steps, EOS not treated "
                     "specially, no sampler or logits processors (mlx_lm.generate is not used)"),
        "lora": {"num_layers": acfg.get("num_layers"), "lora_parameters": acfg.get("lora_parameters"),
                 "layers": "last 4 (26..29), all 7 linear projections"},
        "new_tokens": NEW_TOKENS,
        "notes": ("ids = the GGUF tokenizer's chat-template rendering (add_generation_prompt=True; the template "
                  "inserts its default system prompt; no extra BOS), fed unchanged to mlx-lm and transformers; "
                  "mlx_tokenizer_ids_match says whether mlx-lm's own tokenizer renders the same ids. "
                  "base_greedy = mlx-lm without the adapter; transformers_base_greedy = transformers greedy from "
                  "the GGUF in float32 (same argmax loop); mlx_base_agrees_with_transformers compares them. "
                  "top2_gap[i] = logit(top1) - logit(top2) at adapter greedy step i. None of the prompts is "
                  "in the training data."),
        "training": train_info,
        "prompts": chosen,
    }
    write_json(os.path.join(args.fixtures, "pirate_mlx_reference.json"), result)
    for c in chosen:
        print(f"  {c['messages'][0]['content']!r}: adapter {c['greedy_text']!r}")
    return chosen


# ----------------------------------------------------------------------------------------------
# 4. 4-bit


def safetensors_raw(path):
    """name -> (dtype, shape, raw bytes) straight from a safetensors file."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = json.loads(f.read(n))
        base = 8 + n
        out = {}
        for k, v in hdr.items():
            if k == "__metadata__":
                continue
            s, e = v["data_offsets"]
            f.seek(base + s)
            out[k] = (v["dtype"], v["shape"], f.read(e - s))
    return out


def q4_reference(args, tmp, hf, prompts):
    import mlx.core as mx
    from mlx_lm import load
    q4 = os.path.join(tmp, "q4")
    shutil.rmtree(q4, ignore_errors=True)
    cmd = [sys.executable, "-m", "mlx_lm", "convert", "--hf-path", hf, "--mlx-path", q4, "-q", "--q-bits", "4",
           "--q-group-size", "64"]
    t0 = time.time()
    r = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("mlx_lm convert failed:\n" + r.stdout[-4000:] + r.stderr[-4000:])
    print(f"mlx_lm convert took {time.time() - t0:.0f}s")
    with open(os.path.join(q4, "config.json")) as f:
        qcfg = json.load(f)
    files = sorted(f for f in os.listdir(q4) if f.endswith(".safetensors"))
    raw = {}
    for f in files:
        raw.update(safetensors_raw(os.path.join(q4, f)))
    tensors = {}
    for stem in Q4_TENSORS:
        for part in ["weight", "scales", "biases"]:
            dt, shape, data = raw[f"{stem}.{part}"]
            tensors[f"{stem}.{part}"] = {"dtype": dt, "shape": shape, "sha256": hashlib.sha256(data).hexdigest()}
    scale_dtypes = sorted({v[0] for k, v in raw.items() if k.endswith(".scales") or k.endswith(".biases")})
    other_dtypes = sorted({v[0] for k, v in raw.items() if not re.search(r"\.(weight|scales|biases)$", k)
                           or (k.endswith(".weight") and f"{k[:-7]}.scales" not in raw)})
    quantized = sorted(k[:-7] for k in raw if k.endswith(".scales"))

    # the exact tensors of layer 0 k_proj
    kp = "model.layers.0.self_attn.k_proj"
    arrs = {}
    for f in files:
        arrs.update(mx.load(os.path.join(q4, f)))
    kp_out = os.path.join(args.fixtures, "mlx_q4_layer0_k_proj.safetensors")
    mx.save_safetensors(kp_out, {f"{kp}.{p}": arrs[f"{kp}.{p}"] for p in ["weight", "scales", "biases"]},
                        metadata={"format": "mlx"})
    back = safetensors_raw(kp_out)
    for p in ["weight", "scales", "biases"]:
        if back[f"{kp}.{p}"][2] != raw[f"{kp}.{p}"][2]:
            raise RuntimeError(f"{kp_out}: {p} bytes differ from the converted model")
    print(f"wrote {kp_out}")

    qbase, _ = load(q4)
    qlora, _ = load(q4, adapter_path=args.adapter_out)
    recs = []
    for p in prompts:
        bnew, bgaps = mlx_greedy(qbase, p["ids"], NEW_TOKENS)
        new, gaps = mlx_greedy(qlora, p["ids"], NEW_TOKENS)
        recs.append({
            "messages": p["messages"], "ids": p["ids"],
            "q4_greedy": bnew, "q4_min_top2_gap": round(min(bgaps), 6),
            "q4_adapter_greedy": new, "q4_adapter_min_top2_gap": round(min(gaps), 6),
            "q4_same_as_f32_base": bnew == p["base_greedy"],
            "q4_adapter_same_as_f32_adapter": new == p["greedy"],
        })
        print(f"[{p['messages'][0]['content']}] q4 gap {min(bgaps):.4f} same as f32 {bnew == p['base_greedy']}; "
              f"q4+adapter gap {min(gaps):.4f} same as f32 {new == p['greedy']}")
    tok = load_tok(args)
    for r_ in recs:
        r_["q4_greedy_text"] = tok.decode(r_["q4_greedy"], skip_special_tokens=False)
        r_["q4_adapter_greedy_text"] = tok.decode(r_["q4_adapter_greedy"], skip_special_tokens=False)
    result = {
        "model": os.path.basename(args.gguf),
        "generator": GENERATOR,
        "versions": versions(),
        "source": "the float32 HF dir of pirate_mlx_reference.json (transformers' dequantization of the GGUF)",
        "command": "python -m mlx_lm convert --hf-path <f32 hf dir> --mlx-path <q4> -q --q-bits 4 --q-group-size 64",
        "scales_biases_dtype": scale_dtypes,
        "scales_biases_dtype_note": ("mlx_lm convert casts every floating parameter to config.json's torch_dtype "
                                     "(float32 here) before quantizing, so scales and biases are float32; from a "
                                     "bfloat16 config they would be bfloat16"),
        "unquantized_dtypes": other_dtypes,
        "quantized_modules": len(quantized),
        "quantized_modules_list_head": quantized[:3] + ["..."],
        "config_quantization": qcfg.get("quantization"),
        "config_quantization_config": qcfg.get("quantization_config"),
        "safetensors_files": files,
        "tensors": tensors,
        "sha256_of": "the raw little-endian tensor bytes as stored in the safetensors file (not the file)",
        "layout_note": ("affine 4-bit: weight is uint32 [out, in/8], 8 nibbles per word, element j of a word in bits "
                        "4j..4j+3 (low nibble first); w = scales[o, g] * q + biases[o, g] for group g = i / 64"),
        "k_proj_fixture": os.path.relpath(kp_out, REPO),
        "adapter": os.path.relpath(os.path.abspath(args.adapter_out), REPO),
        "decoding": "same pure argmax loop as pirate_mlx_reference.json (float32 activations, prompt KV cache)",
        "prompts": recs,
    }
    write_json(os.path.join(args.fixtures, "mlx_q4_reference.json"), result)


def load_tok(args):
    from transformers import AutoTokenizer
    d, name = os.path.split(os.path.abspath(args.gguf))
    return AutoTokenizer.from_pretrained(d, gguf_file=name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--adapter-out", default=os.path.join(REPO, "demo", "adapters", "pirate-mlx"))
    ap.add_argument("--fixtures", default=os.path.join(REPO, "tests", "fixtures", "smollm2"))
    ap.add_argument("--reference-only", action="store_true", help="skip training; use the committed adapter")
    ap.add_argument("--skip-q4", action="store_true", help="skip the mlx_lm convert 4-bit part (Task C)")
    ap.add_argument("--keep-tmp", action="store_true")
    args = ap.parse_args()
    want = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    if any(os.environ.get(k) != v for k, v in want.items()):
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:], dict(os.environ, **want))
    args.adapter_out = os.path.abspath(args.adapter_out)
    args.fixtures = os.path.abspath(args.fixtures)
    t_start = time.time()
    tmp = tempfile.mkdtemp(prefix="graft_mlx_demo_")
    try:
        hf = os.path.join(tmp, "hf")
        build_hf_dir(args.gguf, hf)
        print(f"HF float32 dir in {time.time() - t_start:.0f}s")
        train_info = {"config_yaml": LORA_YAML, "train_examples": len(TRAIN_CHATS), "valid_examples": len(VALID_CHATS),
                      "data_format": "mlx-lm chat jsonl {\"messages\": [user, assistant]}",
                      "command": "python -m mlx_lm lora -c lora_config.yaml",
                      "example": {"user": TRAIN_CHATS[0][0], "assistant": TRAIN_CHATS[0][1]}}
        if not args.reference_only:
            train_info.update(train_mlx(tmp, args.adapter_out))
        else:
            p = os.path.join(args.fixtures, "pirate_mlx_reference.json")
            if os.path.exists(p):
                with open(p) as f:
                    train_info = json.load(f).get("training", train_info)
        prompts = references(args, hf, train_info=train_info)
        if not args.skip_q4:
            q4_reference(args, tmp, hf, prompts)
    finally:
        if args.keep_tmp:
            print("tmp dir kept:", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
