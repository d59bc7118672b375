#!/usr/bin/env python3
"""Writes tests/fixtures/gguf/blocks.gguf: every GGUF block format graft reads, with the reference
dequantization next to it, for tests/core/gguf_blocks_test.cpp (bit-for-bit comparison).

For each format T the file holds
  T        [2, 512] blocks of format T, and
  T.ref    [2, 512] F32: gguf.quants.dequantize(T) of those exact bytes (the reference), and
  T.src    [2, 512] F32: for the formats gguf-py quantizes, the data it quantized (for
           tests/core/gguf_quantize_test.cpp: graft's quantizers must write T's bytes from it).
Formats gguf-py can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) are quantized by gguf.quants.quantize
from normal data with an all-zero block, a constant block and a block with one large outlier.
The K-quants and IQ4 formats have no quantizer in gguf-py (llama.cpp's C code only), so their blocks
are random bytes with finite f16 scales: every code, scale and min bit pattern occurs, which covers
the unpacking better than a quantizer's output would.

Needs `pip install gguf numpy` (the reference stack). Deterministic; rerun and commit the file if it
must change.
"""
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf", "blocks.gguf")
ROWS, COLS = 2, 512

QUANTIZABLE = [QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1]
RANDOM_BYTES = [QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ4_NL, QT.IQ4_XS]
# Byte offsets of the f16 fields (d, dmin) inside one block, per random-bytes format.
F16_FIELDS = {QT.Q2_K: [80, 82], QT.Q3_K: [108], QT.Q4_K: [0, 2], QT.Q5_K: [0, 2], QT.Q6_K: [208],
              QT.IQ4_NL: [0], QT.IQ4_XS: [0]}


def random_blocks(rng, qt):
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qt]
    n_blocks = ROWS * COLS // block_elems
    b = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for off in F16_FIELDS[qt]:
        # finite scales of either sign over a wide range (subnormals included)
        v = (rng.standard_normal(n_blocks) * np.exp2(rng.integers(-20, 4, n_blocks))).astype(np.float16)
        b[:, off:off + 2] = v.view(np.uint8).reshape(n_blocks, 2)
    return b.reshape(ROWS, -1)


def main() -> int:
    rng = np.random.default_rng(20261201)
    w = gguf.GGUFWriter(OUT, arch="graft-test")
    for qt in QUANTIZABLE + RANDOM_BYTES:
        if qt in QUANTIZABLE:
            x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
            x[0, :32] = 0.0
            x[0, 32:64] = 0.75
            x[1, 100] = 40.0
            raw = gguf.quants.quantize(x, qt)
        else:
            raw = random_blocks(rng, qt)
        ref = gguf.quants.dequantize(raw, qt)
        assert ref.shape == (ROWS, COLS) and ref.dtype == np.float32 and np.isfinite(ref).all()
        w.add_tensor(qt.name, raw, raw_shape=raw.shape, raw_dtype=qt)
        w.add_tensor(qt.name + ".ref", ref)
        if qt in QUANTIZABLE:
            w.add_tensor(qt.name + ".src", x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {OUT} ({os.path.getsize(OUT)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
