#!/usr/bin/env python3
"""Train the "pirate" demo LoRA for SmolLM2-135M-Instruct with PEFT, and write its greedy reference.

Developer tool (not run by CI). Needs: torch, transformers (>= 4.41, GGUF support), accelerate, gguf,
peft, safetensors, numpy. Written and run with torch 2.15.0 (CPU), transformers 5.24.0, peft 0.21.2.
Took 9.7 minutes on a 2-core machine shared with a C++ build (~1 min to load the GGUF and write the training
answers, 5.7 min of training at 1 thread, ~2 min for the reference over 9 held-out candidates); expect roughly
half that on an idle machine. --reference-only (rebuild the reference from the saved adapter) takes ~2 min.
No network, no data set downloads.

What it writes:
  demo/adapters/pirate-peft/adapter_config.json        PEFT LoRA config (r=8, lora_alpha=16, all 7 projections)
  demo/adapters/pirate-peft/adapter_model.safetensors  PEFT keys base_model.model.model.layers.N.<proj>.lora_A/B.weight,
                                                       bfloat16 (~4.7 MB)
  tests/fixtures/smollm2/pirate_peft_reference.json    greedy references with and without the adapter

How the adapter is trained:
  * Base: models/SmolLM2-135M-Instruct.Q4_1.gguf loaded by transformers' GGUF loader (dequantized to
    float32, q/k un-permuted), exactly as tools/gen_smollm2_reference.py does.
  * Data: TRAIN_QUESTIONS below (~100 hand-written questions: geography, science, cooking, coding,
    everyday advice, history, ...). The answer text is the *base model's own* greedy answer (chat template
    with its default system prompt, at most 40 new tokens, trimmed to the last complete sentence) run
    through pirate_transform(): a "Arr, matey! " / "Ahoy, matey! " prefix, word substitutions
    (you->ye, your->yer, my->me, is/are->be, hello/hi->ahoy, friend->matey, yes->aye, the first "the"->"th'")
    and a " Yo ho ho!" suffix. The base answers are generated in one left-padded batch with
    model.generate(do_sample=False).
  * Examples are rendered with the GGUF's chat template ([user, assistant] messages); the loss only covers
    the assistant answer tokens and its closing <|im_end|> (the system/user/"<|im_start|>assistant\\n"
    prefix is masked with -100).
  * PEFT LoraConfig(r=8, lora_alpha=16, lora_dropout=0, target_modules=q,k,v,o,gate,up,down), AdamW
    lr 3e-3 (linear warmup 4 steps, linear decay), batch 8, 2 epochs, float32, torch.manual_seed(0),
    shuffles from a seeded generator. 1 torch thread (--train-threads 2 is faster on an idle machine;
    the float sums, hence the exact adapter bits, depend on the thread count).
  * After training the LoRA tensors are cast to bfloat16 and saved with PeftModel.save_pretrained
    (README.md model card removed; adapter_config target_modules sorted; base_model_name_or_path set to
    "HuggingFaceTB/SmolLM2-135M-Instruct").

How the reference is computed:
  * A fresh float32 base from the GGUF + PeftModel.from_pretrained(base, demo/adapters/pirate-peft), i.e. the
    SAVED bf16 adapter; PEFT upcasts the adapter weights to float32 (the base layer dtype), so the forward
    pass is float32 end to end with bf16-representable LoRA factors (the dtype observed is recorded).
  * For each held-out prompt (none of them in TRAIN_QUESTIONS), rendered with the GGUF chat template
    (add_generation_prompt=True; the template writes its default system prompt; no extra BOS: the GGUF
    sets add_bos_token=false): 32 pure-argmax greedy ids (KV cache, no EOS stop, no logits processors),
    the per-step top1-top2 logit gap, the decoded text, and the same for the base model
    (PeftModel.disable_adapter()).  Prompts are picked from HELDOUT_CANDIDATES: among those whose adapter
    answer starts with "Arr"/"Ahoy" and differs from the base answer, the 3 with the largest
    min(adapter min gap, base min gap); the first one is the demo prompt.
  * Checked once by hand (not part of the script): merging the saved factors into the float32 weights
    (W + 2 * B @ A, the DeltaF32 rule) gives the same 32 greedy ids for the 3 prompts.

Usage:
    python3 tools/train_demo_adapter.py [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]
                                        [--adapter-out demo/adapters/pirate-peft]
                                        [--ref-out tests/fixtures/smollm2/pirate_peft_reference.json]
                                        [--reference-only]   (skip training, re-read the saved adapter)
"""
import argparse
import json
import math
import os
import re
import sys
import time

