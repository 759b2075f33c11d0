"""read_file: numbered lines of a text file, a range at a time, with notes where output is cut."""

from __future__ import annotations

import asyncio

from cheetah.harness.protocol import ParamSpec, ToolSpec
from cheetah.sandbox.workspace import resolve_path
from cheetah.tools.base import Access, Tool, ToolContext, ToolError, ToolOutput, int_arg, norm_path
from cheetah.tools.files import looks_binary

SPEC = ToolSpec(
    name="read_file",
    description=(
        "Read a text file. Lines come numbered. Long files are shown a range at a time; "
        "the note at the end says how to read on."
    ),
    params=(
        ParamSpec("path", "file path relative to the workspace root"),
        ParamSpec("start_line", "first line to show, 1-based (default 1)", required=False),
        ParamSpec(
            "end_line", "last line to show, inclusive (default: as many as fit)", required=False
        ),
    ),
)


def _read(ctx: ToolContext, path: str, start: int, end: int | None) -> ToolOutput:
    lim = ctx.limits
    target = resolve_path(ctx.workspace.root, path)
    if not target.exists():
        raise ToolError(f"no file at {path!r}")
    if target.is_dir():
        raise ToolError(f"{path!r} is a directory; use list_dir to see what it holds")
    size = target.stat().st_size
    shown: list[str] = []
    total = 0
    stop = (
        start + lim.read_max_lines - 1 if end is None else min(end, start + lim.read_max_lines - 1)
    )
    bad_utf8 = False
    with target.open("rb") as fh:
        if looks_binary(fh.read(8192)):
            raise ToolError(f"{path!r} is a binary file ({size} bytes); read_file shows text only")
        fh.seek(0)
        for total, raw in enumerate(fh, start=1):
            if total < start:
                continue
            if total > stop:
                if size > lim.read_max_bytes:
                    total = None  # too large to count to the end
                    break
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line, bad_utf8 = raw.decode("utf-8", errors="replace"), True
            line = line.rstrip("\r\n")
            if len(line) > lim.read_max_line_chars:
                cut = len(line) - lim.read_max_line_chars
                line = f"{line[: lim.read_max_line_chars]}[... {cut} characters cut]"
            shown.append(f"{total:6d}\t{line}")
    if total is not None and total == 0:
        return ToolOutput(f"{path} is empty.", meta={"lines": 0})
    if total is not None and start > total:
        raise ToolError(f"start_line {start} is past the end of {path!r} ({total} lines)")
    last = start + len(shown) - 1
    notes = []
    if bad_utf8:
        notes.append("the file is not valid UTF-8; undecodable bytes are shown as \ufffd")
    if total is None:
        notes.append(
            f"showing lines {start}-{last} of a large file ({size} bytes); "
            f"read on with start_line={last + 1}"
        )
    elif last < total and (end is None or last < end):
        notes.append(f"showing lines {start}-{last} of {total}; read on with start_line={last + 1}")
    text = "\n".join(shown)
    if notes:
        text += "\n" + "\n".join(f"[{n}]" for n in notes)
    return ToolOutput(text, meta={"lines": total, "shown": [start, last]})


async def run(args: dict[str, str], ctx: ToolContext) -> ToolOutput:
    start = int_arg(args, "start_line", 1)
    end = int_arg(args, "end_line")
    if start < 1:
        raise ToolError(f"start_line must be 1 or more, got {start}")
    if end is not None and end < start:
        raise ToolError(f"end_line ({end}) is before start_line ({start})")
    return await asyncio.to_thread(_read, ctx, args["path"], start, end)


def access(args: dict[str, str]) -> Access:
    return Access(reads=frozenset({norm_path(args.get("path", ""))}))


TOOL = Tool(SPEC, run, access)
