"""read_file: numbered lines of a text file, a range at a time, with notes where output is cut."""

from __future__ import annotations

import asyncio
import os

from cheetah.core.wire import ParamSpec, ToolSpec
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


SCAN_MAX_BYTES = 256 << 20  # how far into a file read_file looks for start_line


def _lines(fh, max_line_bytes: int):
    """(line bytes, bytes cut) per line, holding at most ``max_line_bytes`` of a line at once."""
    while raw := fh.readline(max_line_bytes):
        cut = 0
        if not raw.endswith(b"\n"):  # a long line: drop the rest of it, counted
            while rest := fh.readline(max_line_bytes):
                cut += len(rest)
                if rest.endswith(b"\n"):
                    break
        yield raw, cut


def refuse_non_file(ctx: ToolContext, path: str, verb: str) -> None:
    """A clear ToolError unless ``path`` names a regular file (for read_file and edit_file)."""
    kind = ctx.files.kind(path)
    if kind is None:
        raise ToolError(f"no file at {path!r}")
    if kind == "dir":
        raise ToolError(f"{path!r} is a directory; use list_dir to see what it holds")
    if kind == "link":
        target = ctx.files.readlink(path)
        raise ToolError(
            f"{path!r} is a symbolic link to {target!r}; links are not followed, "
            f"{verb} the file it names instead"
        )
    if kind != "file":
        raise ToolError(f"{path!r} is not a regular file (a FIFO, socket or device)")


def _read(ctx: ToolContext, path: str, start: int, end: int | None) -> ToolOutput:
    lim = ctx.limits
    refuse_non_file(ctx, path, "read")
    fd, st = ctx.files.open_regular(path)
    size = st.st_size
    shown: list[str] = []
    total = 0
    stop = (
        start + lim.read_max_lines - 1 if end is None else min(end, start + lim.read_max_lines - 1)
    )
    bad_utf8 = False
    max_line_bytes = 4 * lim.read_max_line_chars + 4
    with os.fdopen(fd, "rb") as fh:
        if looks_binary(fh.read(8192)):
            raise ToolError(f"{path!r} is a binary file ({size} bytes); read_file shows text only")
        fh.seek(0)
        for total, (raw, cut_bytes) in enumerate(_lines(fh, max_line_bytes), start=1):
            if total < start:
                if fh.tell() > SCAN_MAX_BYTES:
                    raise ToolError(
                        f"start_line {start} is beyond the first {SCAN_MAX_BYTES >> 20} MB of "
                        f"{path!r}; read_file does not look further"
                    )
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
            if len(line) > lim.read_max_line_chars or cut_bytes:
                cut = len(line) - lim.read_max_line_chars + cut_bytes
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
