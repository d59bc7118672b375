"""Distinct LoRA adapters made from the committed demo adapters, in pure Python, for the fleet tests.

Each helper writes only inside the directory it is given (created; it must not exist yet or be
empty) and returns that directory's path. The source is a committed adapter directory (PEFT or
mlx-lm); its config is copied unchanged and its safetensors file rewritten:

- scaled_copy: every lora_B tensor (PEFT `lora_B`, mlx `lora_b`) multiplied by a factor. With a
  power-of-two factor the product is exact in BF16/F16/F32, so the copy at scale 1 computes what
  the original does at scale `factor`.
- truncated_copy: the safetensors file cut short (its header intact, its data incomplete).
- wrong_shape_copy: one tensor's shape altered in the header, with as many elements as before (the
  file is well formed; the tensor does not fit the base model).

safetensors: an 8-byte little-endian header length, a JSON header
{name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data
(offsets relative to the end of the header).
"""
import json
import os
import shutil
import struct
import sys
from array import array

SAFETENSORS_NAMES = ("adapter_model.safetensors", "adapters.safetensors")

_scaled_cache = {}  # (source file, factor) -> the rewritten file's bytes


def safetensors_file(adapter_dir):
    """The adapter's weights file inside `adapter_dir`."""
    for name in SAFETENSORS_NAMES:
        p = os.path.join(adapter_dir, name)
        if os.path.isfile(p):
            return p
    raise FileNotFoundError(f"no safetensors weights file in {adapter_dir}")


def read_safetensors(path):
    """(header dict, data bytes) of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    return header, blob[8 + n:]


def encode_safetensors(header, data):
    """The bytes of a safetensors file; the header padded with spaces to a multiple of 8 bytes."""
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def _little_endian(a):
    if sys.byteorder != "little":
        a.byteswap()
    return a


def _scale_tensor(raw, dtype, factor):
    """The bytes of a tensor's data multiplied by `factor` (round to nearest even in the dtype)."""
    if dtype == "F32":
        a = _little_endian(array("f", raw))
        a = _little_endian(array("f", [x * factor for x in a]))
        return a.tobytes()
    if dtype == "BF16":
        # BF16 -> F32: the 16 bits become the high half of the F32 word (done with byte slicing).
        wide = bytearray(2 * len(raw))
        wide[2::4] = raw[0::2]
        wide[3::4] = raw[1::2]
        f = _little_endian(array("f", bytes(wide)))
        f = _little_endian(array("f", [x * factor for x in f]))
        bits = _little_endian(array("I", f.tobytes()))
        # F32 -> BF16, round to nearest even (the data holds no NaN).
        out = array("H", [((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF for b in bits])
        return _little_endian(out).tobytes()
    if dtype == "F16":
        n = len(raw) // 2
        vals = struct.unpack(f"<{n}e", raw)
        return struct.pack(f"<{n}e", *[x * factor for x in vals])
    raise ValueError(f"unsupported dtype {dtype} (F32, BF16, F16 are)")


def _is_lora_b(name):
    return "lora_B" in name or name.endswith(".lora_b") or ".lora_b." in name


def _prepare(dst):
    dst = os.path.abspath(dst)
    os.makedirs(dst, exist_ok=True)
    if os.listdir(dst):
        raise FileExistsError(f"{dst} is not empty")
    return dst


def _copy_config(src, dst):
    for name in os.listdir(src):
        p = os.path.join(src, name)
        if os.path.isfile(p) and name not in SAFETENSORS_NAMES:
            shutil.copyfile(p, os.path.join(dst, name))


def plain_copy(src, dst):
    """An identical copy of the adapter directory `src`."""
    dst = _prepare(dst)
    _copy_config(src, dst)
    st = safetensors_file(src)
    shutil.copyfile(st, os.path.join(dst, os.path.basename(st)))
    return dst


def scaled_bytes(src, factor):
    """The bytes of `src`'s safetensors file with every lora_B tensor multiplied by `factor`."""
    st = safetensors_file(src)
    key = (os.path.realpath(st), float(factor))
    if key not in _scaled_cache:
        header, data = read_safetensors(st)
        out = bytearray(data)
        scaled = 0
        for name, info in header.items():
            if name == "__metadata__" or not _is_lora_b(name):
                continue
            b, e = info["data_offsets"]
            out[b:e] = _scale_tensor(data[b:e], info["dtype"], factor)
            scaled += 1
        if scaled == 0:
            raise ValueError(f"{st} has no lora_B tensor")
        _scaled_cache[key] = encode_safetensors(header, bytes(out))
    return _scaled_cache[key]


def scaled_copy(src, dst, factor):
    """A copy of adapter `src` in `dst` whose lora_B tensors are multiplied by `factor`."""
    dst = _prepare(dst)
    _copy_config(src, dst)
    name = os.path.basename(safetensors_file(src))
    with open(os.path.join(dst, name), "wb") as f:
        f.write(scaled_bytes(src, factor))
    return dst


def rewrite_scaled(adapter_dir, src, factor):
    """Replaces `adapter_dir`'s weights file with `src`'s scaled by `factor`: written to a temporary
    file in the same directory, then renamed over the old one (a server that maps the old file keeps
    its own copy of it)."""
    name = os.path.basename(safetensors_file(src))
    final = os.path.join(adapter_dir, name)
    tmp = final + ".tmp"
    with open(tmp, "wb") as f:
        f.write(scaled_bytes(src, factor))
    os.replace(tmp, final)
    return adapter_dir


def truncated_copy(src, dst, keep_fraction=0.5):
    """A copy of `src` whose safetensors file is cut to `keep_fraction` of its length (the header
    whole, the data short)."""
    dst = _prepare(dst)
    _copy_config(src, dst)
    st = safetensors_file(src)
    with open(st, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    cut = max(8 + n + 1, int(len(blob) * keep_fraction))
    assert cut < len(blob)
    with open(os.path.join(dst, os.path.basename(st)), "wb") as f:
        f.write(blob[:cut])
    return dst


def wrong_shape_copy(src, dst, tensor_fragment="layers.3.self_attn.q_proj.lora_A", new_shape=None):
    """A copy of `src` with the shape of the one tensor whose name contains `tensor_fragment` changed
    in the header (default: rank and input width swapped around, [r, n] -> [2r, n/2]; the element
    count, and so the data, unchanged). Returns (dst, the tensor's full name)."""
    dst = _prepare(dst)
    _copy_config(src, dst)
    st = safetensors_file(src)
    header, data = read_safetensors(st)
    names = [k for k in header if k != "__metadata__" and tensor_fragment in k]
    if len(names) != 1:
        raise ValueError(f"{tensor_fragment!r} matches {names} in {st}")
    info = header[names[0]]
    if new_shape is None:
        r, n = info["shape"]
        new_shape = [2 * r, n // 2]
    count = 1
    for d in new_shape:
        count *= d
    old = 1
    for d in info["shape"]:
        old *= d
    if count != old:
        raise ValueError(f"new shape {new_shape} has {count} elements, the tensor {old}")
    info["shape"] = list(new_shape)
    with open(os.path.join(dst, os.path.basename(st)), "wb") as f:
        f.write(encode_safetensors(header, data))
    return dst, names[0]
