#!/usr/bin/env python3
"""Writes the small GGUF fixtures used by tests/io/gguf_test.cpp.

Uses the reference `gguf` Python package (llama.cpp's gguf-py: `pip install gguf numpy`) to write
  tests/fixtures/gguf/small.gguf   a GGUF v3 file with one metadata key of every value type and
                                   tensors of every type graft reads (F32, F16, BF16, Q8_0, Q4_0,
                                   Q4_1, I32), including 3-D and 4-D shapes,
  tests/fixtures/gguf/small.json   what a reader must find in it: metadata values, each tensor's
                                   GGML type, shape (outermost first, as numpy reports it) and its
                                   values converted to float32 (quantized tensors through
                                   gguf.quants.dequantize, the reference dequantizer), and its
                                   raw bytes in hex as the reference reader sees them.

Deterministic (fixed seed); rerun and commit both files if the fixture needs to change.
"""
import json
import os
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT_DIR = os.path.join(ROOT, "tests", "fixtures", "gguf")


def main() -> int:
    os.makedirs(OUT_DIR, exist_ok=True)
    gguf_path = os.path.join(OUT_DIR, "small.gguf")
    json_path = os.path.join(OUT_DIR, "small.json")
    rng = np.random.default_rng(1234)

    w = gguf.GGUFWriter(gguf_path, arch="graft-test")
    meta = {"general.architecture": {"type": "string", "value": "graft-test"}}  # added by GGUFWriter

    def kv(key, val, vtype, sub_type=None):
        w.add_key_value(key, val, vtype, sub_type=sub_type)
        if vtype == VT.ARRAY:
            meta[key] = {"type": "array", "elem_type": sub_type.name.lower(), "value": val}
        else:
            meta[key] = {"type": vtype.name.lower(), "value": val}

    kv("test.u8", 200, VT.UINT8)
    kv("test.i8", -100, VT.INT8)
    kv("test.u16", 60000, VT.UINT16)
    kv("test.i16", -30000, VT.INT16)
    kv("test.u32", 4000000000, VT.UINT32)
    kv("test.i32", -2000000000, VT.INT32)
    kv("test.u64", 18000000000000000000, VT.UINT64)
    kv("test.i64", -9000000000000000000, VT.INT64)
    kv("test.f32", 0.15625, VT.FLOAT32)  # exactly representable
    kv("test.f64", 2.718281828459045, VT.FLOAT64)
    kv("test.bool_true", True, VT.BOOL)
    kv("test.bool_false", False, VT.BOOL)
    kv("test.string", "héllo, wörld ✓ 你好", VT.STRING)
    kv("test.empty_string", "", VT.STRING)
    kv("test.arr_i32", [1, -2, 3, -4], VT.ARRAY, VT.INT32)
    kv("test.arr_u8", [0, 1, 255], VT.ARRAY, VT.UINT8)
    kv("test.arr_f32", [0.5, -1.25, 3.0], VT.ARRAY, VT.FLOAT32)
    kv("test.arr_bool", [True, False, True], VT.ARRAY, VT.BOOL)
    kv("test.arr_str", ["a", "", "Ġb c", "<|im_start|>"], VT.ARRAY, VT.STRING)

    tensors = []

    def plain(name, arr, qtype):
        if qtype == QT.BF16:
            data = gguf.quants.quantize(arr, QT.BF16)
            w.add_tensor(name, data, raw_dtype=QT.BF16)
            values = gguf.quants.dequantize(data, QT.BF16)
        else:
            w.add_tensor(name, arr)
            values = arr if arr.dtype.kind == "i" else arr.astype(np.float32)
        tensors.append({"name": name, "type": qtype.name, "shape": list(arr.shape),
                        "values": [x.item() for x in values.reshape(-1)]})

    def quant(name, arr, qtype):
        data = gguf.quants.quantize(arr, qtype)
        w.add_tensor(name, data, raw_dtype=qtype)
        values = gguf.quants.dequantize(data, qtype)
        assert values.shape == arr.shape, (values.shape, arr.shape)
        tensors.append({"name": name, "type": qtype.name, "shape": list(arr.shape),
                        "values": [float(x) for x in values.reshape(-1)]})

    plain("f32_2d", rng.standard_normal((3, 5)).astype(np.float32), QT.F32)
    plain("f32_4d", np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5), QT.F32)
    plain("f16_3d", rng.standard_normal((2, 3, 4)).astype(np.float16), QT.F16)
    plain("bf16_1d", rng.standard_normal((6,)).astype(np.float32), QT.BF16)
    plain("i32_1d", np.array([7, -8, 9, 2147483647, -2147483648], dtype=np.int32), QT.I32)
    quant("q8_0", (rng.standard_normal((2, 64)) * 3).astype(np.float32), QT.Q8_0)
    quant("q4_0", (rng.standard_normal((3, 32)) * 0.1).astype(np.float32), QT.Q4_0)
    quant("q4_1", (rng.standard_normal((2, 96)) + 0.5).astype(np.float32), QT.Q4_1)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # Cross-check with the reference reader before committing anything.
    r = gguf.GGUFReader(gguf_path)
    assert [t.name for t in r.tensors] == [t["name"] for t in tensors]
    for rt, t in zip(r.tensors, tensors):
        t["offset"] = int(rt.data_offset - r.data_offset)
        t["bytes_hex"] = np.ascontiguousarray(rt.data).tobytes().hex()

    with open(json_path, "w", encoding="utf-8") as f:
        json.dump({"version": 3, "alignment": 32, "data_offset": int(r.data_offset), "metadata": meta, "tensors": tensors}, f, indent=1,
                  ensure_ascii=False)
        f.write("\n")
    print(f"wrote {gguf_path} ({os.path.getsize(gguf_path)} bytes) and {json_path} "
          f"({os.path.getsize(json_path)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
