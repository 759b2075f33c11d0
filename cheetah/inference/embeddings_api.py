"""``POST /v1/embeddings`` (OpenAI-compatible) over any ``Embedder``, and ``POST /v1/rerank``
over any ``Reranker``.

One embedding service that env servers and rollout workers share (``cheetah serve
--embedder SPEC``; with ``--model none`` it serves embeddings only), so they never load
torch themselves: ``search.remote_embedder.RemoteEmbedder`` is the client.

Request: ``{"input": str | [str], "model"?: str, "encoding_format"?: "float" | "base64"}``.
Answer: ``{"object": "list", "data": [{"object": "embedding", "index": i, "embedding": ...}],
"model", "usage"}``, where ``base64`` is each vector's little-endian float32 bytes, as in
OpenAI's API. Bad input (no texts, a wrong type) is a 400 with ``{"error": {"message",
"type"}}``, and so is a request past ``ServerLimits`` (``cheetah/limits.py``), checked before
any text is embedded: ``serve_max_inputs`` texts, ``serve_max_input_chars`` characters a text,
``serve_max_request_chars`` characters in all; the message names the setting. The body itself
is capped before it is read (``serve_max_body_bytes``, by the server's gate). The model runs
one turn at a time, in a worker thread (it already uses every core, and the event loop keeps
answering ``/health``), and a turn is at most ``TURN_TEXTS`` texts of one request, each cut
to the model's window when it is tokenized: a request of 256 long texts takes many turns,
and the lock (first come, first served) lets every other request's turn in between, so a
small request waits for one turn of each request ahead of it, not for whole requests
(``bench/serve_fairness.py``). Memory is bounded by the window times a turn's texts.

``/v1/rerank`` takes the request shape that Cohere, Jina, vLLM and TEI's re-rank APIs share:
``{"query": str, "documents": [str], "top_n"?: int, "model"?: str}``, and answers
``{"model", "results": [{"index", "relevance_score"}]}``, best first, under the same limits
(``serve_max_inputs`` documents; the query and each document at most
``serve_max_input_chars``; all of them together at most ``serve_max_request_chars``).
``search.remote_reranker.RemoteReranker`` is the client. Documents are scored in turns as
texts are embedded: a cross-encoder scores each pair on its own, so the turns' scores compare.

Left out: token-id inputs, ``dimensions`` (truncated vectors), usage token counts (always 0),
documents given as objects, and returning the documents' text back.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import numpy as np
from fastapi import FastAPI
from pydantic import BaseModel

from cheetah.inference.protocol import Embedder, InvalidRequest, Reranker
from cheetah.limits import ServerLimits

TURN_TEXTS = 16  # texts of one request the model reads before another request's turn


class EmbeddingsRequest(BaseModel):
    input: str | list[str]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"


class RerankRequest(BaseModel):
    query: str
    documents: list[str]
    top_n: int | None = None
    model: str | None = None


def reranker_card(reranker: Reranker) -> dict[str, Any]:
    return {"id": reranker.name, "object": "model", "created": 0, "owned_by": "cheetah",
            "kind": "rerank"}  # fmt: skip


def check_texts(field: str, texts: list[str], limits: ServerLimits) -> None:
    """``InvalidRequest`` naming the limit when ``texts`` (those of one request) are too many,
    one is too long, or all together are; ``field`` names them in the message."""
    if len(texts) > limits.serve_max_inputs:
        raise InvalidRequest(
            f"{field}: {len(texts)} texts; at most {limits.serve_max_inputs} a request "
            "(serve_max_inputs)"
        )
    cap = limits.serve_max_input_chars
    long = next((i for i, t in enumerate(texts) if len(t) > cap), None)
    if long is not None:
        raise InvalidRequest(
            f"{field}[{long}]: {len(texts[long])} characters; at most {cap} (serve_max_input_chars)"
        )
    total = sum(map(len, texts))
    if total > limits.serve_max_request_chars:
        raise InvalidRequest(
            f"{field}: {total} characters in all; at most {limits.serve_max_request_chars} "
            "a request (serve_max_request_chars)"
        )


async def in_turns(
    turn: asyncio.Lock, work: Callable[[list[str]], Any], texts: list[str]
) -> np.ndarray:
    """``work(texts)`` (rows in the order of ``texts``), run ``TURN_TEXTS`` texts at a time in
    a worker thread, each turn under ``turn``; texts of similar length share a turn (less
    padding)."""
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    rows: list[Any] = [None] * len(texts)
    for lo in range(0, len(order), TURN_TEXTS):
        part = order[lo : lo + TURN_TEXTS]
        async with turn:
            out = await asyncio.to_thread(work, [texts[i] for i in part])
        for i, row in zip(part, out, strict=True):
            rows[i] = row
    return np.asarray(rows)


def add_rerank_routes(app: FastAPI, reranker: Reranker, limits: ServerLimits) -> None:
    turn = asyncio.Lock()

    @app.post("/v1/rerank")
    async def rerank(body: RerankRequest) -> dict[str, Any]:
        if not body.query.strip():
            raise InvalidRequest("query: give a non-empty text")
        if not body.documents:
            raise InvalidRequest("documents: give at least one text")
        if len(body.query) > limits.serve_max_input_chars:
            raise InvalidRequest(
                f"query: {len(body.query)} characters; at most {limits.serve_max_input_chars} "
                "(serve_max_input_chars)"
            )
        check_texts("documents", body.documents, limits)
        if len(body.query) + sum(map(len, body.documents)) > limits.serve_max_request_chars:
            raise InvalidRequest(
                f"query and documents: over {limits.serve_max_request_chars} characters in all "
                "(serve_max_request_chars)"
            )
        if body.top_n is not None and body.top_n < 1:
            raise InvalidRequest("top_n: at least 1")
        scores = await in_turns(turn, partial(reranker.score, body.query), body.documents)
        order = np.argsort(-np.asarray(scores, dtype=np.float64), kind="stable")
        results = [{"index": int(i), "relevance_score": float(scores[i])} for i in order]
        return {"model": reranker.name, "results": results[: body.top_n or len(results)]}


def embedder_card(embedder: Embedder) -> dict[str, Any]:
    return {
        "id": embedder.name,
        "object": "model",
        "created": 0,
        "owned_by": "cheetah",
        "kind": "embedding",
        "dimensions": embedder.dim,
    }


def add_embedding_routes(app: FastAPI, embedder: Embedder, limits: ServerLimits) -> None:
    turn = asyncio.Lock()

    @app.post("/v1/embeddings")
    async def embeddings(body: EmbeddingsRequest) -> dict[str, Any]:
        texts = [body.input] if isinstance(body.input, str) else body.input
        if not texts:
            raise InvalidRequest("input: give at least one text")
        check_texts("input", texts, limits)
        vectors = await in_turns(turn, embedder.embed, texts)
        rows = np.asarray(vectors, dtype="<f4")
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(row.tobytes()).decode()
                if body.encoding_format == "base64"
                else row.tolist(),
            }
            for i, row in enumerate(rows)
        ]
        usage = {"prompt_tokens": 0, "total_tokens": 0}
        return {"object": "list", "data": data, "model": embedder.name, "usage": usage}
