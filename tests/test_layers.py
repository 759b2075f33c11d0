"""Layers only point down: every import between cheetah's packages (lazy ones included, read
from the source with ``ast``) goes from a higher layer to a lower one.

The order, bottom to top (docs/architecture.md draws it): the leaf utilities (``core`` wire
types and workspace, ``config``, ``progress``, ``memory``, ``stop``, ``install_hint``), the servers' ``limits``, then the model, inference, tools,
the env service (``sandbox``), the agent harness, tasks and graders, search, RL, the
dashboard, the CLI. ``KNOWN_UPWARD`` lists the edges not yet removed, each with why; the test
fails on any other upward edge, and on a listed edge that no longer exists (so the list
only shrinks).
"""

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

LAYERS = [
    {"core", "config", "progress", "memory", "bundled", "stop", "install_hint"},
    {"limits"},
    {"model"},
    {"inference"},
    {"tools"},
    {"sandbox"},
    {"harness"},
    {"tasks"},
    {"search"},
    {"rl", "integrations"},
    {"dashboard"},
    {"cli", "cheetah"},
]
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def _unit(path: Path, root: Path) -> str:
    rel = path.relative_to(root)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem.replace("__init__", "cheetah")


def _edges() -> dict[tuple[str, str], list[str]]:
    root = REPO_ROOT / "cheetah"
    units = {p.name for p in root.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    units |= {p.stem for p in root.glob("*.py")}
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(root / "data"):  # bundled task repos and scripts: data, not code
            continue
        src = _unit(path, root)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                parts = name.split(".")
                inner = parts[0] == "cheetah" and len(parts) > 1 and parts[1] in units
                if inner and parts[1] != src:
                    where = f"{path.relative_to(REPO_ROOT)}:{node.lineno}"
                    edges.setdefault((src, parts[1]), []).append(where)
    return edges


def _layer(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def test_every_package_has_a_layer():
    units = {u for edge in _edges() for u in edge}
    assert all(any(u in layer for layer in LAYERS) for u in units), units


def test_imports_only_point_down():
    edges = _edges()
    upward = {e: w for e, w in edges.items() if _layer(e[0]) <= _layer(e[1])}
    unexpected = {e: w for e, w in upward.items() if e not in KNOWN_UPWARD}
    assert not unexpected, f"upward or same-layer imports: {unexpected}"
    stale = set(KNOWN_UPWARD) - set(upward)
    assert not stale, f"these edges are gone: remove them from KNOWN_UPWARD: {stale}"


def test_core_imports_nothing_of_cheetah():
    assert not [e for e in _edges() if e[0] == "core"]
