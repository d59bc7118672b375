#!/usr/bin/env python3
"""Generate reference fixtures for mlx / mlx-lm affine quantization (mx.quantize mode "affine") for graft's tests.

Developer tool (not run by CI); the outputs are committed under tests/fixtures/mlx_quant/ (README.md there
describes the algorithm bit-for-bit, every file's layout and the observed tolerances).
Needs: mlx + mlx-lm (CPU backend is enough; the fixtures were made on x86-64 Linux), numpy.

Writes tests/fixtures/mlx_quant/:

  cases.safetensors    mx.quantize / mx.dequantize on small inputs.  For every case
                       <dtype>_g<G>_b<B>_<kind>  (dtype f32|bf16|f16, G 32|64|128, B 4|8,
                       kind normal|outliers|constant|positive|negative|zero|tie):
                         <case>.w       input, in <dtype>, [4, 256] (normal) or [3, 128] (others)
                         <case>.q       U32 [R, C*B/32]   mx.quantize(w, G, B) packed codes
                         <case>.scales  <dtype> [R, C/G]
                         <case>.biases  <dtype> [R, C/G]
                         <case>.dq      <dtype> [R, C]    mx.dequantize(q, scales, biases, G, B)
  matmul.safetensors   mx.quantized_matmul(x, q, scales, biases, transpose=True) for
                       b4_g64_f32, b4_g64_bf16, b8_g32_f32, b8_g32_bf16 (suffix = dtype of w_src/scales/biases):
                         <cfg>.w_src [32, 256] (the weight that was quantized), .q, .scales, .biases,
                         <cfg>.x F32 [3, 256], <cfg>.y F32 [3, 32] = mx.quantized_matmul(x, ...) (mlx promotes
                         bf16 scales to F32, so this is an all-F32 computation), <cfg>.y_exact F32 [3, 32] = f32 of
                         x @ (scales*code + biases)^T evaluated exactly in float64;
                         bf16 configs also: <cfg>.x_bf16 = bf16(x), <cfg>.y_bf16 BF16 = mx.quantized_matmul in
                         bfloat16 (what mlx-lm does for a bf16 model; accumulates in bf16)
  models/<name>/       mlx_lm.convert output for llama_f32_q4g32, qwen2_bf16_q8g64, qwen3_f32_q4g64,
                       qwen3_moe_f32_q4g32 (experts stacked as switch_mlp, LoRASwitchLinear adapter)
                       (config.json, model.safetensors, generation_config.json as mlx_lm wrote them;
                       tokenizer.json + tokenizer_config.json copied from the base, since convert re-saves them
                       through transformers 5, which rewrites them), plus
                         adapters/adapters.safetensors + adapters/adapter_config.json   mlx-lm LoRA adapter (rank 4,
                             scale 2.0, all 7 projections of both layers), written by the real `mlx_lm lora` CLI
                             (iters 0: lora_a = mlx-lm's own seeded init), then lora_b := N(0, 0.05^2) (seeded) and
                             re-saved with mx.save_safetensors exactly as mlx-lm's trainer saves (no metadata)
                         reference.safetensors       logits_<i>: mlx_lm.load(dir) full forward over prompt i's ids
                         reference_lora.safetensors  logits_<i>: mlx_lm.load(dir, adapter_path=dir/adapters)
                         reference_f32act.safetensors / reference_lora_f32act.safetensors  (qwen2_bf16 only): same
                             with every floating parameter (scales, biases, norms, lora) cast to float32 after
                             loading, i.e. bf16-valued quantization params, F32 activations (graft's arithmetic)
                         reference.json   prompts (ids from tests/fixtures/models/<base>/reference.json), 16-step
                             greedy ids + top1-top2 gaps for every variant, activation dtypes, quantized tensors,
                             versions, notes
                       All logits are stored as F32 (bf16-activation logits upcast exactly).

Every written value is re-checked against the numpy reference implementation in this file
(quantize_ref / dequantize_ref / qmm_t_ref), which reproduces mlx 0.32.x's CPU kernels bit-for-bit;
`--verify-only` re-runs those checks on the committed files without mlx, and `--sweep N` runs N extra
rounds of random bit-exactness checks against mx.quantize / mx.dequantize / mx.quantized_matmul.

Usage: python3 tools/gen_mlx_quant_fixtures.py [--only cases|matmul|models ...] [--out DIR] [--keep-tmp]
                                              [--verify-only] [--sweep N]
All seeds are fixed; a rerun on CPU with the same versions (mlx 0.32.4, mlx-lm 0.32.2) reproduces the files.
Takes ~1.5 minutes on one CPU core.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import fixturelib  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(REPO, "tests", "fixtures", "mlx_quant")
MODELS_REL = os.path.join("tests", "fixtures", "models")
GENERATOR = "tools/gen_mlx_quant_fixtures.py"

DTYPES = ["f32", "bf16", "f16"]
GROUPS = [32, 64, 128]
BITS = [4, 8]
KINDS = ["normal", "outliers", "constant", "positive", "negative", "zero", "tie"]
MATMUL_CFGS = [("b4_g64_f32", 4, 64, "f32"), ("b4_g64_bf16", 4, 64, "bf16"),
               ("b8_g32_f32", 8, 32, "f32"), ("b8_g32_bf16", 8, 32, "bf16")]
# (fixture name, base model, bits, group size)
MODELS = [("llama_f32_q4g32", "llama_f32", 4, 32), ("qwen2_bf16_q8g64", "qwen2_bf16", 8, 64),
          ("qwen3_f32_q4g64", "qwen3_f32", 4, 64), ("qwen3_moe_f32_q4g32", "qwen3_moe_f32", 4, 32)]
# mlx-lm stacks a MoE layer's experts: <block>.switch_mlp.<proj> [E, out, in] from the Hub's per-expert
# <block>.experts.<e>.<name> (qwen3_moe: the same projection names; mixtral: w1 / w3 / w2).
SWITCH_NAMES = {"gate_proj": ("gate_proj", "w1"), "up_proj": ("up_proj", "w3"), "down_proj": ("down_proj", "w2")}
LORA_RANK = 4
LORA_SCALE = 2.0
LORA_B_STD = 0.05
NEW_TOKENS = 16
SEED = 4242

ST_DT = {"f32": "F32", "bf16": "BF16", "f16": "F16"}

# ----------------------------------------------------------------------------------------------
# numpy reference implementation (bit-exact with mlx 0.32.x CPU; see README.md)


def f32_to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (mlx _MLX_BFloat16(float)); NaN -> 0x7FC0."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + ((u >> 16) & 1) + 0x7FFF) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), r).astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(x, dt):
    """Round float32 values to dtype dt (f32 | bf16 | f16, RNE); returns float32 holding the rounded values."""
    x = np.asarray(x, dtype=np.float32)
    if dt == "f32":
        return x
    if dt == "f16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def quantize_ref(w, group_size, bits, dt="f32"):
    """mx.quantize(w, group_size, bits) (affine), mlx CPU kernel.  w: float32 array holding dt-representable values.
    Returns (q uint32 [..., C*bits/32], scales, biases) -- scales/biases as float32 holding dt values."""
    w = np.asarray(w, dtype=np.float32)
    shp = w.shape
    g = w.reshape(-1, group_size)
    n_bins = np.float32((1 << bits) - 1)
    eps = np.float32(1e-7)
    with np.errstate(all="ignore"):
        # std::max / std::min loops starting at -inf / +inf: a NaN element never wins (NaNs are ignored;
        # an all-NaN group gives max = -inf, min = +inf)
        nan = np.isnan(g)
        w_max = np.where(nan, np.float32(-np.inf), g).max(axis=1)
        w_min = np.where(nan, np.float32(np.inf), g).min(axis=1)
        mask = np.abs(w_min) > np.abs(w_max)
        scale = np.maximum((w_max - w_min) / n_bins, eps).astype(np.float32)
        scale = np.where(mask, scale, -scale).astype(np.float32)
        edge = np.where(mask, w_min, w_max).astype(np.float32)
        q0 = np.rint(edge / scale).astype(np.float32)
        nz = q0 != 0
        scale = np.where(nz, edge / q0, scale).astype(np.float32)
        bias = np.where(nz, edge, np.float32(0)).astype(np.float32)
        codes = np.rint((g - bias[:, None]) / scale[:, None]).astype(np.float32)
        codes = np.minimum(np.maximum(codes, np.float32(0)), n_bins)
    codes = np.where(np.isnan(codes), np.float32(0), codes).astype(np.uint32)
    per = 32 // bits
    c = codes.reshape(-1, per)
    shifts = np.arange(per, dtype=np.uint32) * np.uint32(bits)
    q = np.bitwise_or.reduce(c << shifts, axis=1).astype(np.uint32)
    q = q.reshape(shp[:-1] + (shp[-1] * bits // 32,))
    sshape = shp[:-1] + (shp[-1] // group_size,)
    return q, round_to(scale, dt).reshape(sshape), round_to(bias, dt).reshape(sshape)


def unpack_ref(q, bits):
    per = 32 // bits
    shifts = np.arange(per, dtype=np.uint32) * np.uint32(bits)
    c = (np.asarray(q, np.uint32)[..., None] >> shifts) & np.uint32((1 << bits) - 1)
    return c.reshape(q.shape[:-1] + (q.shape[-1] * per,))


def dequantize_ref(q, scales, biases, group_size, bits, dt="f32"):
    """mx.dequantize on CPU: t = round_dt(scale * code); w = round_dt(t + bias) (two roundings, no fma)."""
    c = unpack_ref(q, bits).astype(np.float32)
    shp = c.shape
    c = c.reshape(shp[:-1] + (shp[-1] // group_size, group_size))
    with np.errstate(all="ignore"):
        t = round_to(c * scales[..., None], dt)
        out = round_to(t + biases[..., None], dt)
    return out.reshape(shp)


def qmm_t_ref(x, q, scales, biases, group_size, bits, dt="f32"):
    """mx.quantized_matmul(x, q, scales, biases, transpose=True) on the x86-64 CPU backend (mlx _qmm_t, scalar):
    y[m, n] = sum over k = 0..K-1 IN ORDER of round_dt(x[m,k] * wdq[n,k]), each addition rounded to dt,
    accumulator starting at 0, no fma; wdq = dequantize_ref(...) (same two roundings)."""
    x = np.asarray(x, np.float32)
    M, K = x.shape
    wdq = dequantize_ref(q, scales, biases, group_size, bits, dt)      # [N, K]
    acc = np.zeros((M, wdq.shape[0]), np.float32)
    for k in range(K):
        acc = round_to(acc + round_to(x[:, k:k + 1] * wdq[None, :, k], dt), dt)
    return acc


def matmul_f64(x, q, scales, biases, group_size, bits):
    c = unpack_ref(q, bits).astype(np.float64)
    N, K = c.shape
    c = c.reshape(N, K // group_size, group_size)
    w = (c * scales.astype(np.float64)[..., None] + biases.astype(np.float64)[..., None]).reshape(N, K)
    return np.asarray(x, np.float64) @ w.T


# ----------------------------------------------------------------------------------------------
# minimal safetensors reader (numpy has no bfloat16: BF16 is returned as float32 values)

_NP = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "U32": np.uint32, "BF16": np.uint16}


def st_read(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    meta = hdr.pop("__metadata__", None)
    out, dts = {}, {}
    for k, v in hdr.items():
        a, b = v["data_offsets"]
        arr = np.frombuffer(data[a:b], dtype=_NP[v["dtype"]]).reshape(v["shape"])
        if v["dtype"] == "BF16":
            arr = bf16_bits_to_f32(arr)
        elif v["dtype"] == "F16":
            arr = arr.astype(np.float32)
        out[k] = arr
        dts[k] = v["dtype"]
    return out, dts, meta


def same_or_nan(a, b):
    """bitwise equal, except that any NaN matches any NaN (mlx's NaN bit patterns: f32 from the FPU, bf16 0x7FC0,
    f16 sign|0x7D00 -- not part of what the fixtures pin down)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind != "f":
        return a.tobytes() == b.tobytes()
    na, nb = np.isnan(a), np.isnan(b)
    return bool(np.array_equal(na, nb) and a[~na].tobytes() == b[~nb].tobytes())


