"""Bug injection with the ``ast`` module: candidate mutants of one Python source file.

Each operator finds nodes with ``ast`` and edits only the source text of that node
(by its byte offsets), so a mutant differs from the original in one small place and
keeps its formatting; every mutant must still parse. Operators:

- ``compare``: ``<``/``<=``, ``>``/``>=``, ``==``/``!=``, ``is``/``is not``, ``in``/``not in``
- ``arith``: ``+``/``-``, ``*``/``/``, ``//`` -> ``/``, and the same in ``+=``-style updates
- ``boolop``: ``and``/``or`` between two operands
- ``off_by_one``: an integer constant ``n`` -> ``n + 1`` or ``n - 1``; a slice bound
  ``x`` -> ``x + 1`` / ``x - 1``
- ``drop_if``: an ``if`` without ``else`` (a guard) replaced by ``pass``
- ``swap_args``: the first two positional arguments of a call swapped
- ``constant``: ``True``/``False`` flipped, an integer ``n >= 2`` -> ``0``

Deliberately left out: string mutations (mostly message text no test checks),
mutating exception handlers, decorators and type annotations, and higher-order
mutants (two changes at once).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

OPERATORS = ("compare", "arith", "boolop", "off_by_one", "drop_if", "swap_args", "constant")

_CMP = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
}
_ARITH = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "/"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "/"),
}


@dataclass(frozen=True)
class Mutant:
    """One mutant of ``path``: the whole mutated text and where the change is."""

    path: str
    operator: str
    line: int
    original: str
    mutated: str

    @property
    def original_line(self) -> str:
        return self.original.splitlines()[self.line - 1].strip()

    @property
    def mutated_line(self) -> str:
        lines = self.mutated.splitlines()
        return lines[self.line - 1].strip() if self.line <= len(lines) else ""


class _Text:
    """Byte offsets of the source, since ``ast`` columns count UTF-8 bytes."""

    def __init__(self, text: str) -> None:
        self.data = text.encode("utf-8")
        self.starts = [0]
        for i, b in enumerate(self.data):
            if b == 0x0A:
                self.starts.append(i + 1)

    def offset(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def seg(self, start: int, end: int) -> str:
        return self.data[start:end].decode("utf-8")

    def replace(self, start: int, end: int, new: str) -> str:
        return (self.data[:start] + new.encode("utf-8") + self.data[end:]).decode("utf-8")


def _skip_lines(tree: ast.Module) -> set[int]:
    """Lines never mutated: docstrings, annotations, decorators, ``__all__``/``__version__``,
    ``if __name__ == "__main__"`` and ``TYPE_CHECKING`` blocks, ``pragma: no mutate`` lines."""
    skip: set[int] = set()

    def cover(node: ast.AST | None) -> None:
        if node is not None and hasattr(node, "lineno"):
            skip.update(range(node.lineno, node.end_lineno + 1))  # type: ignore[attr-defined]

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for d in node.decorator_list:
                cover(d)
            if not isinstance(node, ast.ClassDef):
                cover(node.returns)
                for a in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]:
                    cover(a.annotation)
        if isinstance(node, ast.AnnAssign):
            cover(node.annotation)
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in ("__all__", "__version__") for t in node.targets
        ):
            cover(node)
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            if "__name__" in test or "TYPE_CHECKING" in test:
                cover(node)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                cover(body[0])
    return skip


def _gap_swap(text: _Text, left: ast.AST, right: ast.AST, old: str, new: str) -> str | None:
    """Replace operator ``old`` by ``new`` in the text between two operands."""
    start, end = text.span(left)[1], text.span(right)[0]
    gap = text.seg(start, end)
    core = gap.strip(" ()\t\n\\")
    if " ".join(core.split()) != old:
        return None
    i = gap.index(core)
    return text.replace(start + i, start + i + len(core.encode()), new)


def mutants_of(path: str, source: str) -> list[Mutant]:
    """Every candidate mutant of one file (those that do not parse are dropped)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    text = _Text(source)
    skip = _skip_lines(tree)
    found: list[tuple[str, int, str | None]] = []
    parents: dict[int, ast.AST] = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            parents[id(child)] = parent

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if line in skip:
            continue
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP:
            old, new = _CMP[type(node.ops[0])]
            found.append(
                ("compare", line, _gap_swap(text, node.left, node.comparators[0], old, new))
            )
        elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH:
            if any(
                isinstance(x, ast.Constant) and isinstance(x.value, str)
                for x in (node.left, node.right)
            ) or any(isinstance(x, ast.JoinedStr) for x in (node.left, node.right)):
                continue
            old, new = _ARITH[type(node.op)]
            found.append(("arith", line, _gap_swap(text, node.left, node.right, old, new)))
        elif isinstance(node, ast.AugAssign) and type(node.op) in _ARITH:
            old, new = _ARITH[type(node.op)]
            found.append(
                ("arith", line, _gap_swap(text, node.target, node.value, old + "=", new + "="))
            )
        elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            found.append(
                ("boolop", line, _gap_swap(text, node.values[0], node.values[1], old, new))
            )
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            s, e = text.span(node)
            found.append(("constant", line, text.replace(s, e, str(not node.value))))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            s, e = text.span(node)
            if isinstance(parents.get(id(node)), ast.UnaryOp):
                continue
            n = node.value
            found.append(("off_by_one", line, text.replace(s, e, str(n + 1))))
            if n >= 1:
                found.append(("off_by_one", line, text.replace(s, e, str(n - 1))))
            if n >= 2:
                found.append(("constant", line, text.replace(s, e, "0")))
        elif isinstance(node, ast.Slice):
            for bound in (node.lower, node.upper):
                if isinstance(bound, ast.Name | ast.Attribute | ast.Call):
                    s, e = text.span(bound)
                    seg = text.seg(s, e)
                    found.append(("off_by_one", bound.lineno, text.replace(s, e, f"{seg} + 1")))
                    found.append(("off_by_one", bound.lineno, text.replace(s, e, f"{seg} - 1")))
        elif isinstance(node, ast.If) and not node.orelse:
            parent = parents.get(id(node))
            if isinstance(parent, ast.If) and node in parent.orelse:
                continue  # an elif: its text starts with "elif", not "if"
            s, e = text.span(node)
            indent = " " * node.col_offset
            found.append(("drop_if", line, text.replace(s - node.col_offset, e, indent + "pass")))
        elif isinstance(node, ast.Call) and len(node.args) >= 2:
            a, b = node.args[0], node.args[1]
            if isinstance(a, ast.Starred) or isinstance(b, ast.Starred):
                continue
            (sa, ea), (sb, eb) = text.span(a), text.span(b)
            ta, tb = text.seg(sa, ea), text.seg(sb, eb)
            if ta == tb or eb <= sa or sb < ea:
                continue
            found.append(("swap_args", line, text.replace(sa, eb, tb + text.seg(ea, sb) + ta)))

    out: list[Mutant] = []
    seen: set[str] = set()
    for op, line, mutated in found:
        if mutated is None or mutated == source or mutated in seen:
            continue
        try:
            ast.parse(mutated)
        except SyntaxError:
            continue
        seen.add(mutated)
        out.append(Mutant(path, op, line, source, mutated))
    return out
