"""What every tool shares: the `Tool` record, the per-session `ToolContext`, argument helpers.

A tool is a spec (what the model is told), an async ``run(args, ctx)`` that returns
the text the model sees, and ``access(args)``: the workspace paths it reads and
writes, which the batch runner uses to keep conflicting calls in message order.
Files are reached only through ``ctx.files`` (a ``SafeRoot``), commands through
``ctx.workspace.exec``, semantic search through ``ctx.code_search`` (a ``CodeSearch`` the
process that builds the context hands in, e.g. ``cheetah.search.code_search``; tools
never import the search package).
A tool signals a problem the model can fix by raising ``ToolError``; the message
becomes an error result.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from cheetah.core.safefs import SafeRoot
from cheetah.core.wire import ToolSpec
from cheetah.core.workspace import Workspace


class ToolError(Exception):
    """A failure the model can read and act on (bad argument, no match, missing file)."""


@dataclass
class ToolOutput:
    """The text the model sees, plus structured detail kept in the trajectory only."""

    text: str
    meta: dict = field(default_factory=dict)
    is_error: bool = False


@dataclass
class Limits:
    """Caps that keep one result small enough for a context window."""

    read_max_lines: int = 400
    read_max_line_chars: int = 2_000
    read_max_bytes: int = 2_000_000
    list_max_entries: int = 400
    grep_max_matches: int = 200
    grep_max_line_chars: int = 300
    grep_max_file_bytes: int = 2_000_000
    terminal_timeout_s: float = 60.0
    terminal_max_timeout_s: float = 600.0
    terminal_output_bytes: int = 16_000
    lint_timeout_s: float = 60.0


@dataclass
class TodoItem:
    text: str
    status: str  # "pending" | "in_progress" | "done"


@dataclass(frozen=True)
class CodeHit:
    """One semantic search result: a chunk of a workspace file and its score."""

    path: str
    start: int
    end: int
    name: str | None
    text: str
    score: float


@dataclass(frozen=True)
class CodeHits:
    hits: list[CodeHit]
    reindexed_files: int  # files embedded (again) for this search
    indexed_files: int


@runtime_checkable
class CodeSearch(Protocol):
    """Semantic search over a workspace root; raises ``ToolError`` when it cannot run."""

    def search(self, root: Path, query: str, k: int, under: str | None) -> CodeHits: ...


@dataclass
class ToolContext:
    """Per-session state: the workspace, result caps, the agent's todo list, and the code
    search backend (``None``: ``codebase_search`` answers that it is unavailable)."""

    workspace: Workspace
    limits: Limits = field(default_factory=Limits)
    todos: list[TodoItem] = field(default_factory=list)
    code_search: CodeSearch | None = None

    @property
    def files(self) -> SafeRoot:
        """The workspace's files, reached by descriptor only (never a host path)."""
        return SafeRoot(self.workspace.root)


@dataclass(frozen=True)
class Access:
    """Workspace-relative paths a call reads and writes ('.' is the whole workspace)."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()


RunFn = Callable[[dict[str, str], ToolContext], Awaitable[ToolOutput]]
AccessFn = Callable[[dict[str, str]], Access]


def no_access(args: dict[str, str]) -> Access:
    return Access()


@dataclass(frozen=True)
class Tool:
    spec: ToolSpec
    run: RunFn
    access: AccessFn = no_access


def text_block(value: str) -> str:
    """A multi-line argument: one newline right after the opening tag is dropped (as in HTML <pre>)."""
    return value[1:] if value.startswith("\n") else value


def int_arg(args: dict[str, str], name: str, default: int | None = None) -> int | None:
    """An optional integer argument, with an error that names it when it is not a number."""
    raw = args.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ToolError(f"<{name}> must be a whole number, got {raw!r}") from None


def bool_arg(args: dict[str, str], name: str, default: bool = False) -> bool:
    raw = args.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in ("true", "yes", "1"):
        return True
    if raw in ("false", "no", "0"):
        return False
    raise ToolError(f"<{name}> must be true or false, got {raw!r}")


def norm_path(value: str) -> str:
    """A workspace-relative path in the form used for conflict checks (no ./, no trailing /)."""
    parts = [p for p in value.strip().replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts) or "."