def same_bits(a, b):
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.tobytes() == b.tobytes()


# ----------------------------------------------------------------------------------------------
# mlx helpers


def mx_mod():
    import mlx.core as mx
    return mx


def to_mx(x, dt):
    mx = mx_mod()
    x = np.asarray(x, np.float32)
    if dt == "bf16":
        return mx.array(f32_to_bf16_bits(x)).view(mx.bfloat16)
    a = mx.array(x)
    return a.astype(mx.float16) if dt == "f16" else a


def to_np(a):
    mx = mx_mod()
    if a.dtype == mx.bfloat16:
        return bf16_bits_to_f32(np.array(a.view(mx.uint16)))
    if a.dtype == mx.float16:
        return np.array(a).astype(np.float32)
    return np.array(a)


def mx_dt_name(a):
    mx = mx_mod()
    return {mx.float32: "f32", mx.bfloat16: "bf16", mx.float16: "f16"}[a.dtype]


def versions():
    return fixturelib.versions(["mlx", "mlx-lm", "transformers", "safetensors", "numpy"])


# ----------------------------------------------------------------------------------------------
# cases.safetensors


def case_input(kind, rng):
    """float32 values (rounded to the case dtype afterwards)."""
    if kind == "normal":
        return (rng.standard_normal((4, 256)) * 0.2).astype(np.float32)
    R, C = 3, 128
    if kind == "outliers":
        w = (rng.standard_normal((R, C)) * 0.02).astype(np.float32)
        for r in range(R):
            i, j = rng.choice(C, size=2, replace=False)
            w[r, i] = rng.uniform(5, 50)
            w[r, j] = -rng.uniform(5, 50)
        return w
    if kind == "constant":
        vals = [0.37, -1.25, 1e-3, -37.5, 3.0, 2.0 ** -10, -0.1, 7.0, 1e-7, -1234.5, 0.5, -2.0]
        w = np.zeros((R, C), np.float32)
        for i in range(R * C // 32):
            w.reshape(-1, 32)[i] = vals[i % len(vals)]
        return w
    if kind in ("positive", "negative"):
        off = np.array([[0.0], [1.0], [20.0]], np.float32)          # offset >> range on the last row
        w = (np.abs(rng.standard_normal((R, C))) + off).astype(np.float32)
        return w if kind == "positive" else -w
    if kind == "zero":
        w = (rng.standard_normal((R, C)) * 0.2).astype(np.float32)
        w[0] = 0.0
        w[1, :64] = -0.0
        w[2, :32] = 0.0
        w[2, 5] = 0.75
        return w
    if kind == "tie":                                                # max == -min exactly in every group
        w = (rng.standard_normal((R, C)) * 0.2).astype(np.float32)
        g = w.reshape(-1, 32)
        m = np.abs(g).max(axis=1) + 0.125
        g[:, 3] = m
        g[:, 17] = -m
        return w
    raise ValueError(kind)


def case_names():
    return [f"{dt}_g{G}_b{B}_{kind}" for dt in DTYPES for G in GROUPS for B in BITS for kind in KINDS]


def gen_cases(out):
    mx = mx_mod()
    arrays = {}
    for name in case_names():
        dt, g, b, kind = name.split("_")
        G, B = int(g[1:]), int(b[1:])
        rng = np.random.default_rng(SEED + zlib.crc32(f"{dt}_{kind}_{G}_{B}".encode()))
        w = round_to(case_input(kind, rng), dt)
        wm = to_mx(w, dt)
        q, s, bi = mx.quantize(wm, group_size=G, bits=B)
        dq = mx.dequantize(q, s, bi, group_size=G, bits=B)
        for a in (s, bi, dq):
            assert mx_dt_name(a) == dt
        arrays[f"{name}.w"] = wm
        arrays[f"{name}.q"] = q
        arrays[f"{name}.scales"] = s
        arrays[f"{name}.biases"] = bi
        arrays[f"{name}.dq"] = dq
    meta = {"generator": GENERATOR, "versions": json.dumps(versions()),
            "cases": "<dtype>_g<G>_b<B>_<kind>; tensors .w .q .scales .biases .dq; see README.md"}
    path = os.path.join(out, "cases.safetensors")
    mx.save_safetensors(path, dict(sorted(arrays.items())), metadata=meta)
    print(f"  cases.safetensors: {len(case_names())} cases, {os.path.getsize(path)} bytes")


def verify_cases(out):
    t, dts, _ = st_read(os.path.join(out, "cases.safetensors"))
    n = 0
    for name in case_names():
        dt, g, b, kind = name.split("_")
        G, B = int(g[1:]), int(b[1:])
        w = t[f"{name}.w"]
        assert dts[f"{name}.w"] == ST_DT[dt] == dts[f"{name}.scales"] == dts[f"{name}.biases"] == dts[f"{name}.dq"]
        assert dts[f"{name}.q"] == "U32"
        q, s, bi = quantize_ref(w, G, B, dt)
        dq = dequantize_ref(t[f"{name}.q"], t[f"{name}.scales"], t[f"{name}.biases"], G, B, dt)
        ok = (same_bits(q, t[f"{name}.q"]) and same_bits(s, t[f"{name}.scales"]) and
              same_bits(bi, t[f"{name}.biases"]) and same_bits(dq, t[f"{name}.dq"]))
        if not ok:
            raise RuntimeError(f"cases: {name} does not match the numpy reference")
        n += 1
    print(f"  cases.safetensors: {n} cases bit-exact vs quantize_ref/dequantize_ref")


# ----------------------------------------------------------------------------------------------
# matmul.safetensors


def gen_matmul(out):
    mx = mx_mod()
    arrays = {}
    for cfg, B, G, dt in MATMUL_CFGS:
        rng = np.random.default_rng(SEED + zlib.crc32(cfg.encode()))
        w = round_to((rng.standard_normal((32, 256)) * 0.2).astype(np.float32), dt)
        x = rng.standard_normal((3, 256)).astype(np.float32)
        q, s, bi = mx.quantize(to_mx(w, dt), group_size=G, bits=B)
        y = mx.quantized_matmul(mx.array(x), q, s, bi, transpose=True, group_size=G, bits=B)
        assert y.dtype == mx.float32
        y64 = matmul_f64(x, np.array(q), to_np(s), to_np(bi), G, B)
        arrays.update({f"{cfg}.w_src": to_mx(w, dt), f"{cfg}.q": q, f"{cfg}.scales": s, f"{cfg}.biases": bi,
                       f"{cfg}.x": mx.array(x), f"{cfg}.y": y})
        # float64 result rounded once to F32 (graft's safetensors reader has no F64; one rounding is
        # 6e-8 relative, far below any tolerance that compares against it)
        arrays[f"{cfg}.y_exact"] = mx.array(y64.astype(np.float32))
        if dt == "bf16":
            xb = to_mx(x, "bf16")
            yb = mx.quantized_matmul(xb, q, s, bi, transpose=True, group_size=G, bits=B)
            assert yb.dtype == mx.bfloat16
            arrays[f"{cfg}.x_bf16"] = xb
            arrays[f"{cfg}.y_bf16"] = yb
    path = os.path.join(out, "matmul.safetensors")
    write_mixed_safetensors(path, arrays, {"generator": GENERATOR, "versions": json.dumps(versions())})
    print(f"  matmul.safetensors: {os.path.getsize(path)} bytes")


def write_mixed_safetensors(path, arrays, metadata):
    """safetensors writer for mx arrays + numpy float64 arrays (sorted keys, 8-byte aligned header)."""
    mx = mx_mod()
    hdr, blobs, off = {}, [], 0
    for k in sorted(arrays):
        a = arrays[k]
        if isinstance(a, np.ndarray):
            assert a.dtype == np.float64
            dtype, raw, shape = "F64", np.ascontiguousarray(a).astype("<f8").tobytes(), list(a.shape)
        else:
            if a.dtype == mx.bfloat16:
                dtype, raw = "BF16", np.array(a.view(mx.uint16)).astype("<u2").tobytes()
            elif a.dtype == mx.float16:
                dtype, raw = "F16", np.array(a).astype("<f2").tobytes()
            elif a.dtype == mx.float32:
                dtype, raw = "F32", np.array(a).astype("<f4").tobytes()
            elif a.dtype == mx.uint32:
                dtype, raw = "U32", np.array(a).astype("<u4").tobytes()
            else:
                raise TypeError(a.dtype)
            shape = list(a.shape)
        hdr[k] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = {"__metadata__": metadata}
    h.update(hdr)
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)


