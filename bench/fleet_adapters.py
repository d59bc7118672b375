#!/usr/bin/env python3
"""Writes N distinct random rank-R PEFT LoRA adapters for SmolLM2-135M-Instruct (the fleet benchmark's input).

Each adapter is OUT/<prefix><i>/ with adapter_config.json (peft_type LORA) and adapter_model.safetensors, in the
layout of demo/adapters/pirate-peft: keys `base_model.model.model.layers.{l}.{self_attn|mlp}.{proj}.lora_A.weight`
[r, in] and `...lora_B.weight` [out, r], sorted, data in key order, header metadata {"format": "pt"}.

Values: A ~ N(0, 1/in) (the scale of PEFT's Kaiming init), B ~ N(0, b_std^2) with b_std 0.02 by default
(non-zero, small: SmolLM2's greedy text differs between adapters within ~20 tokens and stays sane);
lora_alpha = r, so the delta is B A x.

Pure Python (no numpy needed) and fast enough for 1000 adapters x 5M parameters: one pool of random values per
(factor, input width) is drawn once from the seed; every tensor of every adapter is a slice of its pool at an
offset drawn from a per-adapter generator (seed, i). The offset lists are checked to be distinct, so every
adapter's weights differ from every other's. Disk use: about 9.8 MB per adapter at rank 16, all seven targets, bf16.

Usage: bench/fleet_adapters.py OUT [--count 1000] [--rank 16] [--targets all|q_proj,v_proj|...]
       [--dtype bf16|f32] [--seed 0] [--prefix fleet-] [--b-std 0.02]
"""
import argparse
import array
import json
import math
import os
import random
import struct
import sys
import time

# SmolLM2-135M-Instruct (llama): hidden 576, intermediate 1536, 30 layers, 9 heads / 3 kv heads of 64.
HIDDEN, INTER, LAYERS, KV_DIM = 576, 1536, 30, 3 * 64
SHAPES = {  # module -> (block, out, in)
    "q_proj": ("self_attn", HIDDEN, HIDDEN),
    "k_proj": ("self_attn", KV_DIM, HIDDEN),
    "v_proj": ("self_attn", KV_DIM, HIDDEN),
    "o_proj": ("self_attn", HIDDEN, HIDDEN),
    "gate_proj": ("mlp", INTER, HIDDEN),
    "up_proj": ("mlp", INTER, HIDDEN),
    "down_proj": ("mlp", HIDDEN, INTER),
}
ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
POOL = 1 << 20  # values per pool: offsets range over ~1M positions per tensor


def to_bytes(values, dtype):
    """Little-endian f32 or bf16 (round to nearest even) bytes of a list of floats."""
    f = array.array("f", values)
    if sys.byteorder != "little":
        f.byteswap()
    if dtype == "f32":
        return f.tobytes()
    u = array.array("I", f.tobytes())
    u = array.array("I", [(x + 0x7FFF + ((x >> 16) & 1)) & 0xFFFFFFFF for x in u])
    raw = u.tobytes()
    out = bytearray(len(u) * 2)
    out[0::2] = raw[2::4]
    out[1::2] = raw[3::4]
    return bytes(out)


def pool(rng, std, dtype, n):
    return to_bytes([rng.gauss(0.0, std) for _ in range(n)], dtype)


def tensors(rank, targets):
    """[(key, (rows, cols), pool name)] sorted by key, as PEFT's safetensors writer orders them."""
    out = []
    for l in range(LAYERS):
        for m in targets:
            block, o, i = SHAPES[m]
            base = f"base_model.model.model.layers.{l}.{block}.{m}"
            out.append((base + ".lora_A.weight", (rank, i), f"A{i}"))
            out.append((base + ".lora_B.weight", (o, rank), "B"))
    out.sort(key=lambda t: t[0])
    return out


