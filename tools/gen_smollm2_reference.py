#!/usr/bin/env python3
"""Generate greedy-decoding references for the real SmolLM2-135M-Instruct Q4_1 GGUF.

Developer tool (not run by CI). Needs: torch, transformers (>= 4.41, GGUF support),
accelerate (transformers requires it to load GGUF files), gguf, numpy.

transformers dequantizes every GGUF tensor (Q4_1 / Q8_0 -> float32) and un-permutes the
llama.cpp Q/K row interleaving back to Hugging Face's "rotate_half" layout, so this is the
float32 reference of the *dequantized* weights.  graft's Q4_1 kernels may round activations
differently (e.g. Q8 activation quantization), which is why each greedy step records the
top-1/top-2 logit gap: a mismatch at a step with a tiny gap is a near-tie, not a bug.

Greedy decoding is done with a plain argmax loop over the model's logits (no logits
processors at all: no EOS stop, no min_new_tokens EOS suppression, no repetition penalty),
and is cross-checked against model.generate(do_sample=False) with EOS disabled.

Usage:
    python3 tools/gen_smollm2_reference.py [--gguf models/SmolLM2-135M-Instruct.Q4_1.gguf]
                                           [--out tests/fixtures/smollm2/greedy_reference.json]
"""
import argparse
import json
import os
import sys

import torch
import fixturelib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEW_TOKENS = 32
TOPK_DEBUG = 20


def prompts_for(tok):
    """(kind, text) pairs; the chat one is rendered with the GGUF's own chat template."""
    chat_messages = [{"role": "user", "content": "What is the capital of France?"}]
    chat_text = tok.apply_chat_template(chat_messages, tokenize=False, add_generation_prompt=True)
    # Prompts were chosen (from a handful of candidates) for comfortable top-1/top-2 margins
    # over all 32 greedy steps, so a Q4_1 engine with slightly different rounding still
    # reproduces them; see min_top2_gap in the output.
    return [
        ("plain", "Water boils at 100 degrees Celsius at sea level. When water is heated,"),
        ("chat", chat_text, chat_messages),
        ("code", "# Python function to reverse a string\ndef reverse_string(s):\n"),
        ("plain", "Photosynthesis is the process by which plants"),
    ]


@torch.no_grad()
def greedy_full_recompute(model, ids, n):
    """Same as greedy() but re-running the whole sequence each step (no KV cache)."""
    seq = list(ids)
    for _ in range(n):
        logits = model(input_ids=torch.tensor([seq])).logits[0, -1]
        seq.append(int(torch.argmax(logits)))
    return seq[len(ids):]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", default=os.path.join(REPO, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "fixtures", "smollm2", "greedy_reference.json"))
    ap.add_argument("--no-crosscheck", action="store_true", help="skip the generate()/no-cache cross-checks")
    args = ap.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    gguf_dir, gguf_name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_name, dtype=torch.float32)
    model.eval()
    cfg = model.config

    records = []
    for p in prompts_for(tok):
        kind, text = p[0], p[1]
        # The GGUF sets tokenizer.ggml.add_bos_token = false, so no BOS is prepended; the chat
        # template text already contains its <|im_start|> specials, which encode as single ids.
        ids = tok(text, add_special_tokens=True).input_ids
        new, gaps, first_logits = fixturelib.greedy(model, ids, NEW_TOKENS)
        if not args.no_crosscheck:
            nocache = greedy_full_recompute(model, ids, NEW_TOKENS)
            if nocache != new:
                print(f"WARNING [{kind}]: KV-cache greedy != full-recompute greedy\n  {new}\n  {nocache}", file=sys.stderr)
            gen = model.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=cfg.pad_token_id,
                temperature=None, top_p=None, top_k=None)
            gen_new = gen[0, len(ids):].tolist()
            if gen_new != new:
                print(f"WARNING [{kind}]: generate() != argmax loop\n  {new}\n  {gen_new}", file=sys.stderr)
        top = torch.topk(first_logits, TOPK_DEBUG)
        rec = {
            "kind": kind,
            "text": text,
            "ids": ids,
            "greedy": new,
            "top2_gap": [round(g, 6) for g in gaps],
            "min_top2_gap": round(min(gaps), 6),
            "greedy_text": tok.decode(new, skip_special_tokens=False),
            "prompt_last_top20": {"ids": top.indices.tolist(), "values": [round(float(v), 5) for v in top.values]},
        }
        if len(p) > 2:
            rec["messages"] = p[2]
        records.append(rec)
        print(f"[{kind}] {len(ids)} prompt ids, min gap {min(gaps):.4f}\n  prompt: {text!r}\n  greedy: {rec['greedy_text']!r}")

    rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": getattr(cfg, "rope_theta", None)}
    result = {
        "model": os.path.basename(args.gguf),
        "generator": "tools/gen_smollm2_reference.py",
        "transformers_version": __import__("transformers").__version__,
        "torch_version": torch.__version__,
        "compute": "float32 (weights dequantized from Q4_1/Q8_0 by transformers' GGUF loader)",
        "new_tokens": NEW_TOKENS,
        "notes": ("greedy = pure argmax for exactly new_tokens steps (EOS not treated specially). "
                  "top2_gap[i] = logit(top1) - logit(top2) at greedy step i. "
                  "No BOS is added (GGUF tokenizer.ggml.add_bos_token=false); ids are exactly what was fed. "
                  "prompt_last_top20 = top-20 (id, logit) at the last prompt position (prefill output). "
                  "The first prompt's prefill top-20 is also copied to first_prompt_last_logits_top20."),
        "config": {
            "hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
            "num_attention_heads": cfg.num_attention_heads, "num_key_value_heads": cfg.num_key_value_heads,
            "head_dim": getattr(cfg, "head_dim", None), "intermediate_size": cfg.intermediate_size,
            "vocab_size": cfg.vocab_size, "rms_norm_eps": cfg.rms_norm_eps,
            "rope_theta": rope.get("rope_theta"), "tie_word_embeddings": cfg.tie_word_embeddings,
            "bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
        },
        "first_prompt_last_logits_top20": records[0]["prompt_last_top20"],
        "prompts": records,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
