"""A streamed chat completion (``"stream": true``, server-sent events) put back together.

``ChatStream`` reads the event lines of ``/v1/chat/completions`` one at a time, hands out the
new text of each (for the screen) and at the end gives the ``Generation`` that
``openai_policy.parse_chat_response`` would have read from the whole response: the text,
and whatever token detail the server sent (cheetah's server: ``prompt_token_ids`` on the
first chunk, ``token_ids`` and logprobs per chunk, usage and ``policy_version`` on the
last; OpenAI and vLLM: usage on a last chunk without choices when asked with
``stream_options.include_usage``).

A stream that stops before a finish reason (the server went away mid-reply) is a
``PolicyError``, not a short answer; an ``error`` event is one too. Deliberately left out:
``n`` > 1 (one choice is read) and tool-call deltas (the XML tool format is the protocol).
"""

from __future__ import annotations

import json
from typing import Any

from cheetah.harness.policy import Generation, PolicyError, estimate_tokens


class ChatStream:
    """The chunks of one streamed reply, as they come (see the module docstring)."""

    def __init__(self, source: str = "the server") -> None:
        self.source = source
        self.parts: list[str] = []
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.prompt_token_ids: list[int] | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.policy_version: int | None = None

    def feed_line(self, line: str) -> str:
        """One line of the event stream; the new text it brings ("" for none)."""
        if not line.startswith("data:"):
            return ""  # blank separators, comments, event names
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return ""
        try:
            chunk = json.loads(data)
        except ValueError:
            raise PolicyError(
                f"{self.source} streamed a chunk that is not JSON: {data[:200]}"
            ) from None
        if not isinstance(chunk, dict):
            raise PolicyError(f"{self.source} streamed a chunk that is not an object: {data[:200]}")
        return self.feed(chunk)

    def feed(self, chunk: dict[str, Any]) -> str:
        """One decoded chunk; the new text it brings."""
        if "error" in chunk:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            raise PolicyError(f"{self.source} ended the stream with an error: {message}")
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        if chunk.get("policy_version") is not None:
            self.policy_version = chunk["policy_version"]
        choices = chunk.get("choices") or []
        if not choices:
            return ""
        choice = choices[0]
        if choice.get("prompt_token_ids"):
            self.prompt_token_ids = list(choice["prompt_token_ids"])
        self.token_ids += choice.get("token_ids") or []
        content = (choice.get("logprobs") or {}).get("content")
        if isinstance(content, list):
            self.logprobs += [float(t["logprob"]) for t in content]
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        text = (choice.get("delta") or {}).get("content") or ""
        self.parts.append(text)
        return text

    def generation(self) -> Generation:
        """The whole reply; ``PolicyError`` when the stream stopped before it ended."""
        text = "".join(self.parts)
        if self.finish_reason is None:
            raise PolicyError(
                f"{self.source} stopped streaming before the reply ended "
                f"(no finish_reason after {len(text)} characters)"
            )
        completion = self.usage.get("completion_tokens") or len(self.token_ids)
        return Generation(
            text=text,
            completion_tokens=completion or estimate_tokens(text),
            prompt_tokens=self.usage.get("prompt_tokens"),
            token_ids=self.token_ids or None,
            logprobs=self.logprobs or None,
            prompt_token_ids=self.prompt_token_ids,
            policy_version=self.policy_version,
            finish_reason=self.finish_reason,
        )