def matmul_stats(t):
    """max |y - y_f64| and max |y - y_f64| / sum_k |x_k w_k| per config."""
    out = {}
    for cfg, B, G, dt in MATMUL_CFGS:
        x = t[f"{cfg}.x"].astype(np.float64)
        c = unpack_ref(t[f"{cfg}.q"], B).astype(np.float64).reshape(32, -1, G)
        wd = (c * t[f"{cfg}.scales"].astype(np.float64)[..., None] +
              t[f"{cfg}.biases"].astype(np.float64)[..., None]).reshape(32, -1)
        mag = np.abs(x) @ np.abs(wd).T
        y64 = t[f"{cfg}.y_exact"].astype(np.float64)
        e = np.abs(t[f"{cfg}.y"].astype(np.float64) - y64)
        r = {"max_abs_y_minus_f64": float(e.max()), "max_rel_to_sum_abs": float((e / mag).max()),
             "max_abs_y_f64": float(np.abs(y64).max())}
        if dt == "bf16":
            eb = np.abs(t[f"{cfg}.y_bf16"].astype(np.float64) - y64)
            r["max_abs_y_bf16_minus_f64"] = float(eb.max())
            r["max_rel_y_bf16_to_sum_abs"] = float((eb / mag).max())
        out[cfg] = r
    return out


