"""The rollout record: every message, call, result and timing of one agent run.

One schema serves the product (``cheetah agent --out``), evaluation and training.
Token ids and logprobs are stored exactly as the engine produced them, per turn;
training reads those, never a re-tokenization of the text. Saved as JSON.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

Role = Literal["system", "user", "assistant"]
StopReason = Literal["finished", "limit", "error"]
SCHEMA_VERSION = 1


class Message(BaseModel):
    """One chat message. Assistant messages keep the engine's token ids when there were any."""

    role: Role
    content: str
    token_ids: list[int] | None = None


class CallRecord(BaseModel):
    """One tool call and its result. ``started_s`` is relative to the start of its batch."""

    index: int
    name: str
    args: dict[str, str]
    output: str
    is_error: bool = False
    started_s: float = 0.0
    wall_s: float = 0.0
    meta: dict[str, Any] = Field(default_factory=dict)


class Turn(BaseModel):
    """One assistant message and the tool calls it made."""

    index: int
    assistant: str
    calls: list[CallRecord] = Field(default_factory=list)
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    policy_version: int | None = None
    finish_reason: str | None = None
    generate_s: float = 0.0
    first_token_s: float | None = None  # to the first streamed text; None when not streamed
    tools_s: float = 0.0


class Trajectory(BaseModel):
    """A whole run: the message list the model saw, its turns, why it stopped, and its grade."""

    schema_version: int = SCHEMA_VERSION
    id: str = Field(default_factory=lambda: uuid.uuid4().hex[:12])
    query: str
    policy: str = ""
    task_id: str | None = None
    started_at: str = ""
    messages: list[Message] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    stop_reason: StopReason | None = None
    stop_detail: str = ""
    wall_s: float = 0.0
    todos: list[dict[str, str]] = Field(default_factory=list)
    reward: float | None = None
    grade: dict[str, Any] | None = None

    @property
    def calls(self) -> list[CallRecord]:
        return [c for t in self.turns for c in t.calls]

    @property
    def completion_tokens(self) -> int:
        return sum(t.completion_tokens for t in self.turns)

    @property
    def solved(self) -> bool:
        """Whether the grader judged the run correct (False when ungraded)."""
        return bool((self.grade or {}).get("correct"))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.model_dump_json(indent=1), encoding="utf-8")
        tmp.replace(path)  # atomic: a crash never leaves half a trajectory
        return path

    @classmethod
    def load(cls, path: str | Path) -> Trajectory:
        text = Path(path).read_text(encoding="utf-8")
        try:
            return cls.model_validate_json(text)
        except ValueError as e:
            raise ValueError(f"{path}: not a cheetah trajectory: {e}") from None

    def summary(self) -> dict[str, Any]:
        """Counts a person (or an eval report) wants at a glance."""
        calls = self.calls
        by_tool: dict[str, int] = {}
        for c in calls:
            by_tool[c.name] = by_tool.get(c.name, 0) + 1
        return {
            "id": self.id,
            "stop_reason": self.stop_reason,
            "stop_detail": self.stop_detail,
            "turns": len(self.turns),
            "tool_calls": len(calls),
            "tool_errors": sum(c.is_error for c in calls),
            "calls_by_tool": by_tool,
            "completion_tokens": self.completion_tokens,
            "turns_cut": sum(t.finish_reason == "length" for t in self.turns),
            "first_token_s": _rounded(_mean([t.first_token_s for t in self.turns])),
            "tokens_per_s": _rounded(self.tokens_per_s),
            "wall_s": round(self.wall_s, 3),
            "reward": self.reward,
        }

    @property
    def tokens_per_s(self) -> float | None:
        """Completion tokens over the time spent generating them (None before any)."""
        spent = sum(t.generate_s for t in self.turns)
        return self.completion_tokens / spent if spent > 0 else None


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=1, sort_keys=True)
