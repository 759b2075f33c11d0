"""The engine boundary: token ids in, token ids + logprobs + policy version out.

Imported by both ends: the in-process ``LocalEngine``, the ``RemoteEngine`` over an
OpenAI-compatible HTTP API, the server that exposes an engine, and the harness policy that
drives one. Everything crossing it is token ids, never text, so that what the trainer sees is
exactly what the engine sampled.

Stop strings travel inside ``SamplingParams`` (as in vLLM and the OpenAI API) rather than as a
third argument, so one object describes a request. ``api_token`` is where every client of an
OpenAI-compatible server (``RemoteEngine``, the remote embedder and re-ranker) finds the bearer
token it sends. Left out: beam search, n > 1 (callers ask again), penalties and logit bias;
nothing in the RL loop needs them yet.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

FinishReason = Literal["stop", "length", "abort"]

SEED_LIMIT = 2**63  # seeds are in [0, SEED_LIMIT): what a torch.Generator takes as an int64
MAX_STOP_STRINGS = 64  # stop strings of one request: each is searched after every token
MAX_STOP_CHARS = 1000  # characters of one stop string
MAX_STOP_TOKEN_IDS = 1024
TOKEN_ENV = "CHEETAH_API_TOKEN"


def api_token(explicit: str | None = None) -> str | None:
    """The bearer token a client sends to an OpenAI-compatible server: ``explicit``, else
    ``$CHEETAH_API_TOKEN``, else ``$OPENAI_API_KEY`` (what OpenAI's own clients read), else
    None (no ``Authorization`` header)."""
    if explicit is not None:
        return explicit
    return os.environ.get(TOKEN_ENV) or os.environ.get("OPENAI_API_KEY") or None


class EngineError(RuntimeError):
    """The engine failed while serving a request (a bug, or the engine was shut down)."""


class InvalidRequest(ValueError):
    """The request can never succeed as sent: bad sampling values, prompt past the context."""


class ContextTooLong(InvalidRequest):
    """The prompt leaves no room to generate in the model's context window (a conversation
    that outgrew the model: the agent loop ends it as a limit, not as an error)."""


def is_context_message(message: str) -> bool:
    """Whether a server's error text says the prompt is past the context (cheetah's own
    wording and vLLM's/OpenAI's "maximum context length")."""
    text = message.lower()
    return "context length" in text or "leaving no room to generate" in text


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion.

    ``temperature`` 0 means greedy. ``top_k`` 0 and ``top_p`` 1 switch those filters off.
    Generation ends at ``max_tokens`` new tokens or the end of the model's context
    (``finish_reason`` "length"), at the model's end-of-turn token or any of
    ``stop_token_ids`` (kept in the output ids), or when the decoded text contains one of
    ``stop`` (the ids that produced it are kept; the text is cut before it). ``ignore_eos``
    makes only ``max_tokens`` end a completion (benchmarks). ``top_logprobs`` asks for that
    many alternatives per position. ``seed`` (in [0, 2**63)) makes a request's samples
    reproducible regardless of what else is in its batch. ``validate`` also bounds the work
    one request puts on every step: at most ``MAX_STOP_STRINGS`` stop strings of
    ``MAX_STOP_CHARS`` characters, ``MAX_STOP_TOKEN_IDS`` stop ids.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    top_logprobs: int = 0
    seed: int | None = None

    def __post_init__(self) -> None:
        # tuples keep the dataclass hashable and frozen even when callers pass lists
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    def validate(self) -> SamplingParams:
        """Return self, or raise ``InvalidRequest`` naming the first bad field."""
        if not (math.isfinite(self.temperature) and 0.0 <= self.temperature <= 100.0):
            raise InvalidRequest(f"temperature must be in [0, 100], got {self.temperature}")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise InvalidRequest(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.top_k < 2**31:
            raise InvalidRequest(f"top_k must be in [0, 2**31) (0 = off), got {self.top_k}")
        if self.max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.top_logprobs <= 20:
            raise InvalidRequest(f"top_logprobs must be in [0, 20], got {self.top_logprobs}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InvalidRequest("stop strings must be non-empty strings")
        if len(self.stop) > MAX_STOP_STRINGS or any(len(s) > MAX_STOP_CHARS for s in self.stop):
            raise InvalidRequest(
                f"stop: at most {MAX_STOP_STRINGS} strings of at most {MAX_STOP_CHARS} characters"
            )
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise InvalidRequest(f"stop_token_ids: at most {MAX_STOP_TOKEN_IDS} ids")
        if self.seed is not None and not 0 <= self.seed < SEED_LIMIT:
            raise InvalidRequest(f"seed must be in [0, 2**63), got {self.seed}")
        return self


@dataclass
class Completion:
    """One finished request.

    ``logprobs[i]`` is the log-probability of ``token_ids[i]`` (see the engine for which
    distribution). ``policy_version`` is the weights version that sampled the first token;
    ``last_policy_version`` the one that sampled the last (they differ when weights were
    loaded mid-generation). ``top_logprobs[i]`` holds ``(token_id, logprob)`` alternatives.
    """

    token_ids: list[int]
    logprobs: list[float]
    prompt_token_ids: list[int]
    policy_version: int
    finish_reason: FinishReason
    text: str = ""
    last_policy_version: int | None = None
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)


@runtime_checkable
class Engine(Protocol):
    """Generates token ids for token-id prompts; takes new weights without restarting."""

    @property
    def policy_version(self) -> int: ...

    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion: ...

    async def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None: ...


@runtime_checkable
class Embedder(Protocol):
    """Texts in, one L2-normalized float32 row each out (``numpy.ndarray``, shape
    ``(len(texts), dim)``): the in-process ``search.embedder.TransformerEmbedder``, the
    ``RemoteEmbedder`` over ``POST /v1/embeddings``, and what ``cheetah serve`` exposes."""

    name: str
    dim: int

    def embed(self, texts: list[str]) -> Any: ...


@runtime_checkable
class Reranker(Protocol):
    """A query and candidate texts in, one relevance score each out (``numpy.ndarray`` of
    float32, higher is better; comparable within one call only): the in-process
    ``search.rerank.CrossEncoder`` and ``RemoteReranker`` over ``POST /v1/rerank``."""

    name: str

    def score(self, query: str, texts: list[str]) -> Any: ...