def header_bytes(specs, dtype):
    es = 2 if dtype == "bf16" else 4
    h = {"__metadata__": {"format": "pt"}}
    off = 0
    for key, (r, c), _ in specs:
        n = r * c * es
        h[key] = {"dtype": "BF16" if dtype == "bf16" else "F32", "shape": [r, c], "data_offsets": [off, off + n]}
        off += n
    j = json.dumps(h, separators=(",", ":")).encode()
    j += b" " * (-len(j) % 8)
    return struct.pack("<Q", len(j)) + j, off


def config(rank, targets):
    return {
        "alpha_pattern": {},
        "auto_mapping": None,
        "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "layers_pattern": None,
        "layers_to_transform": None,
        "lora_alpha": rank,
        "lora_dropout": 0.0,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": rank,
        "rank_pattern": {},
        "revision": None,
        "target_modules": sorted(targets),
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--targets", default="all",
                    help="comma list of q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj (short q,k,.. too); "
                         "'all' (default) or 'peft-default' (q_proj,v_proj)")
    ap.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prefix", default="fleet-")
    ap.add_argument("--b-std", type=float, default=0.02, help="standard deviation of lora_B's values")
    ap.add_argument("--start", type=int, default=0, help="first index (to extend an existing set)")
    a = ap.parse_args()

    if a.targets == "all":
        targets = ALL
    elif a.targets == "peft-default":
        targets = ["q_proj", "v_proj"]
    else:
        targets = []
        for t in a.targets.split(","):
            t = t.strip()
            t = t if t.endswith("_proj") else t + "_proj"
            if t not in SHAPES:
                ap.error(f"unknown target '{t}'; expected some of {','.join(ALL)}")
            if t not in targets:
                targets.append(t)
    if a.rank < 1 or a.count < 1:
        ap.error("--rank and --count must be positive")
    specs = tensors(a.rank, targets)
    head, data_len = header_bytes(specs, a.dtype)
    cfg = json.dumps(config(a.rank, targets), indent=2).encode() + b"\n"
    es = 2 if a.dtype == "bf16" else 4
    largest = max(r * c for _, (r, c), _ in specs)
    if largest * 2 > POOL:
        ap.error(f"rank {a.rank} is too large for the pool")

    t0 = time.perf_counter()
    rng = random.Random(a.seed)
    pools = {"B": pool(rng, a.b_std, a.dtype, POOL)}
    for i in sorted({c for _, (r, c), p in specs if p != "B"}):
        pools[f"A{i}"] = pool(rng, 1.0 / math.sqrt(i), a.dtype, POOL)
    views = {k: memoryview(v) for k, v in pools.items()}
    t_pool = time.perf_counter() - t0

    os.makedirs(a.out, exist_ok=True)
    seen = set()
    total = 0
    for idx in range(a.start, a.start + a.count):
        r = random.Random(f"{a.seed}:{idx}")
        while True:
            offs = tuple(r.randrange(POOL - rows * cols + 1) for _, (rows, cols), _ in specs)
            if offs not in seen:  # (practically never repeats; guarantees distinct adapters in this run)
                seen.add(offs)
                break
        d = os.path.join(a.out, f"{a.prefix}{idx}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "adapter_config.json"), "wb") as f:
            f.write(cfg)
        with open(os.path.join(d, "adapter_model.safetensors"), "wb") as f:
            f.write(head)
            for (_, (rows, cols), p), o in zip(specs, offs):
                f.write(views[p][o * es:(o + rows * cols) * es])
        total += len(cfg) + len(head) + data_len
        if a.count >= 50 and (idx - a.start + 1) % 100 == 0:
            print(f"  {idx - a.start + 1}/{a.count} adapters, {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    el = time.perf_counter() - t0
    params = data_len // es
    print(f"wrote {a.count} adapters ({a.prefix}{a.start}..{a.prefix}{a.start + a.count - 1}) to {a.out}: rank {a.rank}, "
          f"{','.join(targets)}, {a.dtype}, {params} parameters each; {total} bytes total "
          f"({total / 2**20:.1f} MiB) in {el:.1f} s (pools {t_pool:.1f} s)")


if __name__ == "__main__":
    main()