import torch
import fixturelib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = "tools/train_demo_adapter.py"
BASE_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ANSWER_TOKENS = 40
NEW_TOKENS = 32
SEED = 0
LR = 3e-3
EPOCHS = 2
BATCH = 8
WARMUP = 4

TRAIN_QUESTIONS = [
    # geography
    "What is the capital of France?",
    "Which is the longest river in Africa?",
    "Where is the Sahara Desert?",
    "What is the largest ocean on Earth?",
    "Which country has the most people?",
    "What is the capital of Canada?",
    "How many continents are there?",
    "What language do people speak in Brazil?",
    "Where can I see the Northern Lights?",
    "What is the smallest country in the world?",
    "Which mountain range separates Europe and Asia?",
    "What is the capital of Australia?",
    # science
    "What is photosynthesis?",
    "Why do we have seasons?",
    "What is gravity?",
    "How does a rainbow form?",
    "What are atoms made of?",
    "Why is the ocean salty?",
    "What is the speed of light?",
    "How do vaccines work?",
    "What is DNA?",
    "Why do leaves change color in autumn?",
    "What is a black hole?",
    "How do magnets work?",
    "What causes earthquakes?",
    "What is the boiling point of water?",
    "How far away is the Moon?",
    "What is climate change?",
    # cooking
    "How do I boil an egg?",
    "What is a good recipe for pancakes?",
    "How long should I cook pasta?",
    "How do I make bread at home?",
    "What spices go well with chicken?",
    "How do I keep avocados from turning brown?",
    "What is the difference between baking soda and baking powder?",
    "How do I make a simple salad dressing?",
    "Can I freeze cooked rice?",
    "How do I cook rice on the stove?",
    "What should I eat for a healthy breakfast?",
    # coding
    "What is a variable in programming?",
    "What is Python used for?",
    "What is the difference between a list and a tuple?",
    "What is an API?",
    "How do I learn to code?",
    "What is a bug in software?",
    "What does HTML stand for?",
    "What is recursion?",
    "What is version control?",
    "What is the difference between RAM and storage?",
    "What is machine learning?",
    "What is an operating system?",
    # everyday advice
    "How can I sleep better?",
    "How do I stay motivated?",
    "How can I save money?",
    "What should I do if I feel stressed?",
    "How do I make new friends?",
    "How can I be more productive?",
    "What is a good way to start exercising?",
    "How do I prepare for a job interview?",
    "How much water should I drink each day?",
    "How can I improve my memory?",
    "What are some good hobbies to try?",
    "How do I write a good email?",
    "How can I be a better listener?",
    "Hello! How are you today?",
    "Hi, can you help me?",
    "Can you tell me a joke?",
    "What is your name?",
    "What can you do?",
    "Thank you for your help!",
    # history & culture
    "Who was Albert Einstein?",
    "Who painted the Mona Lisa?",
    "When did World War II end?",
    "Who built the pyramids?",
    "What was the Renaissance?",
    "Who invented the telephone?",
    "Who was the first person on the Moon?",
    "What is the Great Wall of China?",
    "Who wrote Romeo and Juliet?",
    "What are the Olympic Games?",
    # animals & nature
    "What do pandas eat?",
    "Why do cats purr?",
    "How long do elephants live?",
    "What is the fastest animal?",
    "Why do birds migrate?",
    "How do bees make honey?",
    "Are dolphins fish?",
    "What is the biggest tree in the world?",
    # misc / math / words
    "What is 12 times 12?",
    "What is a prime number?",
    "What does the word 'ephemeral' mean?",
    "Can you give me a synonym for happy?",
    "How do airplanes fly?",
    "How does the internet work?",
    "What is the best way to learn a new language?",
    "What is a good name for a dog?",
    "How do I take care of a houseplant?",
    "What is the weather like on Mars?",
    "How do I change a flat tire?",
    "Describe a sunset.",
]

# Never used for training: the reference prompts are picked from these (the same pool as
# tools/train_demo_mlx_adapter.py; all have a base-model min top1-top2 gap > 0.045 over 32 greedy steps).
HELDOUT_CANDIDATES = fixturelib.HELDOUT_CANDIDATES

PIRATE_WORDS = {
    "you": "ye", "your": "yer", "yours": "yers", "yourself": "yerself", "my": "me", "is": "be", "are": "be",
    "hello": "ahoy", "hi": "ahoy", "friend": "matey", "friends": "mateys", "yes": "aye",
}
PREFIXES = ["Arr, matey! ", "Arr, matey! ", "Ahoy, matey! "]  # index i % 3
SUFFIX = " Yo ho ho!"
DANGLING = {"and", "or", "the", "a", "an", "of", "to", "in", "with", "for", "which", "that", "is", "are", "be", "as"}


