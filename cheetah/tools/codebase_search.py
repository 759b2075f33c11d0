"""codebase_search: find code by meaning, not by exact text.

The search itself is the session's ``ctx.code_search`` (``tools.base.CodeSearch``), which
the process that builds the tool context hands in: ``cheetah.search.code_search`` embeds
the workspace once and re-embeds only changed files later. This module only checks the
arguments and renders the hits, so the tools layer never imports the search package (or
torch). Without a backend the call is an error result that points to grep.
"""

from __future__ import annotations

import asyncio

from cheetah.core.wire import ParamSpec, ToolSpec
from cheetah.tools.base import Access, Tool, ToolContext, ToolError, ToolOutput, int_arg, norm_path

SNIPPET_LINES = 14

SPEC = ToolSpec(
    name="codebase_search",
    description=(
        "Semantic search: find the code most related to a description, even when you do not "
        "know the exact names (use grep for exact text). Prints the best matching functions, "
        "classes or file sections as path:start-end with their first lines."
    ),
    params=(
        ParamSpec("query", "what you are looking for, in words, e.g. 'where dates are parsed'"),
        ParamSpec("path", "only search under this directory (default: everywhere)", required=False),
        ParamSpec("max_results", "how many results (default 5, at most 20)", required=False),
    ),
)


def _search(ctx: ToolContext, query: str, path: str, k: int) -> ToolOutput:
    if ctx.code_search is None:
        raise ToolError("codebase_search is not available in this session; use grep instead")
    under = norm_path(path)
    if under != ".":
        kind = ctx.files.kind(path)
        if kind is None:
            raise ToolError(f"<path> {path!r} does not exist")
        if kind != "dir":
            raise ToolError(f"<path> {path!r} is not a directory")
    found = ctx.code_search.search(ctx.workspace.root, query, k, None if under == "." else under)
    if not found.hits:
        where = "" if under == "." else f" under {under}"
        return ToolOutput(f"No indexed code{where}.", meta={"hits": 0})
    parts = []
    for h in found.hits:
        lines = h.text.splitlines()
        head = f"{h.path}:{h.start}-{h.end}" + (f" {h.name}" if h.name else "")
        body = "\n".join(lines[:SNIPPET_LINES])
        more = (
            f"\n[... {len(lines) - SNIPPET_LINES} more lines]" if len(lines) > SNIPPET_LINES else ""
        )
        parts.append(f"{head} (score {h.score:.2f})\n{body}{more}")
    return ToolOutput(
        "\n\n".join(parts),
        meta={
            "hits": len(found.hits),
            "reindexed_files": found.reindexed_files,
            "indexed_files": found.indexed_files,
        },
    )


async def run(args: dict[str, str], ctx: ToolContext) -> ToolOutput:
    query = args["query"].strip()
    if not query:
        raise ToolError("<query> is empty; describe the code you are looking for")
    k = int_arg(args, "max_results", 5) or 5
    if not 1 <= k <= 20:
        raise ToolError(f"<max_results> must be between 1 and 20, got {k}")
    return await asyncio.to_thread(_search, ctx, query, args.get("path", ".") or ".", k)


def access(args: dict[str, str]) -> Access:
    return Access(reads=frozenset({norm_path(args.get("path", "."))}))


TOOL = Tool(SPEC, run, access)
