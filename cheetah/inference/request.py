"""What ``LocalEngine`` keeps per request, and what it reports: ``EngineRequest`` (the
prompt, the sampling settings, the tokens and logprobs so far, the text streamed so far and
where its results go), ``TokenEvent`` (one streamed token) and ``EngineStats`` (counters).

A request's text is built a token at a time only when it is streamed or has stop strings
(``advance_text``): the newest token is decoded, and only the text held back (a suffix that
may begin a stop string, ``held_back``) plus the new piece is searched, so the work per token
is bounded by the stop strings' length. Results cross from the engine thread to the
caller's event loop with ``call_soon_threadsafe``. Left out: anything about scheduling
(``local.py``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import torch

from cheetah.inference.detokenize import IncrementalDetokenizer
from cheetah.inference.protocol import Completion, SamplingParams


@dataclass(frozen=True)
class EngineStats:
    """Counters since the engine started; ``LocalEngine.stats()`` takes a snapshot."""

    steps: int
    prompt_tokens: int  # prompt tokens of the requests admitted
    prompt_tokens_reused: int  # of those, taken from the prefix cache instead of prefilled
    prefix_cache_tokens: int  # tokens whose KV the prefix cache holds now
    prefix_cache_capacity: int
    prefix_cache_evicted: int

    @property
    def prefix_hit_rate(self) -> float:
        return self.prompt_tokens_reused / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass
class TokenEvent:
    """One sampled token, streamed as soon as it exists. ``text`` is the new printable text."""

    token_id: int
    logprob: float
    text: str
    policy_version: int
    top_logprobs: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class EngineRequest:
    prompt_ids: list[int]
    sampling: SamplingParams
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue[TokenEvent | Completion | BaseException]
    generator: torch.Generator
    want_text: bool
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    # text, when streamed or checked for stop strings (``advance_text``); else decoded once
    detokenizer: IncrementalDetokenizer | None = None
    text_parts: list[str] = field(default_factory=list)  # settled: streamed, before any stop
    unsent: str = ""  # decoded, held back: a stop string's start that the next tokens may end
    first_version: int | None = None
    weights: int = 0  # the engine's weight generation at prefill (the prefix cache needs it)
    leaving: bool = False  # finished, cancelled, or nobody listens: drop the row

    def advance_text(self, final: bool) -> tuple[str, bool]:
        """Decode the newest token; return the text now safe to send (also kept in
        ``text_parts``) and whether a stop string appeared (the text ends before it). Work per
        token is bounded by the stop strings' length, not the output's: a match that ends in
        the new text starts in ``unsent`` (``held_back`` holds every suffix that begins a
        stop string), so only ``unsent`` + the new piece is searched. ``final``: the request
        ends at this token anyway; nothing is held back, a partial character comes out as
        U+FFFD."""
        assert self.detokenizer is not None
        stops = self.sampling.stop
        tail = self.unsent + self.detokenizer.push(self.ids[-1])
        if final:
            tail += self.detokenizer.flush()
        cut = min((i for i in (tail.find(s) for s in stops) if i >= 0), default=-1)
        if cut >= 0:
            tail, final = tail[:cut], True
        end = len(tail) if final else len(tail) - held_back(tail, stops)
        delta, self.unsent = tail[:end], tail[end:]
        if delta:
            self.text_parts.append(delta)
        return delta, cut >= 0

    def send(self, item: TokenEvent | Completion | BaseException) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the caller's loop is closed; nobody is listening
            self.leaving = True


def held_back(text: str, stops: tuple[str, ...]) -> int:
    """Characters at the end of ``text`` not yet safe to stream: a prefix of a stop string
    that the next tokens may complete. (Partial UTF-8 characters never reach here: the
    detokenizer holds them.)"""
    hold = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:n]):
                hold = n
                break
    return hold
