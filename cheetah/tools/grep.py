"""grep: regex search over workspace files, .gitignore respected, results capped.

Written in Python over ``files.walk_files`` (files read by descriptor, links never
followed) rather than shelling out to ripgrep so that the same code runs unchanged on
the user's repo and on a sandbox's files, with no binary to provision. Python's ``re`` syntax,
or plain text with ``literal`` (ripgrep's ``-F``: a line of code quoted in a task holds
``(``, ``*`` and ``+``, which a regex would misread); one line per match as
``path:line: text``. Deliberately left out: multi-line patterns, context lines.
"""

from __future__ import annotations

import asyncio
import fnmatch
import re

from cheetah.core.wire import ParamSpec, ToolSpec
from cheetah.core.workspace import PathError
from cheetah.tools.base import Access, Tool, ToolContext, ToolError, ToolOutput, bool_arg, norm_path
from cheetah.tools.files import looks_binary, walk_files

SPEC = ToolSpec(
    name="grep",
    description=(
        "Search file contents with a regular expression (Python syntax). Prints path:line: text "
        "for each matching line. Files that .gitignore excludes and binary files are skipped."
    ),
    params=(
        ParamSpec("pattern", "regular expression to look for"),
        ParamSpec(
            "path", "file or directory to search (default: the whole workspace)", required=False
        ),
        ParamSpec("glob", "only files whose name matches this glob, e.g. *.py", required=False),
        ParamSpec("case_insensitive", "true to ignore case (default false)", required=False),
        ParamSpec(
            "literal", "true to match the pattern as plain text, not a regex", required=False
        ),
    ),
)


def _grep(
    ctx: ToolContext, pattern: str, path: str, glob: str, nocase: bool, literal: bool = False
) -> ToolOutput:
    lim = ctx.limits
    try:
        regex = re.compile(
            re.escape(pattern) if literal else pattern, re.IGNORECASE if nocase else 0
        )
    except re.error as e:
        raise ToolError(f"invalid regular expression {pattern!r}: {e}") from None
    kind = ctx.files.kind(path)
    if kind is None:
        raise ToolError(f"no file or directory at {path!r}")
    if kind not in ("file", "dir"):
        raise ToolError(f"{path!r} is not a file or directory (links are not followed)")
    lines: list[str] = []
    matches = files_hit = files_seen = 0
    for name, entry in walk_files(ctx.files, path):
        base = name.rsplit("/", 1)[-1]
        if glob and not (fnmatch.fnmatch(base, glob) or fnmatch.fnmatch(name, glob)):
            continue
        if entry.size > lim.grep_max_file_bytes:
            continue
        try:
            data, size = ctx.files.read(name, lim.grep_max_file_bytes + 1)
        except PathError:  # changed while searching
            continue
        if size > lim.grep_max_file_bytes:
            continue
        if looks_binary(data):
            continue
        files_seen += 1
        hit = False
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            if regex.search(line):
                matches += 1
                hit = True
                if len(lines) < lim.grep_max_matches:
                    if len(line) > lim.grep_max_line_chars:
                        line = line[: lim.grep_max_line_chars] + " [... line cut]"
                    lines.append(f"{name}:{number}: {line}")
        files_hit += hit
    if not lines:
        where = "" if path.strip() in ("", ".") else f" in {path.strip()}"
        return ToolOutput(
            f"No matches for {pattern!r}{where} ({files_seen} files searched).", meta={"matches": 0}
        )
    text = "\n".join(lines)
    if matches > len(lines):
        text += (
            f"\n[{matches} matches in {files_hit} files; showing the first {len(lines)}. "
            "Narrow the pattern, path or glob to see the rest]"
        )
    return ToolOutput(text, meta={"matches": matches, "files": files_hit})


async def run(args: dict[str, str], ctx: ToolContext) -> ToolOutput:
    pattern = args["pattern"]
    if not pattern:
        raise ToolError("<pattern> is empty")
    return await asyncio.to_thread(
        _grep,
        ctx,
        pattern,
        args.get("path", ".").strip() or ".",
        args.get("glob", "").strip(),
        bool_arg(args, "case_insensitive"),
        bool_arg(args, "literal"),
    )


def access(args: dict[str, str]) -> Access:
    return Access(reads=frozenset({norm_path(args.get("path", "."))}))


TOOL = Tool(SPEC, run, access)
