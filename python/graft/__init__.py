"""graft from Python: load a model with LoRA-family adapters, generate (mixing adapters per call),
score logits, and run graft's commands (inspect, fuse, convert, quantize) in process.

    import graft
    m = graft.load("models/SmolLM2-135M-Instruct.Q4_1.gguf", lora={"pirate": "demo/adapters/pirate-peft"})
    print(m.generate([{"role": "user", "content": "Where is the treasure?"}], temperature=0, max_tokens=30))
    print(m.generate("Once upon a time", lora={"pirate": 0.5}, max_tokens=20))   # half the adapter
    for piece in m.generate("Tell me a story", stream=True, lora={}):            # the base model
        print(piece, end="", flush=True)

The options of `graft.load` are `graft generate`'s (docs/CLI.md) as keywords: `dtype="bf16"`,
`ctx_size=8192`, `activations="f32"`, `no_mmap=True`, ... Errors are `graft.Error` subclasses, one
per CLI exit code, with the CLI's messages; a refused call changes nothing. The engine runs with the
GIL released, one forward pass at a time per model.
"""
import json
import os
from typing import Iterator, Mapping, Optional, Sequence, Union

from . import _graft

__all__ = ["load", "Model", "Completion", "inspect", "fuse", "convert", "quantize", "Error", "BadInputError",
           "BadArgumentError", "UnsupportedError", "LimitError", "GraftIOError", "InternalError"]


class Error(Exception):
    """A graft error; `kind` and `exit_code` are the CLI's (README, "Exit codes")."""
    kind = "internal"
    exit_code = 6


class BadInputError(Error, ValueError):
    """A model, config, tokenizer or adapter file is wrong (CLI exit 1)."""
    kind, exit_code = "bad_input", 1


class BadArgumentError(Error, ValueError):
    """An argument is wrong (CLI exit 2)."""
    kind, exit_code = "bad_request", 2


class UnsupportedError(Error, NotImplementedError):
    """Well-formed but not implemented (CLI exit 3)."""
    kind, exit_code = "unsupported", 3


class LimitError(Error, MemoryError):
    """A resource budget would be exceeded: context, size, memory (CLI exit 4)."""
    kind, exit_code = "limit", 4


class GraftIOError(Error, OSError):
    """The operating system refused: open, read, write, disk full (CLI exit 5)."""
    kind, exit_code = "io", 5


class InternalError(Error, RuntimeError):
    """A bug in graft: please report it (CLI exit 6)."""


_graft._register_errors({0: BadInputError, 1: BadArgumentError, 2: UnsupportedError, 3: LimitError,
                         4: GraftIOError, 5: InternalError})

Messages = Sequence[Mapping[str, object]]
Prompt = Union[str, Messages, Sequence[int]]


def _flags(options: Mapping[str, object]) -> list:
    """Keyword options as `graft generate` flags: ctx_size=8192 -> --ctx-size 8192, no_mmap=True -> --no-mmap."""
    out = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False or value is None:
            continue
        else:
            out += [flag, str(value)]
    return out


class Completion(str):
    """A generation's text (it is the str), with `tokens` (ids generated), `finish_reason` ("eos",
    "word", "limit", "context") and `prompt_tokens`."""
    tokens: list
    finish_reason: str
    prompt_tokens: int


