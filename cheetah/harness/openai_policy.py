"""`OpenAIPolicy`: any OpenAI-compatible ``/v1/chat/completions`` endpoint as a policy.

Works with cheetah's own server, vLLM, SGLang or a hosted API. When the server
returns the engine's token ids and logprobs (cheetah's server does: ``token_ids``
and ``prompt_token_ids`` on the choice, standard ``logprobs.content``), they are
kept in the trajectory; otherwise tokens are taken from ``usage``.
Assistant messages that carry token ids are sent with them (``token_ids``), so a
cheetah server never re-tokenizes what its engine wrote. ``generate_streaming`` asks for
the reply as server-sent events and shows each piece as it comes (``chat_stream.py`` puts
them back together into the same ``Generation``). Deliberately left out: native function
calling (the XML tool format is the protocol).
"""

from __future__ import annotations

from typing import Any

import httpx

from cheetah.harness.chat_stream import ChatStream
from cheetah.harness.policy import (
    ContextExhausted,
    Generation,
    PolicyError,
    TextCallback,
    estimate_tokens,
)
from cheetah.harness.trajectory import Message
from cheetah.inference.protocol import api_token, is_context_message


class OpenAIPolicy:
    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        temperature: float = 0.0,
        max_tokens: int = 2048,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.api_key = api_token(api_key)  # given, else $CHEETAH_API_TOKEN, else $OPENAI_API_KEY
        self.timeout_s = timeout_s
        self.extra = extra or {}
        self.name = f"openai:{self.base_url}"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    async def _post(self, client: httpx.AsyncClient, path: str, body: dict) -> dict:
        url = f"{self.base_url}{path}"
        try:
            resp = await client.post(url, json=body, headers=self._headers())
        except httpx.HTTPError as e:
            raise PolicyError(f"cannot reach {url}: {type(e).__name__}: {e}") from None
        if resp.status_code != 200:
            raise _refused(url, resp)
        try:
            return resp.json()
        except ValueError:
            raise PolicyError(f"{url} answered with something that is not JSON") from None

    async def resolve_model(self, client: httpx.AsyncClient) -> str:
        """The model name to ask for: the one given, else the first the server lists."""
        if self.model:
            return self.model
        try:
            resp = await client.get(f"{self.base_url}/models", headers=self._headers())
            data = resp.json().get("data") or []
            self.model = data[0]["id"] if data else "default"
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError):
            self.model = "default"
        return self.model

    async def _body(self, client: httpx.AsyncClient, messages: list[Message]) -> dict:
        return {
            "model": await self.resolve_model(client),
            "messages": [_wire(m) for m in messages],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "logprobs": True,
            **self.extra,
        }

    async def generate(self, messages: list[Message]) -> Generation:
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            data = await self._post(client, "/chat/completions", await self._body(client, messages))
        gen = parse_chat_response(data)
        gen.max_new_tokens = self.max_tokens
        return gen

    async def generate_streaming(
        self, messages: list[Message], on_text: TextCallback
    ) -> Generation:
        url = f"{self.base_url}/chat/completions"
        stream = ChatStream(url)
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            body = await self._body(client, messages)
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            try:
                async with client.stream("POST", url, json=body, headers=self._headers()) as resp:
                    if resp.status_code != 200:
                        await resp.aread()
                        raise _refused(url, resp)
                    async for line in resp.aiter_lines():
                        if text := stream.feed_line(line):
                            on_text(text)
            except httpx.HTTPError as e:
                where = "cannot reach" if not stream.parts else "lost the stream from"
                raise PolicyError(f"{where} {url}: {type(e).__name__}: {e}") from None
        gen = stream.generation()
        gen.max_new_tokens = self.max_tokens
        return gen


def _refused(url: str, resp: httpx.Response) -> PolicyError:
    """The error of a response that is not 200: ``ContextExhausted`` when the prompt is past
    the model's context, else ``PolicyError``; either names the status and the body."""
    detail = f"{url} answered {resp.status_code}: {resp.text[:500]}"
    context = resp.status_code == 400 and (
        "context_length_exceeded" in resp.text or is_context_message(resp.text)
    )
    return (ContextExhausted if context else PolicyError)(detail)


def _wire(m: Message) -> dict:
    """A message for the request; assistant turns carry the engine's own token ids when known,
    so a cheetah server continues from exactly those ids (other servers ignore the field)."""
    out: dict = {"role": m.role, "content": m.content}
    if m.role == "assistant" and m.token_ids is not None:
        out["token_ids"] = m.token_ids
    return out


def parse_chat_response(data: dict) -> Generation:
    """A ``Generation`` from a chat completion response, with whatever token detail it has."""
    try:
        choice = data["choices"][0]
        text = choice["message"]["content"] or ""
    except (KeyError, IndexError, TypeError):
        raise PolicyError(
            f"response has no choices[0].message.content: {str(data)[:300]}"
        ) from None
    usage = data.get("usage") or {}
    token_ids = choice.get("token_ids")
    logprobs = None
    content = (choice.get("logprobs") or {}).get("content")
    if isinstance(content, list) and content:
        logprobs = [float(t["logprob"]) for t in content]
    completion = usage.get("completion_tokens") or (len(token_ids) if token_ids else None)
    return Generation(
        text=text,
        completion_tokens=completion or estimate_tokens(text),
        prompt_tokens=usage.get("prompt_tokens"),
        token_ids=token_ids,
        logprobs=logprobs,
        prompt_token_ids=choice.get("prompt_token_ids") or data.get("prompt_token_ids"),
        policy_version=data.get("policy_version", choice.get("policy_version")),
        finish_reason=choice.get("finish_reason"),
    )
