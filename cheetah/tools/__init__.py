"""The agent's tools, one module each; ``default_tools()`` is the set the harness offers."""

from __future__ import annotations

from cheetah.tools import (
    codebase_search,
    edit_file,
    grep,
    lint,
    list_dir,
    read_file,
    run_terminal,
    todo,
)
from cheetah.tools.base import Tool

_MODULES = (read_file, list_dir, grep, codebase_search, edit_file, run_terminal, lint, todo)


def default_tools() -> dict[str, Tool]:
    """Name -> tool, in the order the system prompt lists them."""
    return {m.TOOL.spec.name: m.TOOL for m in _MODULES}