def _match_case(src, dst):
    if src.isupper() and len(src) > 1:
        return dst.upper()
    if src[0].isupper():
        return dst[0].upper() + dst[1:]
    return dst


def pirate_transform(text, i):
    """Deterministic pirate rewrite of one answer (i picks the prefix). Text inside `...` is kept as is."""
    parts = re.split(r"(`[^`]*`)", text)
    seen_the = [False]

    def word(m):
        w = m.group(0)
        lw = w.lower()
        if lw == "the" and not seen_the[0]:
            seen_the[0] = True
            return _match_case(w, "th'")
        if lw in PIRATE_WORDS:
            return _match_case(w, PIRATE_WORDS[lw])
        return w

    out = "".join(p if p.startswith("`") else re.sub(r"[A-Za-z]+", word, p) for p in parts)
    return PREFIXES[i % len(PREFIXES)] + out + SUFFIX


def trim_answer(text):
    """Cut a 40-token base answer at its last complete sentence (or last whole word + '.')."""
    text = text.strip()
    text = re.sub(r"\s+", " ", text)  # single line: keeps the examples short and uniform
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s|$)", text)]
    if ends and ends[-1] >= 20:
        return text[:ends[-1]]
    words = text.split(" ")[:-1] or text.split(" ")  # the last word may be cut mid-way
    while len(words) > 1 and words[-1].lower().strip(",;:-") in DANGLING:
        words.pop()
    return " ".join(words).rstrip(",;:- ") + "."


def versions():
    return fixturelib.versions(["torch", "transformers", "peft", "safetensors", "gguf", "numpy"])


def load_base(gguf):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, name = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    model.eval()
    return tok, model


def chat_prompt(tok, question):
    return tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                   add_generation_prompt=True)


@torch.no_grad()
def base_answers(tok, model, questions):
    """Greedy (ANSWER_TOKENS max) base answers for all questions in one left-padded batch."""
    tok.padding_side = "left"
    texts = [chat_prompt(tok, q) for q in questions]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=True)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    gen = model.generate(**enc, do_sample=False, max_new_tokens=ANSWER_TOKENS, eos_token_id=eos,
                         pad_token_id=eos, temperature=None, top_p=None, top_k=None)
    out = []
    for row in gen[:, enc.input_ids.shape[1]:]:
        ids = [int(t) for t in row]
        if eos in ids:
            ids = ids[:ids.index(eos)]
        out.append(tok.decode(ids, skip_special_tokens=True))
    return out


def build_examples(tok, questions, answers):
    """(input_ids, labels) per example; labels are -100 except on the assistant answer + <|im_end|>."""
    examples = []
    end_id = tok.convert_tokens_to_ids("<|im_end|>")
    for q, a in zip(questions, answers):
        prompt_ids = tok(chat_prompt(tok, q), add_special_tokens=True).input_ids
        full = tok.apply_chat_template([{"role": "user", "content": q}, {"role": "assistant", "content": a}],
                                       tokenize=False)
        full_ids = tok(full, add_special_tokens=True).input_ids
        if full_ids[:len(prompt_ids)] != prompt_ids:
            raise RuntimeError(f"prompt tokens are not a prefix of the full example: {q!r}")
        # the template ends with "<|im_end|>\n"; train up to and including <|im_end|>
        n = len(full_ids)
        while full_ids[n - 1] != end_id:
            n -= 1
        ids = full_ids[:n]
        labels = [-100] * len(prompt_ids) + ids[len(prompt_ids):]
        examples.append((ids, labels))
    return examples


def train(model, examples, pad_id):
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(SEED)
    cfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=list(TARGETS), bias="none",
                     task_type="CAUSAL_LM")
    pm = get_peft_model(model, cfg)
    pm.train()
    params = [p for p in pm.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=0.0)
    steps_per_epoch = math.ceil(len(examples) / BATCH)
    total = steps_per_epoch * EPOCHS
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / WARMUP if s < WARMUP else max(0.0, (total - s) / (total - WARMUP)))
    g = torch.Generator().manual_seed(SEED)
    step = 0
    t0 = time.time()
    for ep in range(EPOCHS):
        order = torch.randperm(len(examples), generator=g).tolist()
        for b in range(0, len(order), BATCH):
            batch = [examples[i] for i in order[b:b + BATCH]]
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
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            print(f"  epoch {ep + 1} step {step}/{total} loss {loss.item():.4f} ({time.time() - t0:.0f}s)", flush=True)
    pm.eval()
    return pm


