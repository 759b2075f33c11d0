"""`Policy`: whatever writes the assistant messages. Small protocol, async once.

``ScriptedPolicy`` ships in the package: it replays given assistant messages, which
makes demos and tests deterministic (mini-swe-agent does the same). Model-backed
policies live beside it (``openai_policy.py``) or next to their engine. A policy that can
show its reply as it is written is also a ``StreamingPolicy``: ``generate_streaming`` hands
each new piece of text to a callback and returns the same ``Generation`` ``generate`` would.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from cheetah.harness.trajectory import Message


@dataclass
class Generation:
    """One assistant message and what the policy knows about how it was produced.

    ``finish_reason`` "length" means the reply was cut, not ended by the model;
    ``max_new_tokens`` is the cap the policy asked for (None when it does not know), so the
    loop can say which limit cut it."""

    text: str
    completion_tokens: int
    prompt_tokens: int | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_token_ids: list[int] | None = None
    policy_version: int | None = None
    finish_reason: str | None = None
    max_new_tokens: int | None = None


class PolicyError(RuntimeError):
    """The policy could not produce a message (endpoint down, script exhausted, bad reply)."""


class ContextExhausted(PolicyError):
    """The conversation no longer fits the model's context window: the agent loop ends it
    as a ``limit`` (the model did not finish in the room it had), not as an error."""


@runtime_checkable
class Policy(Protocol):
    name: str

    async def generate(self, messages: list[Message]) -> Generation: ...


TextCallback = Callable[[str], None]


@runtime_checkable
class StreamingPolicy(Policy, Protocol):
    """A policy that can hand out its reply while it is written (the product shows it)."""

    async def generate_streaming(
        self, messages: list[Message], on_text: TextCallback
    ) -> Generation: ...


def estimate_tokens(text: str) -> int:
    """A tokenizer-free estimate (about 4 characters a token) for policies without token ids."""
    return max(1, (len(text) + 3) // 4)


class ScriptedPolicy:
    """Replays a fixed list of assistant messages, one per turn."""

    def __init__(self, messages: list[str], name: str = "scripted") -> None:
        self.messages = list(messages)
        self.name = name
        self._next = 0

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedPolicy:
        """A JSON file holding a list of strings, or an object with a "messages" list."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise PolicyError(f"script file {str(path)!r} does not exist") from None
        except json.JSONDecodeError as e:
            raise PolicyError(f"script file {str(path)!r} is not valid JSON: {e}") from None
        if isinstance(data, dict):
            data = data.get("messages")
        if not isinstance(data, list) or not all(isinstance(m, str) for m in data):
            raise PolicyError(
                f'script file {str(path)!r} must hold a list of strings or {{"messages": [...]}}'
            )
        return cls(data, name=f"scripted:{path.name}")

    async def generate(self, messages: list[Message]) -> Generation:
        if self._next >= len(self.messages):
            raise PolicyError(f"the script has no message left after {len(self.messages)} turns")
        text = self.messages[self._next]
        self._next += 1
        return Generation(text=text, completion_tokens=estimate_tokens(text), finish_reason="stop")
