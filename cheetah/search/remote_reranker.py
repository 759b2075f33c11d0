"""``RemoteReranker``: a ``Reranker`` over ``POST /v1/rerank`` (``cheetah serve --reranker``;
the request shape Cohere, Jina, vLLM and TEI share), so env servers re-rank search results
without loading torch. The name is the served re-ranker's id (``GET /v1/models``, the card
of kind ``rerank``).

Requests fit ``cheetah serve``'s default limits (``service_client.SERVE_LIMITS``): the query
and each document cut to ``max_input_chars`` (a cross-encoder reads a few hundred tokens of a
pair), at most ``batch`` documents and ``max_request_chars`` characters (query included) a
request; a cross-encoder scores each pair on its own, so scores of split requests compare.
Every request carries the bearer token (``token``, else ``$CHEETAH_API_TOKEN``, else
``$OPENAI_API_KEY``). Left out: retries (a failed search is a tool error the model reads).
"""

from __future__ import annotations

import numpy as np

from cheetah.search.rerank import RerankerUnavailable
from cheetah.search.service_client import (
    SERVE_LIMITS,
    batches,
    model_cards,
    post_json,
    service_http,
)


class RemoteReranker:
    def __init__(
        self,
        base_url: str,
        timeout_s: float = 120.0,
        *,
        token: str | None = None,
        batch: int = SERVE_LIMITS.serve_max_inputs,
        max_input_chars: int = SERVE_LIMITS.serve_max_input_chars,
        max_request_chars: int = SERVE_LIMITS.serve_max_request_chars,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.batch = batch
        self.max_input_chars = max_input_chars
        self.max_request_chars = max_request_chars
        self._http = service_http(timeout_s, token)
        cards = model_cards(self._http, self.base_url, RerankerUnavailable)
        kinds = [c for c in cards if c.get("kind") == "rerank"]
        if not kinds:
            raise RerankerUnavailable(f"{self.base_url} serves no re-ranker (no /v1/rerank)")
        self.name = str(kinds[0]["id"])

    def score(self, query: str, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros(0, dtype=np.float32)
        query = query[: self.max_input_chars]
        cut = [t[: self.max_input_chars] for t in texts]
        out = np.full(len(texts), np.nan, dtype=np.float32)
        for span in batches(cut, self.batch, self.max_request_chars, fixed_chars=len(query)):
            out[span.start : span.stop] = self._request(query, cut[span.start : span.stop])
        return out

    def _request(self, query: str, texts: list[str]) -> np.ndarray:
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