def verify_matmul(out):
    t, dts, _ = st_read(os.path.join(out, "matmul.safetensors"))
    for cfg, B, G, dt in MATMUL_CFGS:
        q, s, bi = quantize_ref(t[f"{cfg}.w_src"], G, B, dt)
        assert same_bits(q, t[f"{cfg}.q"]) and same_bits(s, t[f"{cfg}.scales"]) and same_bits(bi, t[f"{cfg}.biases"]), cfg
        y = qmm_t_ref(t[f"{cfg}.x"], q, s, bi, G, B, "f32")
        assert same_bits(y, t[f"{cfg}.y"]), f"{cfg}: y is not the sequential f32 recipe"
        y64 = matmul_f64(t[f"{cfg}.x"], q, s, bi, G, B)
        assert np.array_equal(y64.astype(np.float32), t[f"{cfg}.y_exact"]), cfg
        if dt == "bf16":
            assert same_bits(round_to(t[f"{cfg}.x"], "bf16"), t[f"{cfg}.x_bf16"])
            yb = qmm_t_ref(t[f"{cfg}.x_bf16"], q, s, bi, G, B, "bf16")
            assert same_bits(yb, t[f"{cfg}.y_bf16"]), f"{cfg}: y_bf16 is not the sequential bf16 recipe"
    st = matmul_stats(t)
    print("  matmul.safetensors: bit-exact vs qmm_t_ref; |y - y_f64|:")
    for k, v in st.items():
        print("    ", k, {a: float(f"{b:.3g}") for a, b in v.items()})
    return st


