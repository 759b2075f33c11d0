"""lint: ruff diagnostics for given files (or the whole workspace), run through the workspace.

Ruff runs as a command beside the files, so it reads the repo's own ruff/pyproject
configuration (its conventions) and, in a sandbox, only sees what the sandbox shows.
Output is one ``path:line:col: CODE message`` line per diagnostic, in ruff's order.
"""

from __future__ import annotations

import re
import shlex

from ruff.__main__ import find_ruff_bin

from cheetah.core.wire import ParamSpec, ToolSpec
from cheetah.tools.base import Access, Tool, ToolContext, ToolError, ToolOutput, norm_path

SPEC = ToolSpec(
    name="lint",
    description=(
        "Lint Python files with ruff, using the repo's own ruff configuration. Prints one line "
        "per problem: path:line:col: CODE message."
    ),
    params=(
        ParamSpec(
            "paths",
            "files or directories, one per line or space-separated (default: all)",
            required=False,
        ),
    ),
)

_DIAG = re.compile(r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<rest>.+)$")


def _paths(args: dict[str, str]) -> list[str]:
    return args.get("paths", "").split() or ["."]


async def run(args: dict[str, str], ctx: ToolContext) -> ToolOutput:
    paths = _paths(args)
    for p in paths:
        if ctx.files.kind(p) is None:
            raise ToolError(f"no file or directory at {p!r}")
    argv = [
        find_ruff_bin(),
        "check",
        "--no-cache",
        "--output-format=concise",
        "--exit-zero",
        "--",
        *paths,
    ]
    result = await ctx.workspace.exec(
        shlex.join(argv), timeout_s=ctx.limits.lint_timeout_s, output_limit=64_000
    )
    if result.timed_out:
        raise ToolError(f"ruff did not finish within {ctx.limits.lint_timeout_s:g} s")
    diags = [ln for ln in result.output.splitlines() if _DIAG.match(ln)]
    if result.exit_code != 0:
        raise ToolError(f"ruff failed (exit code {result.exit_code}):\n{result.output.strip()}")
    checked = " ".join(paths)
    if not diags:
        return ToolOutput(f"No lint problems in {checked}.", meta={"count": 0})
    codes = sorted({_DIAG.match(d)["rest"].split()[0] for d in diags})
    text = "\n".join(diags) + f"\n[{len(diags)} problem(s) in {checked}]"
    return ToolOutput(text, meta={"count": len(diags), "codes": codes})


def access(args: dict[str, str]) -> Access:
    return Access(reads=frozenset(norm_path(p) for p in _paths(args)))


TOOL = Tool(SPEC, run, access)