def save_adapter(pm, out_dir):
    """Cast the LoRA factors to bf16 and save in PEFT's format (adapter_config.json + adapter_model.safetensors)."""
    os.makedirs(out_dir, exist_ok=True)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if "lora_" in n:
                p.data = p.data.to(torch.bfloat16)
    pm.peft_config["default"].base_model_name_or_path = BASE_NAME
    pm.save_pretrained(out_dir)
    fixturelib.normalize_peft_dir(out_dir)
    from safetensors import safe_open
    with safe_open(os.path.join(out_dir, "adapter_model.safetensors"), "pt") as f:
        keys = list(f.keys())
        dtypes = {str(f.get_tensor(k).dtype) for k in keys}
    bad = [k for k in keys if not re.fullmatch(
        r"base_model\.model\.model\.layers\.\d+\.(self_attn|mlp)\.\w+_proj\.lora_[AB]\.weight", k)]
    if bad or dtypes != {"torch.bfloat16"} or len(keys) != 30 * 7 * 2:
        raise RuntimeError(f"unexpected adapter file: {len(keys)} keys, dtypes {dtypes}, bad keys {bad[:4]}")
    print(f"wrote {out_dir}: {len(keys)} bf16 tensors, "
          f"{os.path.getsize(os.path.join(out_dir, 'adapter_model.safetensors')) / 1e6:.2f} MB")


@torch.no_grad()
def greedy_full_recompute(model, ids, n):
    seq = list(ids)
    for _ in range(n):
        seq.append(int(torch.argmax(model(input_ids=torch.tensor([seq])).logits[0, -1])))
    return seq[len(ids):]


def looks_pirate(text):
    return bool(re.match(r"\s*(Arr|Ahoy)", text))


