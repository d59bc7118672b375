"""What the fixture scripts in tools/ share: the versions they record, how they write JSON and
directories, the held-out prompt pool, greedy decoding with transformers, PEFT's saved adapter made
deterministic, and the llama.cpp greedy reference program.

Imported as `import fixturelib` (each script runs from the repository with tools/ first on sys.path).
Heavy modules (torch, transformers, peft) are imported inside the functions that need them, so a
script that uses none of them does not need them installed.
"""
import json
import os
import re
import shutil
import subprocess

# Never used for training: the demo adapters' reference prompts are picked from these (by the
# base model's smallest top1-top2 gap; all have a gap > 0.045 over 32 greedy steps).
HELDOUT_CANDIDATES = [
    "What is the tallest mountain in the world?",
    "How do I make a cup of tea?",
    "Why is the sky blue?",
    "How does the human heart work?",
    "How do I plan a birthday party?",
    "What is the best way to study for an exam?",
    "What are the benefits of regular exercise?",
    "What is the history of the internet?",
    "Describe the water cycle.",
]


def versions(packages):
    """{package: installed version or None}, recorded in each fixture's producer block."""
    import importlib.metadata as md
    out = {}
    for p in packages:
        try:
            out[p] = md.version(p)
        except md.PackageNotFoundError:
            out[p] = None
    return out


def write_json(path, obj, ensure_ascii=True):
    """JSON with indent 1 and a final newline; the parent directory is made if missing."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, ensure_ascii=ensure_ascii)
        f.write("\n")


def dump_json(obj, path):
    """Indented JSON, but with lists of numbers kept on one line (logits, token ids)."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    text = re.sub(r"\[\s*([-0-9.e, \n]+?)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(path, "w") as f:
        f.write(text + "\n")


def reset_dir(d):
    """An empty directory at d (what was there is removed)."""
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)


def normalize_peft_dir(d):
    """PEFT's save_pretrained output made deterministic: no generated README.md, target_modules
    (a set in PEFT) sorted, the config written with sorted keys."""
    readme = os.path.join(d, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    cpath = os.path.join(d, "adapter_config.json")
    with open(cpath) as f:
        cfg = json.load(f)
    if isinstance(cfg.get("target_modules"), list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    with open(cpath, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def cache_kw(model):
    """The forward() keyword of the KV cache: transformers >= 5.x renamed past_key_values= to cache=
    (a PEFT model is asked through its base model)."""
    import inspect
    fwd = model.get_base_model().forward if hasattr(model, "get_base_model") else model.forward
    return "cache" if "cache" in inspect.signature(fwd).parameters else "past_key_values"


def greedy(model, ids, n):
    """Pure argmax decoding with the KV cache: (new ids, per-step top1-top2 gaps, first logits)."""
    import torch
    with torch.no_grad():
        kw = cache_kw(model)
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=True)
        past, logits = out.past_key_values, out.logits[0, -1].float()
        first_logits = logits.clone()
        new, gaps = [], []
        for _ in range(n):
            top2 = torch.topk(logits, 2)
            nxt = int(top2.indices[0])
            new.append(nxt)
            gaps.append(float(top2.values[0] - top2.values[1]))
            out = model(input_ids=torch.tensor([[nxt]]), use_cache=True, **{kw: past})
            past, logits = out.past_key_values, out.logits[0, -1].float()
    return new, gaps, first_logits


def build_llama_cpp_greedy(root, llama_cpp, bin_dir, out_dir):
    """tools/llama_cpp_greedy.cpp compiled against a llama.cpp source tree's libllama (built with
    cmake -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF --target llama, libraries in bin_dir); the program's path."""
    exe = os.path.join(out_dir, "llama_cpp_greedy")
    subprocess.run(["g++", "-O2", "-std=c++17", os.path.join(root, "tools", "llama_cpp_greedy.cpp"),
                    "-I" + os.path.join(llama_cpp, "include"), "-I" + os.path.join(llama_cpp, "ggml", "include"),
                    "-L" + bin_dir, "-lllama", "-lggml", "-lggml-base", "-Wl,-rpath," + bin_dir, "-o", exe],
                   check=True)
    return exe
