"""Retrieval data sets: rows of code, some with a query whose answer is their own code.

The file format ``cheetah search eval`` reads (JSON Lines, one object a line)::

    {"id": "httpx/_urls.py:120", "code": "def copy_with(self, **kwargs): ...", "query": "..."}

Every row's ``code`` is a candidate; a row with a ``query`` is also a question whose one right
answer is its own code. ``read_rows`` names the line of anything else.

``package_rows`` builds such a set from installed Python packages (docstring first sentence
-> the function with its docstring cut out, every other chunk of the same files a
distractor): the project's held-out third-party set. ``RESERVED`` are never read for training
or for choosing settings: pip, setuptools and every package pip vendors form an external
test set that must stay unseen.

Deliberately left out: other languages, and queries written by people (none ship here).
"""

from __future__ import annotations

import importlib.util
import json
import random
from dataclasses import dataclass
from pathlib import Path

from cheetah.search.chunks import Chunk

# pip, setuptools/pkg_resources and what pip vendors: an external test set, never trained on.
RESERVED = frozenset(
    {
        "pip", "setuptools", "pkg_resources", "_distutils_hack", "cachecontrol", "certifi",
        "chardet", "colorama", "distlib", "distro", "idna", "msgpack", "packaging",
        "platformdirs", "pygments", "pyparsing", "pyproject_hooks", "requests", "resolvelib",
        "rich", "tenacity", "tomli", "truststore", "typing_extensions", "urllib3",
        "webencodings",
    }
)  # fmt: skip
# Directories that hold copies of other packages (pip's and setuptools' among them).
VENDORED_DIRS = frozenset({"_vendor", "vendor", "vendored", "_vendored", "extern", "_extern"})


class DatasetError(ValueError):
    """A retrieval data set that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Row:
    id: str
    code: str
    query: str | None = None


def read_rows(path: Path) -> list[Row]:
    """Rows of a JSON Lines data set; ``DatasetError`` naming the first bad line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text ({e})") from None
    rows, seen = [], set()
    for no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{no}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise DatasetError(f"{where}: not JSON ({e.msg})") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{where}: expected an object with id and code")
        rid, code, query = obj.get("id"), obj.get("code"), obj.get("query")
        if not isinstance(rid, str | int) or isinstance(rid, bool) or str(rid) == "":
            raise DatasetError(f"{where}: 'id' must be a non-empty string")
        if not isinstance(code, str) or not code.strip():
            raise DatasetError(f"{where}: 'code' must be a non-empty string")
        if query is not None and (not isinstance(query, str) or not query.strip()):
            raise DatasetError(f"{where}: 'query', when given, must be a non-empty string")
        if str(rid) in seen:
            raise DatasetError(f"{where}: id {rid!r} appears twice")
        seen.add(str(rid))
        rows.append(Row(str(rid), code, query))
    if not any(r.query for r in rows):
        raise DatasetError(f"{path}: no row has a query, so there is nothing to rank")
    return rows


def write_rows(rows: list[Row], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for r in rows:
            obj = {"id": r.id, "code": r.code} | ({"query": r.query} if r.query else {})
            fh.write(json.dumps(obj) + "\n")
    tmp.replace(path)


def package_root(name: str) -> Path | None:
    """The directory (or single file) of an installed top-level package, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None


def package_files(name: str) -> list[tuple[str, Path]]:
    """(``name/relative/path.py``, path) of a package's Python files, skipping vendored copies
    and test directories; ``ValueError`` for a reserved package."""
    if name.split(".")[0] in RESERVED:
        raise ValueError(f"{name} is reserved as an external test set (dataset.RESERVED)")
    root = package_root(name)
    if root is None:
        return []
    if root.is_file():
        return [(root.name, root)]
    out = []
    for path in sorted(root.rglob("*.py")):
        parts = set(path.relative_to(root).parts[:-1])
        if parts & VENDORED_DIRS or parts & {"tests", "test", "testing"}:
            continue
        out.append((f"{name}/{path.relative_to(root).as_posix()}", path))
    return out


def package_pairs(name: str) -> tuple[list[tuple[str, Chunk]], list[Chunk]]:
    """Docstring pairs (query, chunk) and every chunk of a package's files."""
    from cheetah.search.pairs import docstring_pairs

    pairs, chunks = [], []
    for rel, path in package_files(name):
        try:
            source = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        p, c = docstring_pairs(rel, source)
        pairs.extend((x.query, x.positive) for x in p)
        chunks.extend(c)
    return pairs, chunks


def package_rows(names: list[str], max_queries: int = 300, seed: int = 0) -> list[Row]:
    """A data set from installed packages: up to ``max_queries`` docstring queries per package
    (a seeded sample), and every chunk of their files as a candidate. Chunks with the same
    code are kept once, and a query whose code is not unique is dropped."""
    rows: list[Row] = []
    seen: dict[str, int] = {}  # code -> row index
    for name in names:
        pairs, chunks = package_pairs(name)
        random.Random(f"{seed}:{name}").shuffle(pairs)
        counts: dict[str, int] = {}
        for c in chunks:
            counts[c.text.strip()] = counts.get(c.text.strip(), 0) + 1
        asked = {}
        for query, chunk in pairs:
            key = chunk.text.strip()
            if counts.get(key) == 1 and key not in asked and len(asked) < max_queries:
                asked[key] = query
        for c in chunks:
            key = c.text.strip()
            if key in seen:
                continue
            seen[key] = len(rows)
            rows.append(Row(f"{c.path}:{c.start}", c.text, asked.get(key)))
    return rows
