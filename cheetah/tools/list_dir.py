"""list_dir: the entries of a directory (directories first, with a trailing /), sizes of files."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from cheetah.harness.protocol import ParamSpec, ToolSpec
from cheetah.sandbox.workspace import relative_name, resolve_path
from cheetah.tools.base import Access, Tool, ToolContext, ToolError, ToolOutput, int_arg, norm_path
from cheetah.tools.files import ALWAYS_SKIP, is_ignored

SPEC = ToolSpec(
    name="list_dir",
    description=(
        "List a directory: subdirectories first (ending in /), then files with their sizes. "
        "Entries that .gitignore excludes are skipped below the first level."
    ),
    params=(
        ParamSpec(
            "path", "directory relative to the workspace root (default: the root)", required=False
        ),
        ParamSpec("depth", "how many levels to show, 1 to 3 (default 1)", required=False),
    ),
)


def _entries(directory: Path) -> list[os.DirEntry]:
    with os.scandir(directory) as it:
        entries = [e for e in it if e.name not in ALWAYS_SKIP]
    return sorted(entries, key=lambda e: (not e.is_dir(follow_symlinks=False), e.name))


def _list(ctx: ToolContext, path: str, depth: int) -> ToolOutput:
    root = ctx.workspace.root
    target = resolve_path(root, path or ".")
    if not target.exists():
        raise ToolError(f"no directory at {path!r}")
    if not target.is_dir():
        raise ToolError(f"{path!r} is a file; use read_file to read it")
    lines: list[str] = []
    cap = ctx.limits.list_max_entries
    more = 0

    def visit(directory: Path, level: int) -> None:
        nonlocal more
        for e in _entries(directory):
            entry = Path(e.path)
            if level > 1 and is_ignored(root, entry):
                continue
            if len(lines) >= cap:
                more += 1
                continue
            indent = "  " * (level - 1)
            if e.is_symlink():
                lines.append(f"{indent}{e.name} -> {os.readlink(e.path)}")
            elif e.is_dir():
                lines.append(f"{indent}{e.name}/")
                if level < depth:
                    visit(entry, level + 1)
            else:
                lines.append(f"{indent}{e.name}  ({e.stat().st_size} bytes)")

    visit(target, 1)
    name = relative_name(root, target)
    if not lines:
        return ToolOutput(f"{name}/ is empty.")
    text = f"{name}/\n" + "\n".join(lines)
    if more:
        text += f"\n[{more} more entries not shown; list a subdirectory to see them]"
    return ToolOutput(text)


async def run(args: dict[str, str], ctx: ToolContext) -> ToolOutput:
    depth = int_arg(args, "depth", 1)
    if not 1 <= depth <= 3:
        raise ToolError(f"depth must be 1, 2 or 3, got {depth}")
    return await asyncio.to_thread(_list, ctx, args.get("path", ".").strip() or ".", depth)


def access(args: dict[str, str]) -> Access:
    return Access(reads=frozenset({norm_path(args.get("path", "."))}))


TOOL = Tool(SPEC, run, access)
