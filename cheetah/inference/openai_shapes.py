"""The OpenAI-compatible shapes of what ``cheetah serve`` answers: completion heads, usage,
logprobs in the chat and the legacy completion forms, and streamed (SSE) chunks.

Every choice also carries ``token_ids`` (and the first chunk ``prompt_token_ids``), as vLLM
does with ``return_token_ids``, and every response ``policy_version``. Logprobs have one
entry per token id, the end-of-turn token included, so they line up with ``token_ids``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

from cheetah.inference.local import LocalEngine, TokenEvent
from cheetah.inference.protocol import Completion, EngineError, InvalidRequest, SamplingParams


async def chat_chunks(
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
                entry = token_entry(
                    engine.tokenizer, item.token_id, item.logprob, item.top_logprobs
                )
                choice["logprobs"] = {"content": [entry]}
            yield dict(head, choices=[choice], policy_version=item.policy_version)
        else:
            last = {"index": 0, "delta": {}, "finish_reason": item.finish_reason}
            yield dict(head, choices=[last], usage=usage(item), policy_version=item.policy_version)


async def completion_chunks(
    engine: LocalEngine, prompt: list[int], sampling: SamplingParams, head: dict[str, Any]
) -> AsyncIterator[dict[str, Any]]:
    async for item in engine.stream(prompt, sampling):
        if isinstance(item, TokenEvent):
            choice = {"index": 0, "text": item.text, "finish_reason": None}
            yield dict(head, choices=[dict(choice, token_ids=[item.token_id])])
        else:
            last = {"index": 0, "text": "", "finish_reason": item.finish_reason}
            yield dict(head, choices=[last], usage=usage(item), policy_version=item.policy_version)


def sse(chunks: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n"
        except (InvalidRequest, EngineError) as e:
            yield f"data: {json.dumps({'error': {'message': str(e)}})}\n\n"
        yield "data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


def chat_logprobs(tokenizer: Any, out: Completion) -> list[dict[str, Any]]:
    tops = out.top_logprobs or [[] for _ in out.token_ids]
    return [
        token_entry(tokenizer, t, lp, top)
        for t, lp, top in zip(out.token_ids, out.logprobs, tops, strict=True)
    ]


def token_entry(
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


def legacy_logprobs(tokenizer: Any, out: Completion) -> dict[str, Any]:
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


def usage(out: Completion) -> dict[str, int]:
    prompt, completion = len(out.prompt_token_ids), len(out.token_ids)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def response_head(prefix: str, kind: str, model: str) -> dict[str, Any]:
    return {
        "id": f"{prefix}-{uuid.uuid4().hex[:16]}",
        "object": kind,
        "created": int(time.time()),
        "model": model,
    }
