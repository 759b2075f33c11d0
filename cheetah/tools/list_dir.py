"""list_dir: the entries of a directory (directories first, with a trailing /), sizes of files."""

from __future__ import annotations

import asyncio

from cheetah.core.safefs import Entry, split
from cheetah.core.wire import ParamSpec, ToolSpec
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


def _entries(ctx: ToolContext, directory: str) -> list[Entry]:
    entries = [e for e in ctx.files.list(directory) if e.name not in ALWAYS_SKIP]
    return sorted(entries, key=lambda e: (e.kind != "dir", e.name))


def _list(ctx: ToolContext, path: str, depth: int) -> ToolOutput:
    kind = ctx.files.kind(path)
    if kind is None:
        raise ToolError(f"no directory at {path!r}")
    if kind == "link":
        raise ToolError(
            f"{path!r} is a symbolic link to {ctx.files.readlink(path)!r}; links are not followed"
        )
    if kind != "dir":
        raise ToolError(f"{path!r} is a file; use read_file to read it")
    name = "/".join(split(path)) or "."
    lines: list[str] = []
    cap = ctx.limits.list_max_entries
    more = 0

    def visit(directory: str, level: int) -> None:
        nonlocal more
        for e in _entries(ctx, directory):
            rel = e.name if directory == "." else f"{directory}/{e.name}"
            if level > 1 and is_ignored(ctx.files, rel, e.kind == "dir"):
                continue
            if len(lines) >= cap:
                more += 1
                continue
            indent = "  " * (level - 1)
            if e.kind == "link":
                lines.append(f"{indent}{e.name} -> {e.link}")
            elif e.kind == "dir":
                lines.append(f"{indent}{e.name}/")
                if level < depth:
                    visit(rel, level + 1)
            elif e.kind == "file":
                lines.append(f"{indent}{e.name}  ({e.size} bytes)")
            else:
                lines.append(f"{indent}{e.name}  (not a regular file)")

    visit(name, 1)
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