class Model:
    """A loaded model; see `load`."""

    def __init__(self, handle):
        self._m = handle

    # ---- text ----
    def tokenize(self, text: str, add_special: Optional[bool] = None, parse_special: bool = False) -> list:
        """Token ids of `text`; add_special: the BOS the tokenizer adds (None: as its files say)."""
        return self._m.tokenize(text, add_special, parse_special)

    def detokenize(self, ids: Sequence[int], skip_special: bool = False) -> str:
        return self._m.detokenize(list(ids), skip_special)

    def apply_chat_template(self, messages: Messages, add_generation_prompt: bool = True, tokenize: bool = False):
        """The model's chat template over OpenAI-style messages: the prompt text, or its ids with tokenize=True."""
        j = json.dumps(list(messages))
        return self._m.chat_encode(j, add_generation_prompt) if tokenize else self._m.chat_render(j, add_generation_prompt)

    @property
    def context(self) -> int:
        """Tokens a generation may hold (prompt and output): --ctx-size, or min(4096, the model's maximum)."""
        return self._m.context

    @property
    def vocab_size(self) -> int:
        return self._m.vocab_size

    # ---- adapters ----
    def load_lora(self, path: str, name: Optional[str] = None, scale: float = 1.0) -> int:
        """Loads an unfused adapter (any format `graft inspect` reads) under `name` (default: the last
        part of the path) at default scale `scale`; returns its id. Nothing changes if it is refused."""
        name = name or _name_of(path)
        return self._m.load_lora(name, _graft.resolve_adapter(str(path)), float(scale))

    def unload_lora(self, name: str) -> None:
        self._m.unload_lora(name)

    @property
    def loras(self) -> list:
        """The loaded adapters: id, name, path, default scale, rank, resident."""
        return self._m.loras()

    # ---- running ----
    def _prompt_ids(self, prompt: Prompt) -> list:
        if isinstance(prompt, str):
            return self.tokenize(prompt)
        prompt = list(prompt)
        if prompt and isinstance(prompt[0], Mapping):
            return self.apply_chat_template(prompt, tokenize=True)
        return [int(t) for t in prompt]

    @staticmethod
    def _scales(lora: Optional[Mapping[str, float]]):
        return None if lora is None else [(str(k), float(v)) for k, v in lora.items()]

    def generate(self, prompt: Prompt, *, max_tokens: int = 256, temperature: float = 0.8, top_k: int = 40,
                 top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0, presence_penalty: float = 0.0,
                 frequency_penalty: float = 0.0, seed: Optional[int] = None, stop: Sequence[str] = (),
                 ignore_eos: bool = False, lora: Optional[Mapping[str, float]] = None,
                 stream: bool = False) -> Union[Completion, Iterator[str]]:
        """Generates from a prompt: text, chat messages (the model's chat template applies) or token ids.

        lora: {name: scale} for this call (unlisted adapters 0; {} the base model); None: every loaded
        adapter at its default scale. temperature 0 is greedy; the sampling options are `graft generate`'s.
        Returns a Completion (a str with .tokens and .finish_reason), or with stream=True an iterator
        of text pieces as they become final."""
        options = dict(max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                       repeat_penalty=repeat_penalty, presence_penalty=presence_penalty,
                       frequency_penalty=frequency_penalty, seed=seed, stop=list(stop), ignore_eos=ignore_eos)
        g = self._m.start(self._prompt_ids(prompt), options, self._scales(lora))
        if stream:
            return iter(g.next, None)
        while g.next() is not None:
            pass
        out = Completion(g.text)
        out.tokens, out.finish_reason, out.prompt_tokens = list(g.tokens), g.finish_reason, g.prompt_tokens
        return out

    def logits(self, token_ids: Sequence[int], lora: Optional[Mapping[str, float]] = None):
        """Logits of every position, a float32 numpy array [len(token_ids), vocab_size] (row i predicts
        token i + 1), from an empty cache, under the chosen adapters (as in generate)."""
        return self._m.logits([int(t) for t in token_ids], self._scales(lora))


def _name_of(path: str) -> str:
    """An adapter's default name: the last part of its path (hf:ORG/NAME[@REV]: NAME)."""
    if path.startswith("hf:"):
        return path[3:].split("@")[0].split("/")[-1]
    return os.path.basename(os.path.normpath(path))


def load(model: str, lora: Union[None, Sequence[str], Mapping[str, str]] = None,
         adapter: Union[None, str, Sequence[str]] = None, verbose: bool = False, **options) -> Model:
    """Loads a model: a GGUF file, a Hugging Face directory, or "hf:ORG/NAME[:QUANT]" from the Hugging
    Face Hub (kept in its cache; hf_file=, revision= as the CLI's --hf-file, --revision).

    lora: unfused adapters, applied with live per-call scales (default scale 1 each): a list of paths
    (named by their last part) or {name: path}; a path "hf:ORG/NAME" is an adapter on the Hub. adapter: adapters fused into the weights for good.
    options: `graft generate`'s model options as keywords (dtype, ctx_size, threads, cache_type,
    activations, lora_dtype, q_bits, q_group_size, merge_policy, fuse_dense, no_mmap).
    verbose: print what the run computes with (formats, kernels), as the CLI does, on stderr."""
    args = (["--hf-repo", model[3:]] if str(model).startswith("hf:") else ["-m", str(model)]) + _flags(options)
    if isinstance(lora, Mapping):
        names, paths = [str(k) for k in lora], [str(v) for v in lora.values()]
    else:
        paths = [lora] if isinstance(lora, str) else [str(p) for p in (lora or [])]
        names = [_name_of(p) for p in paths]
    for p in paths:
        args += ["--lora", p]
    for p in ([adapter] if isinstance(adapter, str) else list(adapter or [])):
        args += ["--adapter", str(p)]
    return Model(_graft.Model(args, names, verbose))


def inspect(adapter: str, base: Optional[str] = None) -> dict:
    """What `graft inspect ADAPTER [--base BASE] --json` prints, as Python objects."""
    return json.loads(_graft.inspect_json(str(adapter), str(base or "")))


def fuse(base: str, adapter: Union[str, Sequence[str]], out: str, **options) -> None:
    """`graft fuse --base BASE --adapter A [--adapter B ...] --out OUT [options]` (policy, dtype,
    max_shard_gb, threads): a merged safetensors checkpoint."""
    adapters = [adapter] if isinstance(adapter, str) else list(adapter)
    args = ["fuse", "--base", str(base), "--out", str(out)]
    for a in adapters:
        args += ["--adapter", str(a)]
    _graft.run_command(args + _flags(options))


def convert(adapter: str, base: str, out: str, **options) -> None:
    """`graft convert --adapter ADAPTER --base BASE --out OUT.gguf [--outtype F16]`: a llama.cpp GGUF LoRA."""
    _graft.run_command(["convert", "--adapter", str(adapter), "--base", str(base), "--out", str(out)] + _flags(options))


def quantize(model: str, out: str, **options) -> None:
    """`graft quantize --model MODEL --out DIR [--bits 4|8] [options]`: an mlx-lm affine-quantized copy."""
    _graft.run_command(["quantize", "--model", str(model), "--out", str(out)] + _flags(options))
