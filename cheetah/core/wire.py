"""Tool specs, calls and results: the wire types every layer shares.

The harness renders specs for the model and parses its messages into ``ToolCall``s
(``harness/protocol.py``); tools run calls into ``ToolResult``s; the env service carries
both over HTTP. Plain dataclasses, no behaviour beyond lookups, no imports from cheetah.
Left out: serialization (each service has its own pydantic models around these).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ParamSpec:
    """One argument of a tool: its tag name, what it means, whether it is required."""

    name: str
    description: str
    required: bool = True


@dataclass(frozen=True)
class ToolSpec:
    """What the model is told about a tool."""

    name: str
    description: str
    params: tuple[ParamSpec, ...] = ()

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)


@dataclass
class ToolCall:
    """One parsed call. ``index`` is 1-based in message order; ``error`` marks a malformed call."""

    index: int
    name: str
    args: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    raw: str = ""


@dataclass
class ToolResult:
    """What one call produced: ``output`` is exactly the text the model sees."""

    index: int
    name: str
    output: str
    is_error: bool = False
    wall_s: float = 0.0
    started_s: float = 0.0
    meta: dict = field(default_factory=dict)