# ----------------------------------------------------------------------------------------------
# quantized tiny models + LoRA adapters + reference logits


def cast_params_f32(model):
    mx = mx_mod()
    from mlx.utils import tree_map
    model.update(tree_map(lambda p: p.astype(mx.float32) if mx.issubdtype(p.dtype, mx.floating) else p,
                          model.parameters()))
    mx.eval(model.parameters())


def forward_logits(model, ids):
    mx = mx_mod()
    out = model(mx.array([ids]))[0]
    mx.eval(out)
    return out


def greedy(model, ids, n):
    mx = mx_mod()
    seq, toks, gaps = list(ids), [], []
    for _ in range(n):
        last = forward_logits(model, seq)[-1].astype(mx.float32)
        v = np.array(last).astype(np.float64)
        o = np.argsort(-v, kind="stable")
        toks.append(int(o[0]))
        gaps.append(round(float(v[o[0]] - v[o[1]]), 6))
        seq.append(int(o[0]))
    return toks, gaps


def run_cli(args, cwd):
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "mlx_lm"] + args, cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"mlx_lm {args[0]} failed:\n" + r.stdout[-3000:] + r.stderr[-3000:])
    return r.stdout


LORA_YAML = """model: base
train: true
fine_tune_type: lora
data: data
seed: {seed}
num_layers: -1
batch_size: 1
iters: 0
val_batches: 1
learning_rate: 1.0e-5
adapter_path: adapter
max_seq_length: 64
lora_parameters:
  rank: {rank}
  scale: {scale}
  dropout: 0.0
"""

TRAIN_TEXT = ["the quick brown fox jumps over the lazy dog", "hello world, this is a tiny training set"]


def make_lora(qdir, adir, seed, tmp):
    """Run the real `mlx_lm lora` CLI with iters 0 on the quantized model (writes adapter_config.json and
    adapters.safetensors with mlx-lm's own lora_a init and lora_b = 0), then set lora_b ~ N(0, 0.05^2) and
    re-save all tensors with mx.save_safetensors (as mlx-lm's trainer does)."""
    mx = mx_mod()
    work = os.path.join(tmp, "lora_" + os.path.basename(adir.rstrip("/")) + str(seed))
    os.makedirs(os.path.join(work, "data"))
    shutil.copytree(qdir, os.path.join(work, "base"))
    for split in ["train", "valid"]:
        with open(os.path.join(work, "data", f"{split}.jsonl"), "w") as f:
            for t in TRAIN_TEXT:
                f.write(json.dumps({"text": t}) + "\n")
    with open(os.path.join(work, "lora_config.yaml"), "w") as f:
        f.write(LORA_YAML.format(seed=seed, rank=LORA_RANK, scale=LORA_SCALE))
    run_cli(["lora", "--config", "lora_config.yaml"], work)
    src = os.path.join(work, "adapter")
    os.makedirs(adir, exist_ok=True)
    shutil.copy(os.path.join(src, "adapter_config.json"), adir)
    # (mx.save_safetensors writes the header keys sorted and the data blobs in its own hash-map order, whatever
    # order the dict has; the result is deterministic for a given set of names and shapes)
    w = mx.load(os.path.join(src, "adapters.safetensors"))
    rng = np.random.default_rng(seed)
    for k in sorted(w):
        if k.endswith(".lora_b"):
            assert float(mx.abs(w[k]).max()) == 0.0
            w[k] = mx.array((rng.standard_normal(w[k].shape) * LORA_B_STD).astype(np.float32))
    mx.save_safetensors(os.path.join(adir, "adapters.safetensors"), w)
    return sorted(k[: -len(".lora_a")] for k in w if k.endswith(".lora_a"))


