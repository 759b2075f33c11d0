"""``RemoteReranker``: a ``Reranker`` over ``POST /v1/rerank`` (``cheetah serve --reranker``;
the request shape Cohere, Jina, vLLM and TEI share), so env servers re-rank search results
without loading torch. The name is the served re-ranker's id (``GET /v1/models``, the card
of kind ``rerank``). Left out: retries (a failed search is a tool error the model reads).
"""

from __future__ import annotations

import httpx
import numpy as np

from cheetah.search.rerank import RerankerUnavailable
from cheetah.search.service_client import model_cards, post_json


class RemoteReranker:
    def __init__(self, base_url: str, timeout_s: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(timeout=timeout_s)
        cards = model_cards(self._http, self.base_url, RerankerUnavailable)
        kinds = [c for c in cards if c.get("kind") == "rerank"]
        if not kinds:
            raise RerankerUnavailable(f"{self.base_url} serves no re-ranker (no /v1/rerank)")
        self.name = str(kinds[0]["id"])

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        body = {"model": self.name, "query": query, "documents": texts}
        resp = post_json(self._http, f"{self.base_url}/rerank", body, RerankerUnavailable)
        out = np.full(len(texts), np.nan, dtype=np.float32)
        try:
            for r in resp.json()["results"]:
                out[int(r["index"])] = float(r["relevance_score"])
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise RerankerUnavailable(f"{self.base_url}/rerank: malformed answer ({e})") from None
        if np.isnan(out).any():
            raise RerankerUnavailable(f"{self.base_url}/rerank: not every document was scored")
        return out
