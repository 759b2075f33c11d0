"""An OpenAI-compatible HTTP server over a ``LocalEngine`` (FastAPI + uvicorn).

Routes: ``POST /v1/chat/completions`` (SSE when ``stream`` is true), ``POST /v1/completions``
(the prompt may be text or a list of token ids, as in the OpenAI API), ``GET /v1/models``,
``POST /v1/weights`` (``{"path": dir}``: load that checkpoint's safetensors, bump the policy
version), ``POST /v1/weights/delta`` (a ``cheetah.inference.weight_delta`` blob as the raw body:
applied to the engine's current weights; 409 when it was made against another version or other
weights, and the sender falls back to ``/v1/weights``) and ``GET /health``; with an embedder
``POST /v1/embeddings``, with a re-ranker ``POST /v1/rerank`` (``embeddings_api.py``), and
without an engine only those.
The two weight routes take turns, so a delta never reads weights that a load is changing.

Trust: ``create_app`` returns the routes inside ``core.http_gate.HttpGate``, which answers
before the app reads a byte of the body. With a ``token``, every route but ``GET /health``
needs ``Authorization: Bearer TOKEN`` (401 otherwise); without one (a loopback server started
without ``--token-file``) the other routes are open to local clients but the weight routes
are refused (403), so no local process can swap the policy. ``allowed_hosts`` (the loopback
names, for a loopback server) answers 421 to any other ``Host`` header (DNS rebinding).
Bodies are capped by ``ServerLimits`` (``cheetah/limits.py``): ``serve_max_body_bytes`` for
JSON routes, ``serve_max_delta_bytes`` for a delta (default: twice the served model's bytes +
64 MiB); past the cap the answer is 413, a chunked body included. Work is bounded before it
starts: messages of a chat (``serve_max_messages``, and no more than the context holds at
the fewest tokens the chat template gives a message), characters of a prompt
(``serve_max_prompt_chars``), token ids against the context, stop strings and seeds
(``SamplingParams.validate``); a delta's header must name the engine's own tensors with their
shapes before anything is decoded, and a checkpoint path must be readable and outside
``/proc``, ``/sys`` and ``/dev``. Tokenization runs in a worker thread, so ``/health`` and
other clients keep being answered while a large prompt is tokenized.

Response shapes live in ``openai_shapes.py``, the weight routes in ``weights_api.py``. Beyond
the OpenAI schema every choice carries ``token_ids`` and ``prompt_token_ids`` (as vLLM
does with ``return_token_ids``) and every response ``policy_version``; chat requests may give
assistant messages a ``token_ids`` list, which enters the prompt verbatim (see
``cheetah.model.chat``). ``top_k``, ``stop_token_ids``, ``ignore_eos`` and ``seed`` are
accepted as in vLLM. Logprobs use the standard shapes (``logprobs.content`` for chat;
``tokens``/``token_logprobs``/``top_logprobs``/``text_offset`` for completions) with one entry
per token id, the end-of-turn token included, so they line up with ``token_ids``.

Every bad request is a 4xx with ``{"error": {"message", "type"}}`` and the server keeps
serving. One model per server: the ``model`` field is echoed, not checked. Left out: ``n`` >
1, ``echo``, tools/function calling (the harness speaks XML in plain text), ``/docs`` and
``/openapi.json``, per-client rates and quotas (one token is one client), TLS (put a proxy in
front), and a bound on time: a prompt within the limits is tokenized to the end, and a chat
costs about the square of its messages (``model.chat`` renders every prefix): seconds of one
worker thread for the longest chat the default ``serve_max_messages`` (1,024) admits.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from cheetah.core.http_gate import HttpGate
from cheetah.inference.embeddings_api import (
    add_embedding_routes,
    add_rerank_routes,
    embedder_card,
    reranker_card,
)
from cheetah.inference.local import LocalEngine
from cheetah.inference.openai_shapes import (
    chat_chunks,
    chat_logprobs,
    completion_chunks,
    legacy_logprobs,
    response_head,
    sse,
    usage,
)
from cheetah.inference.protocol import (
    ContextTooLong,
    Embedder,
    EngineError,
    InvalidRequest,
    Reranker,
    SamplingParams,
)
from cheetah.inference.weight_delta import SLACK_BYTES, DeltaMismatch, state_bytes
from cheetah.inference.weights_api import add_weight_routes
from cheetah.limits import ServerLimits
from cheetah.model.chat import ChatTemplateError, prompt_token_ids

MAX_PROBLEMS = 5  # schema errors named in one answer (a body may hold millions)
ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found",
    409: "delta_mismatch",
    413: "request_too_large",
    421: "misdirected_request",
}


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


def create_app(
    engine: LocalEngine | None,
    model_name: str,
    *,
    embedder: Embedder | None = None,
    reranker: Reranker | None = None,
    token: str | None = None,
    limits: ServerLimits | None = None,
    allowed_hosts: frozenset[str] | None = None,
) -> HttpGate:
    """The server as an ASGI app: the routes (``.app``, a FastAPI app) inside ``HttpGate``
    (token, Host check, body caps; see the module docstring). The caller owns the engine (and
    closes it). With an ``embedder`` it also answers ``/v1/embeddings``, with a ``reranker``
    ``/v1/rerank``; with no engine, only those (``cheetah serve --model none``)."""
    limits = limits if limits is not None else ServerLimits()
    app = _routes(engine, model_name, embedder, reranker, limits)
    return HttpGate(
        app,
        token=token,
        max_body_bytes=limits.serve_max_body_bytes,
        route_caps=[("POST", "/v1/weights/delta", delta_cap(engine, limits))],
        needs_token=[("POST", "/v1/weights")],  # a prefix: the delta route too
        allowed_hosts=allowed_hosts,
        error_body=_error_body,
    )


def delta_cap(engine: LocalEngine | None, limits: ServerLimits) -> int:
    """The largest weight delta body: ``serve_max_delta_bytes``, else twice the served
    model's bytes + 64 MiB (a delta of incompressible changes is about the model's size)."""
    if limits.serve_max_delta_bytes is not None:
        return limits.serve_max_delta_bytes
    held = state_bytes(engine.model.state_dict()) if engine is not None else 0
    return 2 * held + SLACK_BYTES


def _routes(
    engine: LocalEngine | None,
    model_name: str,
    embedder: Embedder | None,
    reranker: Reranker | None,
    limits: ServerLimits,
) -> FastAPI:
    if engine is None and embedder is None and reranker is None:
        raise ValueError("nothing to serve: give an engine, an embedder, a re-ranker")
    app = FastAPI(
        title="cheetah inference", version="1", docs_url=None, redoc_url=None, openapi_url=None
    )
    _add_error_handlers(app)

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
        add_embedding_routes(app, embedder, limits)
    if reranker is not None:
        add_rerank_routes(app, reranker, limits)
    if engine is not None:
        add_weight_routes(app, engine)
        _add_generation_routes(app, engine, model_name, limits)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(InvalidRequest)
    async def _invalid(_: Request, e: InvalidRequest) -> JSONResponse:
        kind = "context_length_exceeded" if isinstance(e, ContextTooLong) else None
        return _error(400, str(e), kind or "invalid_request_error")

    @app.exception_handler(RequestValidationError)
    async def _schema(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ())[1:])}: {err.get('msg')}"
            for err in errors[:MAX_PROBLEMS]
        )
        more = f"; and {len(errors) - MAX_PROBLEMS} more" if len(errors) > MAX_PROBLEMS else ""
        return _error(400, f"invalid request: {problems}{more}")

    @app.exception_handler(DeltaMismatch)
    async def _mismatch(_: Request, e: DeltaMismatch) -> JSONResponse:
        return _error(409, str(e), "delta_mismatch")

    @app.exception_handler(EngineError)
    async def _engine(_: Request, e: EngineError) -> JSONResponse:
        return _error(503, str(e), "engine_error")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error(e.status_code, str(e.detail))  # 413 from the gate's capped receive too


def _add_generation_routes(
    app: FastAPI, engine: LocalEngine, model_name: str, limits: ServerLimits
) -> None:
    tokenizer = engine.tokenizer
    floor = message_floor(tokenizer)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest) -> Any:
        messages = chat_messages(body, limits, engine.max_context, floor)
        try:
            prompt = await asyncio.to_thread(prompt_token_ids, messages, tokenizer)
        except ChatTemplateError as e:
            raise InvalidRequest(str(e)) from None
        max_tokens = (
            body.max_completion_tokens
            if body.max_completion_tokens is not None
            else body.max_tokens
        )
        sampling = _sampling(body, engine, prompt, max_tokens, body.top_logprobs or 0)
        want_logprobs = body.logprobs or bool(body.top_logprobs)
        head = response_head("chatcmpl", "chat.completion", model_name)
        if body.stream:
            return sse(chat_chunks(engine, prompt, sampling, head, want_logprobs))
        out = await engine.generate(prompt, sampling)
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": out.text},
            "finish_reason": out.finish_reason,
            "logprobs": {"content": chat_logprobs(tokenizer, out)} if want_logprobs else None,
            "token_ids": out.token_ids,
            "prompt_token_ids": out.prompt_token_ids,
        }
        return dict(head, choices=[choice], usage=usage(out), policy_version=out.policy_version)

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> Any:
        if body.echo:
            raise InvalidRequest("echo is not supported")
        if isinstance(body.prompt, str):
            _check_chars("prompt", len(body.prompt), limits)
            encoded = await asyncio.to_thread(tokenizer, body.prompt, add_special_tokens=False)
            prompt = list(encoded["input_ids"])
        else:
            prompt = list(body.prompt)
        top = body.logprobs or 0
        sampling = _sampling(body, engine, prompt, body.max_tokens, top)
        head = response_head("cmpl", "text_completion", model_name)
        if body.stream:
            return sse(completion_chunks(engine, prompt, sampling, head))
        out = await engine.generate(prompt, sampling)
        choice = {
            "index": 0,
            "text": out.text,
            "finish_reason": out.finish_reason,
            "logprobs": legacy_logprobs(tokenizer, out) if body.logprobs is not None else None,
            "token_ids": out.token_ids,
            "prompt_token_ids": out.prompt_token_ids,
        }
        return dict(head, choices=[choice], usage=usage(out), policy_version=out.policy_version)


def message_floor(tokenizer: Any) -> int:
    """Fewer tokens than any message adds to a chat in this tokenizer's template: what an
    empty user or assistant message adds, less 2 for tokens content may merge with at its
    edges; 0 (no bound) when the template cannot render such a chat."""
    from jinja2 import TemplateError

    def size(chat: list[dict[str, str]]) -> int:
        text = tokenizer.apply_chat_template(chat, tokenize=False)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    user, assistant = {"role": "user", "content": ""}, {"role": "assistant", "content": ""}
    try:
        sizes = [size([user]), size([user, assistant]), size([user, assistant, user])]
    except (TemplateError, ValueError, TypeError, KeyError):
        return 0
    return max(0, min(sizes[1] - sizes[0], sizes[2] - sizes[1]) - 2)


def chat_messages(
    body: ChatRequest, limits: ServerLimits, max_context: int, floor: int = 0
) -> list[dict]:
    """The chat's messages as the template takes them, once they are within the limits:
    ``serve_max_messages`` messages, ``serve_max_prompt_chars`` characters in all, and fewer
    verbatim token ids than the context holds (``InvalidRequest`` naming the limit). A chat
    whose messages would fill the context at ``floor`` tokens each is refused untokenized:
    the chat template renders every prefix of a chat, so its cost grows with the square of
    the messages."""
    n = len(body.messages)
    if n > limits.serve_max_messages:
        raise InvalidRequest(
            f"messages: {n}; at most {limits.serve_max_messages} (serve_max_messages)"
        )
    if floor and n * floor >= max_context:
        raise ContextTooLong(
            f"the chat has {n} messages of at least {floor} tokens each in this model's chat "
            f"template; this model's context is {max_context} tokens"
        )
    texts = [m.text() for m in body.messages]
    _check_chars("messages", sum(map(len, texts)), limits)
    given = sum(len(m.token_ids or ()) for m in body.messages)
    if given >= max_context:
        raise ContextTooLong(
            f"the messages' token_ids hold {given} tokens; this model's context is "
            f"{max_context} tokens"
        )
    return [
        {"role": m.role, "content": text, "token_ids": m.token_ids}
        for m, text in zip(body.messages, texts, strict=True)
    ]


def _check_chars(field: str, chars: int, limits: ServerLimits) -> None:
    if chars > limits.serve_max_prompt_chars:
        raise InvalidRequest(
            f"{field}: {chars} characters; at most {limits.serve_max_prompt_chars} "
            "(serve_max_prompt_chars)"
        )


def _sampling(
    body: _SamplingFields, engine: LocalEngine, prompt: list[int], max_tokens: int | None, top: int
) -> SamplingParams:
    if body.n != 1:
        raise InvalidRequest("n must be 1; send one request per sample")
    if not prompt:
        raise InvalidRequest("the prompt is empty")
    room = engine.max_context - len(prompt)
    if room <= 0:
        raise ContextTooLong(
            f"the prompt has {len(prompt)} tokens; this model's context is "
            f"{engine.max_context} tokens"
        )
    if min(prompt) < 0 or max(prompt) >= engine.vocab_size:
        raise InvalidRequest(f"prompt token ids must be in [0, {engine.vocab_size})")
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


def _error_body(status: int, message: str) -> dict[str, Any]:
    """The OpenAI error shape, for the gate's refusals as for the app's."""
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "invalid_request_error")}}


def _error(status: int, message: str, kind: str | None = None) -> JSONResponse:
    body = _error_body(status, message)
    if kind is not None:
        body["error"]["type"] = kind
    return JSONResponse(status_code=status, content=body)