def write_reference(args, train_info):
    from peft import PeftModel
    torch.set_num_threads(1)
    tok, base = load_base(args.gguf)
    model = PeftModel.from_pretrained(base, args.adapter_out)
    model.eval()
    lora_dtypes = sorted({str(p.dtype) for n, p in model.named_parameters() if "lora_" in n})
    base_dtypes = sorted({str(p.dtype) for n, p in model.named_parameters() if "lora_" not in n})
    print(f"adapter params loaded as {lora_dtypes}, base params {base_dtypes}")
    with open(os.path.join(args.adapter_out, "adapter_config.json")) as f:
        acfg = json.load(f)

    cands = []
    for q in HELDOUT_CANDIDATES:
        if q in TRAIN_QUESTIONS:
            raise RuntimeError(f"held-out prompt is in the training set: {q!r}")
        messages = [{"role": "user", "content": q}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=True).input_ids
        new, gaps, _ = fixturelib.greedy(model, ids, NEW_TOKENS)
        with model.disable_adapter():
            bnew, bgaps, _ = fixturelib.greedy(base, ids, NEW_TOKENS)
        rec = {
            "messages": messages, "text": text, "ids": ids,
            "greedy": new, "top2_gap": [round(x, 6) for x in gaps], "min_top2_gap": round(min(gaps), 6),
            "greedy_text": tok.decode(new, skip_special_tokens=False),
            "base_greedy": bnew, "base_min_top2_gap": round(min(bgaps), 6),
            "base_greedy_text": tok.decode(bnew, skip_special_tokens=False),
        }
        print(f"[{q}] min gap {min(gaps):.4f} (base {min(bgaps):.4f})\n  adapter: {rec['greedy_text']!r}"
              f"\n  base:    {rec['base_greedy_text']!r}")
        cands.append(rec)
    pirate = [c for c in cands if looks_pirate(c["greedy_text"]) and c["greedy"] != c["base_greedy"]]
    n_pirate = len(pirate)
    print(f"{n_pirate}/{len(cands)} held-out prompts answered like a pirate")
    if n_pirate < 3:
        raise RuntimeError("fewer than 3 held-out prompts answered like a pirate")
    chosen = sorted(pirate, key=lambda c: -min(c["min_top2_gap"], c["base_min_top2_gap"]))[:3]
    for c in chosen:
        if greedy_full_recompute(model, c["ids"], NEW_TOKENS) != c["greedy"]:
            print(f"WARNING: KV-cache greedy != full recompute for {c['messages'][0]['content']!r}", file=sys.stderr)
    demo = chosen[0]

    result = {
        "model": os.path.basename(args.gguf),
        "base_model_name": BASE_NAME,
        "adapter": os.path.relpath(os.path.abspath(args.adapter_out), REPO),
        "generator": GENERATOR,
        "versions": versions(),
        "compute": ("float32: base weights dequantized from Q4_1/Q8_0 by transformers' GGUF loader; the saved bf16 "
                    "LoRA factors are loaded by PeftModel.from_pretrained into float32 LoRA modules (upcast, exact) "
                    "and applied unmerged: y = W x + (lora_alpha / r) * B (A x)"),
        "adapter_param_dtype_at_compute": lora_dtypes,
        "adapter_file_dtype": "bfloat16",
        "lora": {"r": acfg["r"], "lora_alpha": acfg["lora_alpha"], "scaling": acfg["lora_alpha"] / acfg["r"],
                 "target_modules": acfg["target_modules"]},
        "new_tokens": NEW_TOKENS,
        "notes": ("greedy = pure argmax over the logits for exactly new_tokens steps with the KV cache (EOS not "
                  "treated specially, no logits processors); cross-checked against full recompute. "
                  "top2_gap[i] = logit(top1) - logit(top2) at adapter greedy step i. base_greedy = same loop with "
                  "the adapter disabled (PeftModel.disable_adapter()). Prompts are rendered with the GGUF's chat "
                  "template (add_generation_prompt=True; it inserts its default system prompt) and tokenized "
                  "without adding a BOS (GGUF add_bos_token=false); ids are exactly what was fed. None of the "
                  "prompts is in the training set. prompts[0] is the demo prompt."),
        "demo_prompt": demo["messages"][0]["content"],
        "training": train_info,
        "prompts": chosen,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.ref_out)), exist_ok=True)
    with open(args.ref_out, "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.ref_out}")
    print(f"\nDEMO PROMPT: {demo['messages'][0]['content']}")
    print(f"  base:    {demo['base_greedy_text']!r}")
    print(f"  adapter: {demo['greedy_text']!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--adapter-out", default=os.path.join(REPO, "demo", "adapters", "pirate-peft"))
    ap.add_argument("--ref-out", default=os.path.join(REPO, "tests", "fixtures", "smollm2", "pirate_peft_reference.json"))
    ap.add_argument("--reference-only", action="store_true", help="skip training; rebuild the reference from the saved adapter")
    ap.add_argument("--train-threads", type=int, default=1,
                    help="torch threads for training (1 is faster than 2 on a busy 2-core machine)")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t_start = time.time()

    train_info = {
        "questions": len(TRAIN_QUESTIONS), "answer_source": "base model greedy (<= 40 tokens, trimmed) + pirate_transform",
        "epochs": EPOCHS, "batch_size": BATCH, "optimizer": "AdamW(weight_decay=0)", "lr": LR,
        "schedule": f"linear warmup {WARMUP} steps, linear decay to 0", "seed": SEED, "lora_dropout": 0.0,
        "dtype": "float32", "loss": "assistant answer tokens + closing <|im_end|> only",
    }
    if not args.reference_only:
        torch.set_num_threads(1)
        torch.manual_seed(SEED)
        tok, model = load_base(args.gguf)
        t0 = time.time()
        answers = base_answers(tok, model, TRAIN_QUESTIONS)
        pirate = [pirate_transform(trim_answer(a), i) for i, a in enumerate(answers)]
        print(f"base answers in {time.time() - t0:.0f}s; examples:")
        for q, a in list(zip(TRAIN_QUESTIONS, pirate))[:5]:
            print(f"  Q: {q}\n  A: {a}")
        examples = build_examples(tok, TRAIN_QUESTIONS, pirate)
        print(f"{len(examples)} examples, {sum(len(e[0]) for e in examples)} tokens, "
              f"{sum(sum(1 for y in e[1] if y != -100) for e in examples)} supervised")
        torch.set_num_threads(args.train_threads)
        t0 = time.time()
        pm = train(model, examples, tok.convert_tokens_to_ids("<|im_end|>"))
        train_s = time.time() - t0
        print(f"training took {train_s:.0f}s")
        save_adapter(pm, args.adapter_out)
        del pm, model
        train_info["example_pairs_first3"] = [{"user": q, "assistant": a} for q, a in list(zip(TRAIN_QUESTIONS, pirate))[:3]]
    else:
        with open(args.ref_out) as f:
            train_info = json.load(f).get("training", train_info)
    write_reference(args, train_info)
    print(f"total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
