"""A tiny repo and tasks over it, built per test, for the tasks package tests."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from cheetah.core.safefs import read_tree
from cheetah.tasks.patch import diff_texts
from cheetah.tasks.schema import Task

OPS = '''\
"""Small arithmetic helpers."""


def add(a, b):
    return a + b


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
'''

TESTS = """\
from calc.ops import add, clamp


def test_add():
    assert add(2, 3) == 5


def test_clamp():
    assert clamp(5, 0, 3) == 3
    assert clamp(-1, 0, 3) == 0
    assert clamp(2, 0, 3) == 2
"""

HIDDEN = """\
from calc.ops import add


def test_add_negative():
    assert add(-2, -3) == -5
"""

PYPROJECT = """\
[tool.pytest.ini_options]
testpaths = ["tests"]

[tool.ruff]
line-length = 100

[tool.ruff.lint]
select = ["E", "F", "W", "I"]
"""

BUGGY_OPS = OPS.replace("return a + b", "return a - b")


def build_repo(root: Path) -> Path:
    (root / "calc").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "calc" / "__init__.py").write_text("")
    (root / "calc" / "ops.py").write_text(OPS)
    (root / "tests" / "test_ops.py").write_text(TESTS)
    (root / "pyproject.toml").write_text(PYPROJECT)
    return root


@pytest.fixture
def calc_repo(tmp_path: Path) -> Path:
    return build_repo(tmp_path / "calc_repo")


def bug_task(repo: Path, **over) -> Task:
    """add() subtracts; a hidden test and the visible test_add catch it."""
    data = {
        "id": "calc-add",
        "query": "add() in calc/ops.py gives wrong results. Fix it.",
        "snapshot": {"dir": str(repo), "patch": diff_texts("calc/ops.py", OPS, BUGGY_OPS)},
        "fail_to_pass": ["tests/test_hidden.py::test_add_negative", "tests/test_ops.py::test_add"],
        "pass_to_pass": ["tests/test_ops.py::test_clamp"],
        "hidden_files": {"tests/test_hidden.py": HIDDEN},
        "reference_patch": diff_texts("calc/ops.py", BUGGY_OPS, OPS),
        "scope": ["calc/*"],
        "tier": "easy",
    }
    data.update(over)
    return Task.model_validate(data)


@pytest.fixture
def calc_task(calc_repo: Path) -> Task:
    return bug_task(calc_repo)


async def edit_session(ws, change: Callable[[Path], object]) -> None:
    """Apply ``change`` (edits a directory, as an agent would) to a task session's files:
    the tree is copied out, changed, and the difference written back."""
    before = await ws.read_tree()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, data in before.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        change(root)
        after = read_tree(root)
    changes: dict[str, bytes | None] = {r: d for r, d in after.items() if before.get(r) != d}
    changes |= {r: None for r in before if r not in after}
    await ws.write_files(changes)
