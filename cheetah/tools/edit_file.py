"""edit_file: exact search/replace that must match exactly once, or creation of a new file.

No fuzzy matching: a near miss is reported with line numbers so the model can
correct its ``old_str``; silently patching the wrong place is worse than an error.
"""

from __future__ import annotations

import asyncio
import difflib

from cheetah.core.safefs import split
from cheetah.core.wire import ParamSpec, ToolSpec
from cheetah.tools.base import (
    Access,
    Tool,
    ToolContext,
    ToolError,
    ToolOutput,
    norm_path,
    text_block,
)
from cheetah.tools.files import looks_binary
from cheetah.tools.read_file import refuse_non_file

SPEC = ToolSpec(
    name="edit_file",
    description=(
        "Replace text in a file: <old_str> must match exactly once (whitespace included) and is "
        "replaced by <new_str>. Without <old_str>, creates a new file holding <new_str>. "
        "A newline right after an opening tag is ignored."
    ),
    params=(
        ParamSpec("path", "file path relative to the workspace root"),
        ParamSpec(
            "old_str", "exact text to replace; leave out to create a new file", required=False
        ),
        ParamSpec("new_str", "replacement text, or the content of the new file"),
    ),
)

SNIPPET_CONTEXT = 3


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _match_lines(text: str, needle: str) -> list[int]:
    lines, pos = [], text.find(needle)
    while pos >= 0:
        lines.append(_line_of(text, pos))
        pos = text.find(needle, pos + 1)
    return lines


def _near_misses(text: str, old: str) -> str:
    """Where the first line of ``old`` appears when whitespace is ignored, as a hint."""
    first = next((ln.strip() for ln in old.splitlines() if ln.strip()), "")
    if not first:
        return "<old_str> holds only whitespace"
    hits = [i for i, ln in enumerate(text.splitlines(), 1) if first in ln.strip()]
    if not hits:
        return f"its first line {first!r} appears nowhere in the file"
    shown = ", ".join(map(str, hits[:10]))
    return (
        f"its first line {first!r} appears (ignoring indentation) on line(s) {shown}; "
        "read those lines and copy them exactly"
    )


def _snippet(text: str, start_line: int, n_lines: int) -> str:
    lines = text.splitlines()
    lo = max(1, start_line - SNIPPET_CONTEXT)
    hi = min(len(lines), start_line + n_lines - 1 + SNIPPET_CONTEXT)
    return "\n".join(f"{i:6d}\t{lines[i - 1]}" for i in range(lo, hi + 1))


def _diff(name: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True),
            after.splitlines(keepends=True),
            fromfile=f"a/{name}",
            tofile=f"b/{name}",
        )
    )


def _edit(ctx: ToolContext, path: str, old: str | None, new: str) -> ToolOutput:
    files = ctx.files
    name = "/".join(split(path)) or "."
    kind = files.kind(path)
    if old is None:
        if kind == "file" and files.lstat(path).st_size > 0:
            data, _ = files.read(path, ctx.limits.read_max_bytes)
            n = data.count(b"\n")
            raise ToolError(
                f"{name} already exists ({n} lines); to change it, give "
                "<old_str> with the exact text to replace"
            )
        if kind not in (None, "file"):
            refuse_non_file(ctx, path, "edit")
        files.write(path, new.encode("utf-8"))
        n = len(new.splitlines())
        return ToolOutput(f"Created {name} ({n} lines).", meta={"diff": _diff(name, "", new)})
    if kind is None:
        raise ToolError(f"no file at {path!r}; to create it, leave out <old_str>")
    refuse_non_file(ctx, path, "edit")
    data, size = files.read(path, ctx.limits.read_max_bytes + 1)
    if size > ctx.limits.read_max_bytes:
        raise ToolError(
            f"{name} is {size} bytes; edit_file edits files up to {ctx.limits.read_max_bytes} bytes"
        )
    if looks_binary(data):
        raise ToolError(f"{name} is a binary file; edit_file edits text only")
    try:
        before = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{name} is not valid UTF-8; edit_file edits UTF-8 text only") from None
    if not old:
        raise ToolError("<old_str> is empty; give the exact text to replace")
    if old == new:
        raise ToolError("<new_str> is the same as <old_str>: the edit would change nothing")
    hits = _match_lines(before, old)
    if not hits:
        raise ToolError(f"<old_str> does not occur in {name}; {_near_misses(before, old)}")
    if len(hits) > 1:
        shown = ", ".join(map(str, hits[:20]))
        raise ToolError(
            f"<old_str> occurs {len(hits)} times in {name} (starting on lines {shown}); "
            "include more surrounding lines so it matches exactly once"
        )
    after = before.replace(old, new, 1)
    files.write(path, after.encode("utf-8"))
    snippet = _snippet(after, hits[0], max(1, len(new.splitlines())))
    return ToolOutput(f"Edited {name}:\n{snippet}", meta={"diff": _diff(name, before, after)})


async def run(args: dict[str, str], ctx: ToolContext) -> ToolOutput:
    old = text_block(args["old_str"]) if "old_str" in args else None
    return await asyncio.to_thread(_edit, ctx, args["path"], old, text_block(args["new_str"]))


def access(args: dict[str, str]) -> Access:
    return Access(writes=frozenset({norm_path(args.get("path", ""))}))


TOOL = Tool(SPEC, run, access)
