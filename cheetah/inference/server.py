"""An OpenAI-compatible HTTP server over a ``LocalEngine`` (FastAPI + uvicorn).

Routes: ``POST /v1/chat/completions`` (SSE when ``stream`` is true), ``POST /v1/completions``
(the prompt may be text or a list of token ids, as in the OpenAI API), ``GET /v1/models``,
``POST /v1/weights`` (``{"path": dir}``: load that checkpoint's safetensors, bump the policy
version), ``POST /v1/weights/delta`` (a ``cheetah.inference.weight_delta`` blob as the raw body,
at most ``max_delta_bytes``: applied to the engine's current weights; 409 when it was made
against another version or other weights, and the sender falls back to ``/v1/weights``) and
``GET /health``; with an embedder, ``POST /v1/embeddings`` (``embeddings_api.py``), and with
an embedder but no engine only that. The two weight routes take turns, so a delta never
reads weights that a load is changing.

Beyond the OpenAI schema every choice carries ``token_ids`` and ``prompt_token_ids`` (as vLLM
does with ``return_token_ids``) and every response ``policy_version``; chat requests may give
assistant messages a ``token_ids`` list, which enters the prompt verbatim (see
``cheetah.model.chat``). ``top_k``, ``stop_token_ids``, ``ignore_eos`` and ``seed`` are
accepted as in vLLM. Logprobs use the standard shapes (``logprobs.content`` for chat;
``tokens``/``token_logprobs``/``top_logprobs``/``text_offset`` for completions) with one entry
per token id, the end-of-turn token included, so they line up with ``token_ids``.

Every bad request is a 4xx with ``{"error": {"message", "type"}}`` and the server keeps
serving. One model per server: the ``model`` field is echoed, not checked. Left out: ``n`` >
1, ``echo``, tools/function calling (the harness speaks XML in plain text), authentication of
any route, the weight routes included (bind to 127.0.0.1 or put a proxy in front).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from cheetah.inference.embeddings_api import (
    add_embedding_routes,
    add_rerank_routes,
    embedder_card,
    reranker_card,
)
from cheetah.inference.local import LocalEngine, TokenEvent
from cheetah.inference.protocol import (
    Completion,
    ContextTooLong,
    Embedder,
    EngineError,
    InvalidRequest,
    Reranker,
    SamplingParams,
)
from cheetah.inference.weight_delta import DeltaMismatch, MalformedDelta, apply_delta
from cheetah.model.chat import ChatTemplateError, prompt_token_ids
from cheetah.model.loading import CheckpointError, read_state_dict


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant"]
    content: str | list[dict[str, Any]]
    token_ids: list[int] | None = None

    def text(self) -> str:
        """The content as one string; OpenAI content parts must all be text."""
        if isinstance(self.content, str):
            return self.content
        if any(part.get("type") != "text" for part in self.content):
            raise InvalidRequest("only text content parts are supported")
        return "".join(str(part.get("text", "")) for part in self.content)


class _SamplingFields(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] = Field(default_factory=list)
    ignore_eos: bool = False
    seed: int | None = None
    stream: bool = False
    n: int = 1


class ChatRequest(_SamplingFields):
    messages: list[ChatMessageIn]
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None


class CompletionRequest(_SamplingFields):
    prompt: str | list[int]
    logprobs: int | None = None
    echo: bool = False


class WeightsRequest(BaseModel):
    path: str
    version: int | None = None


def create_app(
    engine: LocalEngine | None,
    model_name: str,
    *,
    embedder: Embedder | None = None,
    reranker: Reranker | None = None,
    max_delta_bytes: int = 2 << 30,
) -> FastAPI:
    """The app; the caller owns the engine (and closes it). With an ``embedder`` it also
    answers ``/v1/embeddings``, with a ``reranker`` ``/v1/rerank``; with no engine, only those
    (``cheetah serve --model none``)."""
    if engine is None and embedder is None and reranker is None:
        raise ValueError("nothing to serve: give an engine, an embedder, a re-ranker")
    app = FastAPI(title="cheetah inference", version="1")

    @app.exception_handler(InvalidRequest)
    async def _invalid(_: Request, e: InvalidRequest) -> JSONResponse:
        kind = "context_length_exceeded" if isinstance(e, ContextTooLong) else None
        return _error(400, str(e), kind or "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def _schema(_: Request, e: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ())[1:])}: {err.get('msg')}"
            for err in e.errors()
        )
        return _error(400, f"invalid request: {problems}")

    @app.exception_handler(EngineError)
    async def _engine(_: Request, e: EngineError) -> JSONResponse:
        return _error(503, str(e), "engine_error")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        kind = "not_found" if e.status_code == 404 else "invalid_request_error"
        return _error(e.status_code, str(e.detail), kind)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        status: dict[str, Any] = {"status": "ok", "model": model_name if engine else None}
        if engine is not None:
            status |= {
                "policy_version": engine.policy_version,
                "running": engine.batch_size,
                "max_context": engine.max_context,
            }
        status |= {"embedder": embedder.name} if embedder is not None else {}
        return status | ({"reranker": reranker.name} if reranker is not None else {})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        cards = [embedder_card(embedder)] if embedder is not None else []
        cards += [reranker_card(reranker)] if reranker is not None else []
        if engine is not None:
            card = {"id": model_name, "object": "model", "created": 0, "owned_by": "cheetah"}
            cards.insert(0, dict(card, max_model_len=engine.max_context))
        return {"object": "list", "data": cards}

    if embedder is not None:
        add_embedding_routes(app, embedder)
    if reranker is not None:
        add_rerank_routes(app, reranker)
    if engine is None:
        return app
    tokenizer = engine.tokenizer
    weights_turn = asyncio.Lock()  # one weight load at a time (see the module docstring)

    @app.post("/v1/weights")
    async def weights(body: WeightsRequest) -> dict[str, Any]:
        async with weights_turn:
            try:
                state = await asyncio.to_thread(read_state_dict, body.path)
                version = body.version if body.version is not None else engine.policy_version + 1
                await engine.load_weights(state, version)
            except CheckpointError as e:
                raise InvalidRequest(str(e)) from None
        return {"status": "ok", "policy_version": engine.policy_version, "path": body.path}

    @app.post("/v1/weights/delta", response_model=None)
    async def weights_delta(request: Request) -> Any:
        blob = await _read_limited(request, max_delta_bytes)
        if blob is None:
            return _error(413, f"the delta exceeds this server's limit of {max_delta_bytes} bytes")
        async with weights_turn:
            try:
                state, version = await asyncio.to_thread(
                    apply_delta, engine.model.state_dict(), blob, engine.policy_version
                )
                await engine.load_weights(state, version)
            except DeltaMismatch as e:
                return _error(409, str(e), "delta_mismatch")
            except (MalformedDelta, CheckpointError) as e:
                raise InvalidRequest(str(e)) from None
        return {"status": "ok", "policy_version": engine.policy_version, "bytes": len(blob)}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest) -> Any:
        messages = [
            {"role": m.role, "content": m.text(), "token_ids": m.token_ids} for m in body.messages
        ]
        try:
            prompt = prompt_token_ids(messages, tokenizer)
        except ChatTemplateError as e:
            raise InvalidRequest(str(e)) from None
        max_tokens = (
            body.max_completion_tokens
            if body.max_completion_tokens is not None
            else body.max_tokens
        )
        sampling = _sampling(body, engine, prompt, max_tokens, body.top_logprobs or 0)
        want_logprobs = body.logprobs or bool(body.top_logprobs)
        head = _head("chatcmpl", "chat.completion", model_name)
        if body.stream:
            return _sse(_chat_chunks(engine, prompt, sampling, head, want_logprobs))
        out = await engine.generate(prompt, sampling)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": out.text},
            "finish_reason": out.finish_reason,
            "logprobs": {"content": _chat_logprobs(tokenizer, out)} if want_logprobs else None,
            "token_ids": out.token_ids,
            "prompt_token_ids": out.prompt_token_ids,
        }
        return dict(head, choices=[choice], usage=_usage(out), policy_version=out.policy_version)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> Any:
        if body.echo:
            raise InvalidRequest("echo is not supported")
        if isinstance(body.prompt, str):
            prompt = list(tokenizer(body.prompt, add_special_tokens=False)["input_ids"])
        else:
            prompt = list(body.prompt)
        top = body.logprobs or 0
        sampling = _sampling(body, engine, prompt, body.max_tokens, top)
        head = _head("cmpl", "text_completion", model_name)
        if body.stream:
            return _sse(_completion_chunks(engine, prompt, sampling, head))
        out = await engine.generate(prompt, sampling)
        choice = {
            "index": 0,
            "text": out.text,
            "finish_reason": out.finish_reason,
            "logprobs": _legacy_logprobs(tokenizer, out) if body.logprobs is not None else None,
            "token_ids": out.token_ids,
            "prompt_token_ids": out.prompt_token_ids,
        }
        return dict(head, choices=[choice], usage=_usage(out), policy_version=out.policy_version)

    return app


async def _read_limited(request: Request, limit: int) -> bytes | None:
    """The raw body, or None once it is (or says it is) longer than ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _sampling(
    body: _SamplingFields, engine: LocalEngine, prompt: list[int], max_tokens: int | None, top: int
) -> SamplingParams:
    if body.n != 1:
        raise InvalidRequest("n must be 1; send one request per sample")
    if not prompt:
        raise InvalidRequest("the prompt is empty")
    if min(prompt) < 0 or max(prompt) >= engine.vocab_size:
        raise InvalidRequest(f"prompt token ids must be in [0, {engine.vocab_size})")
    room = engine.max_context - len(prompt)
    if room <= 0:
        raise ContextTooLong(
            f"the prompt has {len(prompt)} tokens; this model's context is "
            f"{engine.max_context} tokens"
        )
    if max_tokens is not None and max_tokens > room:  # no room for the reply asked for
        raise ContextTooLong(
            f"max_tokens {max_tokens} + prompt {len(prompt)} tokens exceeds this model's "
            f"context of {engine.max_context} tokens"
        )
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    return SamplingParams(
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        max_tokens=max_tokens if max_tokens is not None else room,
        stop=tuple(stop),
        stop_token_ids=tuple(body.stop_token_ids),
        ignore_eos=body.ignore_eos,
        top_logprobs=top,
        seed=body.seed,
    ).validate()


