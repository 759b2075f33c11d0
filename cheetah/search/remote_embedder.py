"""``RemoteEmbedder``: an ``Embedder`` over an OpenAI-compatible ``POST /v1/embeddings``.

``cheetah serve --embedder SPEC`` is one such service (vLLM, TEI and OpenAI's API are
others), so env servers and rollout workers share one embedding model and never load torch
themselves: ``cheetah env serve --embedder http://host:8000/v1``, or
``CHEETAH_EMBEDDER=http://host:8000/v1`` for the CLI verbs. Vectors come back as base64
float32 (4 bytes a dimension, not ~10 of JSON text) when the server offers it, else as
JSON floats, and are L2-normalized here so any server's vectors compare by dot product.

The name is the served model's id (``GET /v1/models``, the embedder card), so a saved index
made through one server is reused through another serving the same model. Left out:
retries (the fleet client retries env servers; a failed search is a tool error the model
reads), and client-side batching beyond ``batch`` texts a request.
"""

from __future__ import annotations

import base64

import httpx
import numpy as np

from cheetah.search.embedder import EmbedderUnavailable
from cheetah.search.service_client import model_cards, post_json


class RemoteEmbedder:
    def __init__(
        self, base_url: str, model: str | None = None, timeout_s: float = 120.0, batch: int = 256
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.batch = batch
        self._http = httpx.Client(timeout=timeout_s)
        self.name = model or self._served_name()
        self.dim = int(self._request(["dimension probe"]).shape[1])

    def _served_name(self) -> str:
        cards = model_cards(self._http, self.base_url, EmbedderUnavailable)
        kinds = [c for c in cards if c.get("kind") == "embedding"] or cards
        if not kinds:
            raise EmbedderUnavailable(f"{self.base_url}/models lists no model")
        return str(kinds[0]["id"])

    def _request(self, texts: list[str]) -> np.ndarray:
        body = {"model": self.name, "input": texts, "encoding_format": "base64"}
        resp = post_json(self._http, f"{self.base_url}/embeddings", body, EmbedderUnavailable)
        try:
            rows = sorted(resp.json()["data"], key=lambda d: d["index"])
            vectors = np.stack([_vector(d["embedding"]) for d in rows])
        except (ValueError, KeyError, TypeError) as e:
            raise EmbedderUnavailable(
                f"{self.base_url}/embeddings: malformed answer ({e})"
            ) from None
        if len(vectors) != len(texts):
            raise EmbedderUnavailable(
                f"{self.base_url}/embeddings returned {len(vectors)} vectors for {len(texts)} texts"
            )
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return (vectors / np.maximum(norms, 1e-12)).astype(np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [self._request(texts[i : i + self.batch]) for i in range(0, len(texts), self.batch)]
        return np.concatenate(parts)


def _vector(value: str | list[float]) -> np.ndarray:
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4").astype(np.float32)
    return np.asarray(value, dtype=np.float32)
