"""``RemoteReranker``: a ``Reranker`` over ``POST /v1/rerank`` (``cheetah serve --reranker``;
the request shape Cohere, Jina, vLLM and TEI share), so env servers re-rank search results
without loading torch. The name is the served re-ranker's id (``GET /v1/models``, the card
of kind ``rerank``). Left out: retries (a failed search is a tool error the model reads).
"""

from __future__ import annotations

import httpx
import numpy as np

from cheetah.search.rerank import RerankerUnavailable


class RemoteReranker:
    def __init__(self, base_url: str, timeout_s: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(timeout=timeout_s)
        try:
            cards = self._http.get(f"{self.base_url}/models").json().get("data") or []
        except (httpx.HTTPError, ValueError, AttributeError) as e:
            raise RerankerUnavailable(f"cannot reach {self.base_url}/models: {e}") from None
        kinds = [c for c in cards if isinstance(c, dict) and c.get("kind") == "rerank"]
        if not kinds:
            raise RerankerUnavailable(f"{self.base_url} serves no re-ranker (no /v1/rerank)")
        self.name = str(kinds[0]["id"])

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        body = {"model": self.name, "query": query, "documents": texts}
        try:
            resp = self._http.post(f"{self.base_url}/rerank", json=body)
        except httpx.HTTPError as e:
            raise RerankerUnavailable(f"cannot reach {self.base_url}/rerank: {e}") from None
        if resp.status_code != 200:
            raise RerankerUnavailable(
                f"{self.base_url}/rerank answered {resp.status_code}: {resp.text[:300]}"
            )
        out = np.full(len(texts), np.nan, dtype=np.float32)
        try:
            for r in resp.json()["results"]:
                out[int(r["index"])] = float(r["relevance_score"])
        except (ValueError, KeyError, TypeError, IndexError) as e:
            raise RerankerUnavailable(f"{self.base_url}/rerank: malformed answer ({e})") from None
        if np.isnan(out).any():
            raise RerankerUnavailable(f"{self.base_url}/rerank: not every document was scored")
        return out