async def _chat_chunks(
    engine: LocalEngine,
    prompt: list[int],
    sampling: SamplingParams,
    head: dict[str, Any],
    want_logprobs: bool,
) -> AsyncIterator[dict[str, Any]]:
    head = dict(head, object="chat.completion.chunk")
    first = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    yield dict(head, choices=[dict(first, prompt_token_ids=prompt)])
    async for item in engine.stream(prompt, sampling):
        if isinstance(item, TokenEvent):
            choice: dict[str, Any] = {
                "index": 0,
                "delta": {"content": item.text},
                "finish_reason": None,
                "token_ids": [item.token_id],
            }
            if want_logprobs:
                entry = _token_entry(
                    engine.tokenizer, item.token_id, item.logprob, item.top_logprobs
                )
                choice["logprobs"] = {"content": [entry]}
            yield dict(head, choices=[choice], policy_version=item.policy_version)
        else:
            last = {"index": 0, "delta": {}, "finish_reason": item.finish_reason}
            yield dict(head, choices=[last], usage=_usage(item), policy_version=item.policy_version)


async def _completion_chunks(
    engine: LocalEngine, prompt: list[int], sampling: SamplingParams, head: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    async for item in engine.stream(prompt, sampling):
        if isinstance(item, TokenEvent):
            choice = {"index": 0, "text": item.text, "finish_reason": None}
            yield dict(head, choices=[dict(choice, token_ids=[item.token_id])])
        else:
            last = {"index": 0, "text": "", "finish_reason": item.finish_reason}
            yield dict(head, choices=[last], usage=_usage(item), policy_version=item.policy_version)


def _sse(chunks: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n"
        except (InvalidRequest, EngineError) as e:
            yield f"data: {json.dumps({'error': {'message': str(e)}})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


def _chat_logprobs(tokenizer: Any, out: Completion) -> list[dict[str, Any]]:
    tops = out.top_logprobs or [[] for _ in out.token_ids]
    return [
        _token_entry(tokenizer, t, lp, top)
        for t, lp, top in zip(out.token_ids, out.logprobs, tops, strict=True)
    ]


def _token_entry(
    tokenizer: Any, token_id: int, logprob: float, top: list[tuple[int, float]]
) -> dict[str, Any]:
    text = tokenizer.decode([token_id])
    return {
        "token": text,
        "logprob": logprob,
        "bytes": list(text.encode("utf-8")),
        "top_logprobs": [
            {"token": (s := tokenizer.decode([i])), "logprob": v, "bytes": list(s.encode())}
            for i, v in top
        ],
    }


def _legacy_logprobs(tokenizer: Any, out: Completion) -> dict[str, Any]:
    tokens = [tokenizer.decode([t]) for t in out.token_ids]
    offsets, pos = [], 0
    for t in tokens:
        offsets.append(pos)
        pos += len(t)
    tops = [{tokenizer.decode([i]): v for i, v in top} for top in out.top_logprobs] or None
    return {
        "tokens": tokens,
        "token_logprobs": out.logprobs,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def _usage(out: Completion) -> dict[str, int]:
    prompt, completion = len(out.prompt_token_ids), len(out.token_ids)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _head(prefix: str, kind: str, model: str) -> dict[str, Any]:
    return {
        "id": f"{prefix}-{uuid.uuid4().hex[:16]}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
    }


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind}})
