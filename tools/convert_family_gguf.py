#!/usr/bin/env python3
"""Converts a tiny test checkpoint to GGUF with llama.cpp's own convert_hf_to_gguf.py.

Developer tool (not run by CI). The converter ships in the llama-cpp-python sdist on PyPI
(`pip download --no-binary :all: --no-deps llama-cpp-python`, unpack; the script is
vendor/llama.cpp/convert_hf_to_gguf.py, run with its gguf-py). One patch, for the test tokenizer
only (two patches, both about the tokenizer): the converter identifies BPE pre-tokenizers by hashing the encoding of a fixed text and
knows only published tokenizers, so tiny_bpe gets the "gpt-2" label (the weights and every
hyperparameter go through the converter untouched).

Usage: python3 tools/convert_family_gguf.py LLAMA_CPP_DIR MODEL_DIR OUT.gguf [OUTTYPE]
  OUTTYPE: the converter's --outtype (default f32; q8_0 quantizes the matrices as llama.cpp does)
"""
import sys
from pathlib import Path

lcpp, model_dir, out = sys.argv[1:4]
outtype = sys.argv[4] if len(sys.argv) > 4 else "f32"
sys.path.insert(0, lcpp)
sys.path.insert(1, str(Path(lcpp) / "gguf-py"))
import conversion.base as base  # noqa: E402

base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
import conversion.gemma as gemma  # noqa: E402

# Gemma 2's converter reads only a sentencepiece tokenizer.model; the test tokenizer is a
# tokenizer.json BPE, which Gemma 3's converter takes through _set_vocab_gpt2: the same for Gemma 2.
gemma.Gemma2Model.set_vocab = lambda self: self._set_vocab_gpt2()
import conversion.phi as phi  # noqa: E402

# Phi-3's converter takes tokenizer.json's BPE only for tokenizer_class GPT2Tokenizer (Phi-4); the
# test tokenizer says PreTrainedTokenizerFast, so it is pointed at the same _set_vocab_gpt2.
phi.Phi3MiniModel.set_vocab = lambda self: self._set_vocab_gpt2()
import convert_hf_to_gguf  # noqa: E402

sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outtype", outtype, "--outfile", out]
convert_hf_to_gguf.main()
