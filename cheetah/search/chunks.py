"""Split files into the pieces semantic search embeds and returns: one ``Chunk`` per piece.

Python files are cut along the syntax tree: each top-level function is a chunk, a
class is one chunk when short and one chunk per method (plus its header) when long,
and the module-level code between them is grouped into chunks of at most
``max_lines``. Other text files (and Python that does not parse) are cut into windows
of ``max_lines`` lines that overlap by a few lines. The text that gets embedded
(``Chunk.embed_text``) starts with the path and the qualified name, which carry much
of what a query names.

Written here rather than taken from a library: the cut that helps retrieval is the
language's own structure, and ``ast`` gives it in a few lines with exact line spans.
Deliberately left out: syntax-aware cuts for languages other than Python.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

MAX_LINES = 60
OVERLAP = 5


@dataclass(frozen=True)
class Chunk:
    path: str  # workspace-relative, posix
    start: int  # first line, 1-based
    end: int  # last line, inclusive
    name: str  # qualified name ("Parser.parse") or "" for plain windows
    text: str

    @property
    def embed_text(self) -> str:
        head = f"{self.path}" + (f" {self.name}" if self.name else "")
        return f"{head}\n{self.text}"


def _window(path: str, lines: list[str], start: int, end: int, name: str = "") -> Chunk:
    return Chunk(path, start, end, name, "".join(lines[start - 1 : end]))


def window_chunks(
    path: str, lines: list[str], start: int = 1, end: int | None = None, max_lines: int = MAX_LINES
) -> list[Chunk]:
    """Lines ``start..end`` in windows of ``max_lines`` that overlap by ``OVERLAP``."""
    end = len(lines) if end is None else end
    out = []
    s = start
    while s <= end:
        e = min(end, s + max_lines - 1)
        if "".join(lines[s - 1 : e]).strip():
            out.append(_window(path, lines, s, e))
        if e == end:
            break
        s = e + 1 - OVERLAP
    return out


def _span(node: ast.AST) -> tuple[int, int]:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return first, node.end_lineno or node.lineno


def python_chunks(path: str, text: str, max_lines: int = MAX_LINES) -> list[Chunk]:
    lines = text.splitlines(keepends=True)
    tree = ast.parse(text)
    out: list[Chunk] = []
    gap_start = 1  # first line not yet covered by a definition

    def flush_gap(until: int) -> None:
        if until >= gap_start:
            out.extend(window_chunks(path, lines, gap_start, until, max_lines))

    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        first, last = _span(node)
        flush_gap(first - 1)
        gap_start = last + 1
        if isinstance(node, ast.ClassDef) and last - first + 1 > max_lines:
            methods = [
                n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            header_end = (_span(methods[0])[0] - 1) if methods else last
            out.extend(
                Chunk(c.path, c.start, c.end, node.name, c.text)
                for c in window_chunks(path, lines, first, header_end, max_lines)
            )
            for m in methods:
                ms, me = _span(m)
                for c in window_chunks(path, lines, ms, me, max_lines):
                    out.append(Chunk(c.path, c.start, c.end, f"{node.name}.{m.name}", c.text))
        else:
            for c in window_chunks(path, lines, first, last, max_lines):
                out.append(Chunk(c.path, c.start, c.end, node.name, c.text))
    flush_gap(len(lines))
    return out


def chunk_file(path: str, text: str, max_lines: int = MAX_LINES) -> list[Chunk]:
    """The chunks of one file (``path`` is only recorded, never opened)."""
    if path.endswith(".py"):
        try:
            return python_chunks(path, text, max_lines)
        except (SyntaxError, ValueError):
            pass
    return window_chunks(path, text.splitlines(keepends=True), max_lines=max_lines)
