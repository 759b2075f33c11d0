"""``RemoteEmbedder``: an ``Embedder`` over an OpenAI-compatible ``POST /v1/embeddings``.

``cheetah serve --embedder SPEC`` is one such service (vLLM, TEI and OpenAI's API are
others), so env servers and rollout workers share one embedding model and never load torch
themselves: ``cheetah env serve --embedder http://host:8000/v1``, or
``CHEETAH_EMBEDDER=http://host:8000/v1`` for the CLI verbs. Vectors come back as base64
float32 (4 bytes a dimension, not ~10 of JSON text) when the server offers it, else as
JSON floats, and are L2-normalized here so any server's vectors compare by dot product.

The name is the served model's id (``GET /v1/models``, the embedder card), so a saved index
made through one server is reused through another serving the same model.

Requests fit ``cheetah serve``'s default limits (``service_client.SERVE_LIMITS``): at most
``batch`` texts (256, ``serve_max_inputs``) and ``max_request_chars`` characters a request,
each text cut to ``max_input_chars`` (the model reads a few hundred tokens of it anyway).
Every request carries the bearer token (``token``, else ``$CHEETAH_API_TOKEN``, else
``$OPENAI_API_KEY``). Left out: retries (the fleet client retries env servers; a failed
search is a tool error the model reads).
"""

from __future__ import annotations

import base64

import numpy as np

from cheetah.search.embedder import EmbedderUnavailable
from cheetah.search.service_client import (
    SERVE_LIMITS,
    batches,
    model_cards,
    post_json,
    service_http,
)


class RemoteEmbedder:
    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        timeout_s: float = 120.0,
        batch: int = SERVE_LIMITS.serve_max_inputs,
        *,
        token: str | None = None,
        max_input_chars: int = SERVE_LIMITS.serve_max_input_chars,
        max_request_chars: int = SERVE_LIMITS.serve_max_request_chars,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.batch = batch
        self.max_input_chars = max_input_chars
        self.max_request_chars = max_request_chars
        self._http = service_http(timeout_s, token)
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
        cut = [t[: self.max_input_chars] for t in texts]
        spans = batches(cut, self.batch, self.max_request_chars)
        return np.concatenate([self._request(cut[span.start : span.stop]) for span in spans])


def _vector(value: str | list[float]) -> np.ndarray:
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4").astype(np.float32)
    return np.asarray(value, dtype=np.float32)