def stack_experts(bt, bd):
    """The base's per-expert matrices also under mlx-lm's stacked switch_mlp names."""
    import re
    groups = {}
    for k in bt:
        m = re.fullmatch(r"(model\.layers\.\d+\.\w+)\.experts\.(\d+)\.(\w+)\.weight", k)
        if m:
            for proj, names in SWITCH_NAMES.items():
                if m.group(3) in names:
                    groups.setdefault(f"{m.group(1)}.switch_mlp.{proj}.weight", {})[int(m.group(2))] = k
    for stacked, by_e in groups.items():
        bt[stacked] = np.stack([bt[by_e[e]] for e in sorted(by_e)])
        bd[stacked] = bd[by_e[0]]


def check_quantized_weights(qdir, base, bits, G):
    """Every quantized tensor in the converted model == quantize_ref(base weight) bit-for-bit."""
    qt, qd, _ = st_read(os.path.join(qdir, "model.safetensors"))
    bt, bd, _ = st_read(os.path.join(REPO, MODELS_REL, base, "model.safetensors"))
    stack_experts(bt, bd)
    # per-module overrides (mlx-lm quantizes a MoE router at 8 bits, group 64)
    overrides = {k: v for k, v in json.load(open(os.path.join(qdir, "config.json"))).get("quantization", {}).items()
                 if isinstance(v, dict)}
    quantized, plain = [], []
    for k in sorted(qt):
        if k.endswith(".scales") or k.endswith(".biases") and k[:-7] + ".scales" in qt:
            continue
        if qd[k] == "U32":
            stem = k[: -len(".weight")]
            dt = {"F32": "f32", "BF16": "bf16", "F16": "f16"}[bd[k]]
            o = overrides.get(stem, {})
            q, s, b = quantize_ref(bt[k], o.get("group_size", G), o.get("bits", bits), dt)
            if not (same_bits(q, qt[k]) and same_bits(s, qt[stem + ".scales"]) and same_bits(b, qt[stem + ".biases"])):
                raise RuntimeError(f"{qdir}: {k} is not quantize_ref(base)")
            if qd[stem + ".scales"] != bd[k] or qd[stem + ".biases"] != bd[k]:
                raise RuntimeError(f"{k}: scales dtype {qd[stem + '.scales']} != weight dtype {bd[k]}")
            quantized.append(stem)
        else:
            if qd[k] != bd[k] or not same_bits(qt[k], bt[k]):
                raise RuntimeError(f"{qdir}: unquantized {k} differs from the base")
            plain.append(k)
    return quantized, plain


