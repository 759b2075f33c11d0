"""codebase_search: find code by meaning, not by exact text.

The workspace is chunked (functions, classes, windows of other files) and embedded
once; later calls re-embed only the files that changed since (``CodeIndex``, a Merkle
tree of file hashes). One index per workspace root is kept in memory (least recently
used dropped beyond ``MAX_INDEXES``), so a session's first search pays for the whole
repo and the rest pay for its edits. The embedder is the default all-MiniLM-L6-v2, or
the model directory named by ``CHEETAH_EMBEDDER`` (e.g. one ``cheetah search train``
wrote). Files reach the index only through the workspace root by descriptor
(``SafeRoot``), like grep's.

Deliberately left out: a shared index across sessions of the same snapshot, and
persisting indexes of sandbox sessions (``cheetah search index`` persists the user's).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict

from cheetah.core.wire import ParamSpec, ToolSpec
from cheetah.tools.base import Access, Tool, ToolContext, ToolError, ToolOutput, int_arg, norm_path

MAX_INDEXES = 32
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

_indexes: OrderedDict[tuple[str, str], object] = OrderedDict()
_lock = threading.Lock()


def _index_for(root, spec: str):
    from cheetah.search.embedder import load_embedder
    from cheetah.search.index import CodeIndex

    key = (str(root), spec)
    with _lock:
        index = _indexes.get(key)
        if index is None:
            index = CodeIndex(root, load_embedder(spec))
            _indexes[key] = index
            while len(_indexes) > MAX_INDEXES:
                _indexes.popitem(last=False)
        _indexes.move_to_end(key)
        return index


def _search(ctx: ToolContext, query: str, path: str, k: int) -> ToolOutput:
    from cheetah.search.embedder import EmbedderUnavailable

    root = ctx.workspace.root
    under = norm_path(path)
    if under != ".":
        kind = ctx.files.kind(path)
        if kind is None:
            raise ToolError(f"<path> {path!r} does not exist")
        if kind != "dir":
            raise ToolError(f"<path> {path!r} is not a directory")
    try:
        index = _index_for(root, os.environ.get("CHEETAH_EMBEDDER", "default"))
    except EmbedderUnavailable as e:
        raise ToolError(f"codebase_search is unavailable here: {e}") from None
    stats = index.update()
    hits = index.search(query, k=k, under=None if under == "." else under)
    if not hits:
        where = "" if under == "." else f" under {under}"
        return ToolOutput(f"No indexed code{where}.", meta={"hits": 0})
    parts = []
    for h in hits:
        c = h.chunk
        lines = c.text.splitlines()
        head = f"{c.path}:{c.start}-{c.end}" + (f" {c.name}" if c.name else "")
        body = "\n".join(lines[:SNIPPET_LINES])
        more = (
            f"\n[... {len(lines) - SNIPPET_LINES} more lines]" if len(lines) > SNIPPET_LINES else ""
        )
        parts.append(f"{head} (score {h.score:.2f})\n{body}{more}")
    return ToolOutput(
        "\n\n".join(parts),
        meta={
            "hits": len(hits),
            "reindexed_files": len(stats.changed),
            "indexed_files": stats.files,
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
