#!/usr/bin/env python3
"""Seed corpora for the fuzz harnesses whose input packs several files (tests/fuzz/fuzz_util.h:
parts joined by the marker b"\\0GRAFT-PART\\0"): each committed adapter fixture directory becomes
one seed [adapter_config.json, weights]. Harnesses that read one file take the fixtures directly
(CMakeLists.txt lists them). Python standard library only.

Usage: gen_fuzz_seeds.py SOURCE_DIR   (rewrites tests/fuzz/corpus/adapter_{peft,mlx}/)
"""
import os
import sys

MARKER = b"\0GRAFT-PART\0"


def main(src):
    fixtures = os.path.join(src, "tests/fixtures/adapters")
    for layout, weights in (("peft", "adapter_model.safetensors"), ("mlx", "adapters.safetensors")):
        out = os.path.join(src, "tests/fuzz/corpus", "adapter_" + layout)
        os.makedirs(out, exist_ok=True)
        for old in os.listdir(out):
            os.remove(os.path.join(out, old))
        for name in sorted(os.listdir(fixtures)):
            d = os.path.join(fixtures, name)
            cfg, w = os.path.join(d, "adapter_config.json"), os.path.join(d, weights)
            if not (os.path.isfile(cfg) and os.path.isfile(w)):
                continue
            with open(cfg, "rb") as f, open(w, "rb") as g:
                data = f.read() + MARKER + g.read()
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            print(f"{layout}: {name} ({len(data)} bytes)")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