def gen_models(out, keep_tmp=False):
    mx = mx_mod()
    from mlx_lm import load
    tmp = tempfile.mkdtemp(prefix="graft_mlxq_")
    summary = {}
    try:
        for k, (name, base, bits, G) in enumerate(MODELS):
            print(f"  model {name}")
            d = os.path.join(out, "models", name)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            qtmp = os.path.join(tmp, name)
            run_cli(["convert", "--hf-path", os.path.join(REPO, MODELS_REL, base), "--mlx-path", qtmp, "-q",
                     "--q-bits", str(bits), "--q-group-size", str(G)], REPO)
            written = sorted(os.listdir(qtmp))
            for f in ["config.json", "model.safetensors", "generation_config.json"]:
                shutil.copy(os.path.join(qtmp, f), d)
            # tokenizer files: the base's, verbatim.  mlx_lm convert re-saves them through transformers
            # (5.x rewrites tokenizer_config.json and, for Qwen2Tokenizer, even tokenizer.json's normalizer and
            # pre-tokenizer regex), which would change tokenization vs the base's reference ids.
            tok_changed = []
            for f in ["tokenizer.json", "tokenizer_config.json"]:
                src = os.path.join(REPO, MODELS_REL, base, f)
                shutil.copy(src, d)
                with open(src, "rb") as a, open(os.path.join(qtmp, f), "rb") as b:
                    if a.read() != b.read():
                        tok_changed.append(f)
            quantized, plain = check_quantized_weights(d, base, bits, G)
            lora_modules = make_lora(d, os.path.join(d, "adapters"), SEED + 100 + k, tmp)

            bref = json.load(open(os.path.join(REPO, MODELS_REL, base, "reference.json")))
            bt, _, _ = st_read(os.path.join(REPO, MODELS_REL, base, "reference.safetensors"))
            prompts = [{"text": p["text"], "ids": p["ids"]} for p in bref["prompts"]]

            variants = [("", False, False), ("_lora", True, False)]
            if "bf16" in base:
                variants += [("_f32act", False, True), ("_lora_f32act", True, True)]
            act = {}
            for suffix, lora, f32act in variants:
                model, _ = load(d, adapter_path=os.path.join(d, "adapters") if lora else None)
                if f32act:
                    cast_params_f32(model)
                logits = {}
                for i, p in enumerate(prompts):
                    lg = forward_logits(model, p["ids"])
                    act[suffix] = mx_dt_name(lg)
                    logits[f"logits_{i}"] = lg.astype(mx.float32)
                    toks, gaps = greedy(model, p["ids"], NEW_TOKENS)
                    p["greedy" + suffix] = toks
                    p["top2_gap" + suffix] = gaps
                    p["min_top2_gap" + suffix] = min(gaps)
                    if suffix in ("", "_f32act"):
                        p["max_abs_diff_vs_unquantized_base" + suffix] = round(float(
                            np.abs(np.array(logits[f"logits_{i}"]) - bt[f"logits_{i}"]).max()), 6)
                mx.save_safetensors(os.path.join(d, f"reference{suffix}.safetensors"), logits,
                                    metadata={"format": "mlx"})
                if act[suffix] == "f32" and "switch_mlp" in json.dumps(quantized):
                    for p in prompts:  # mlx 0.32's gather_mm (the switch experts) runs in float32 only
                        p["max_abs_diff_vs_f64_forward" + suffix] = None
                elif act[suffix] == "f32":
                    # rounding noise of mlx's F32 forward: the same model with every quantized layer replaced by
                    # its mx.dequantize'd weight (mlx_lm.utils.dequantize_model; F32 dequant is exact in F64) and
                    # every parameter cast to float64, evaluated in float64 on the CPU
                    from mlx.utils import tree_map
                    from mlx_lm.utils import dequantize_model
                    model = dequantize_model(model)
                    model.update(tree_map(lambda a: a.astype(mx.float64), model.parameters()))
                    for i, p in enumerate(prompts):
                        lg = forward_logits(model, p["ids"])
                        assert lg.dtype == mx.float64
                        p["max_abs_diff_vs_f64_forward" + suffix] = float(
                            f"{float(mx.abs(lg - logits[f'logits_{i}'].astype(mx.float64)).max()):.3g}")
                del model
            if "bf16" in base:
                for pre in ["", "_lora"]:
                    a, _, _ = st_read(os.path.join(d, f"reference{pre}.safetensors"))
                    b, _, _ = st_read(os.path.join(d, f"reference{pre}_f32act.safetensors"))
                    for i, p in enumerate(prompts):
                        p[f"max_abs_diff{pre}_bf16act_vs_f32act"] = round(float(
                            np.abs(a[f"logits_{i}"] - b[f"logits_{i}"]).max()), 6)
            cfg = json.load(open(os.path.join(d, "config.json")))
            ref = {
                "model": name, "generator": GENERATOR, "base": os.path.join(MODELS_REL, base),
                "convert_cmd": f"python -m mlx_lm convert --hf-path {os.path.join(MODELS_REL, base)} "
                               f"--mlx-path <tmp> -q --q-bits {bits} --q-group-size {G}",
                "quantization": cfg.get("quantization"),
                "files_written_by_convert": written,
                "files_copied": ["config.json", "model.safetensors", "generation_config.json"],
                "tokenizer_files": ("tokenizer.json + tokenizer_config.json copied verbatim from the base model; "
                                    "the ones mlx_lm convert wrote differ for: " + (", ".join(tok_changed) or "none")
                                    + " (re-saved through transformers " + versions()["transformers"] + ")"),
                "quantized_modules": quantized,
                "unquantized_tensors": plain,
                "tied_lm_head": bool(cfg.get("tie_word_embeddings", False)),
                "activation_dtype": {("reference" + s + ".safetensors"): v for s, v in act.items()},
                "lora": {"adapter_dir": "adapters", "rank": LORA_RANK, "scale": LORA_SCALE,
                         "seed": SEED + 100 + k, "lora_b_std": LORA_B_STD, "modules": lora_modules,
                         "producer": "python -m mlx_lm lora --config lora_config.yaml (iters 0, num_layers -1, "
                                     "rank 4, scale 2.0, dropout 0) then lora_b := N(0, 0.05^2) from "
                                     "numpy default_rng(seed) in sorted key order, F32; lora_a is mlx-lm's init "
                                     "U(-1/sqrt(in), 1/sqrt(in)) under mx.random.seed(seed)",
                         "forward": "y = quantized_linear(x) + (scale * ((x @ lora_a) @ lora_b)).astype(x.dtype)"},
                "new_tokens": NEW_TOKENS,
                "versions": versions(),
                "notes": (
                    "logits_<i> (reference*.safetensors, F32 [T, vocab]) = full forward of mlx_lm.load(dir[, "
                    "adapter_path]) over prompt i's ids (ids copied from the base's reference.json); greedy = "
                    "16 pure-argmax steps, each a full re-forward without KV cache (EOS ignored); top2_gap = "
                    "top1 - top2 logit. The embedding and lm_head are quantized too (QuantizedEmbedding: row = "
                    "mx.dequantize of that row; tied lm_head = quantized_matmul with the embedding's q/scales/"
                    "biases). Activations are computed in the dtype of the unquantized params / scales: F32 for "
                    "the f32 bases, BF16 for the bf16 base (every op incl. the quantized matmul accumulation "
                    "rounds to bf16); *_f32act files cast every floating parameter to F32 after loading "
                    "(values unchanged, bf16-exact), giving F32 activations = graft's arithmetic. "
                    "max_abs_diff_vs_unquantized_base* compare with the base's HF float32 reference logits; "
                    "max_abs_diff_vs_f64_forward* (F32-activation variants) compare with the same mlx model after "
                    "mlx_lm.utils.dequantize_model with every parameter cast to float64 and run in float64: the "
                    "rounding error of mlx's F32 forward, i.e. the scale of a sound tolerance for graft's F32 "
                    "forward (allow a few times this)."),
                "prompts": prompts,
            }
            fixturelib.write_json(os.path.join(d, "reference.json"), ref)
            summary[name] = ref
    finally:
        if keep_tmp:
            print("  tmp dir kept:", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return summary


def verify_models(out):
    for name, base, bits, G in MODELS:
        d = os.path.join(out, "models", name)
        quantized, _ = check_quantized_weights(d, base, bits, G)
        ref = json.load(open(os.path.join(d, "reference.json")))
        assert ref["quantized_modules"] == quantized
        print(f"  {name}: {len(quantized)} quantized modules == quantize_ref(base); min top2 gaps:",
              {k: min(p[k] for p in ref["prompts"]) for k in ref["prompts"][0] if k.startswith("min_top2_gap")})


# ----------------------------------------------------------------------------------------------
# random sweep


def sweep(rounds):
    mx = mx_mod()
    rng = np.random.default_rng(SEED + 7)
    n = bad = 0
    kinds = KINDS + ["tiny", "intgrid", "wide", "nonfinite"]
    for _ in range(rounds):
        for dt in DTYPES:
            for G in GROUPS:
                for B in BITS:
                    for kind in kinds:
                        if kind == "tiny":
                            w = (rng.standard_normal((8, 256)) * 10.0 ** rng.uniform(-9, -4)).astype(np.float32)
                        elif kind == "intgrid":
                            w = (rng.integers(-8, 8, size=(8, 256)) * 0.25).astype(np.float32)
                        elif kind == "wide":
                            w = (rng.standard_normal((8, 256)) * 10.0 ** rng.uniform(-3, 4, size=(8, 1))).astype(np.float32)
                        elif kind == "nonfinite":
                            w = (rng.standard_normal((8, 256))).astype(np.float32)
                            w.flat[rng.choice(w.size, 12, replace=False)] = np.nan
                            w.flat[rng.choice(w.size, 3, replace=False)] = np.inf
                            w.flat[rng.choice(w.size, 3, replace=False)] = -np.inf
                            w[7, :G] = np.nan
                        else:
                            w = case_input(kind, rng)
                        w = round_to(w, dt)
                        if kind != "nonfinite" and not np.all(np.isfinite(w)):
                            continue
                        q, s, b = mx.quantize(to_mx(w, dt), group_size=G, bits=B)
                        dq = mx.dequantize(q, s, b, group_size=G, bits=B)
                        qr, sr, br = quantize_ref(w, G, B, dt)
                        ok = (same_bits(np.array(q), qr) and same_or_nan(to_np(s), sr) and same_or_nan(to_np(b), br)
                              and same_or_nan(to_np(dq), dequantize_ref(qr, sr, br, G, B, dt)))
                        if kind == "normal" and G == 64:
                            x = round_to(rng.standard_normal((3, w.shape[-1])).astype(np.float32), dt)
                            y = mx.quantized_matmul(to_mx(x, dt), q, s, b, transpose=True, group_size=G, bits=B)
                            ok = ok and same_bits(to_np(y), qmm_t_ref(x, qr, sr, br, G, B, dt))
                        n += 1
                        if not ok:
                            bad += 1
                            print("    MISMATCH", dt, G, B, kind)
    print(f"  sweep: {n} random inputs, {bad} mismatches vs mx.quantize/dequantize/quantized_matmul")
    if bad:
        raise RuntimeError("sweep found mismatches")


# ----------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="*", choices=["cases", "matmul", "models"])
    ap.add_argument("--out", default=OUT_DIR)
    ap.add_argument("--keep-tmp", action="store_true")
    ap.add_argument("--verify-only", action="store_true")
    ap.add_argument("--sweep", type=int, default=0)
    ap.add_argument("--models", nargs="*", help="with --only models: only these (default: every MODELS entry)")
    args = ap.parse_args()
    os.chdir(REPO)
    parts = args.only or ["cases", "matmul", "models"]
    if args.models:
        MODELS[:] = [m for m in MODELS if m[0] in args.models]
    os.makedirs(args.out, exist_ok=True)
    if not args.verify_only:
        mx = mx_mod()
        mx.set_default_device(mx.cpu)
        if args.sweep:
            sweep(args.sweep)
        if "cases" in parts:
            gen_cases(args.out)
        if "matmul" in parts:
            gen_matmul(args.out)
        if "models" in parts:
            gen_models(args.out, args.keep_tmp)
    if "cases" in parts:
        verify_cases(args.out)
    if "matmul" in parts:
        verify_matmul(args.out)
    if "models" in parts:
        verify_models(args.out)


if __name__ == "__main__":
    main()
