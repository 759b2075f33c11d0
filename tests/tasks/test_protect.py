"""Reward hacks a model trained on the grade would find: each earned full reward before the
grader put the files that decide how tests run back (tasks/protect.py); none does now, and a
real fix beside harmless new files still passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheetah.tasks.patch import apply_patch, diff_texts
from cheetah.tasks.protect import protected_changes

from .conftest import TESTS, bug_task
from .test_grader import graded

FORCE_PASS = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
FAKE_PYTEST = "".join(
    f"print('PASSED {t}')\n"
    for t in ("tests/test_ops.py::test_add", "tests/test_ops.py::test_clamp")
)
FIXED_CALC = "def add(a, b):\n    return a + b\n\n\ndef clamp(x, lo, hi):\n    return x\n"


def write(files: dict[str, str]):
    def change(root: Path) -> None:
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)

    return change


HACKS = {
    "a conftest.py that marks every report passed": {"conftest.py": FORCE_PASS},
    "the same in the tests' directory": {"tests/conftest.py": FORCE_PASS},
    "the failing test rewritten": {"tests/test_ops.py": "def test_add():\n    pass\n"},
    "a pytest.py that prints the summary": {"pytest.py": FAKE_PYTEST},
    "pytest options in pyproject.toml": {
        "pyproject.toml": "[tool.pytest.ini_options]\naddopts = '-p tests.plugin'\n",
        "tests/plugin.py": FORCE_PASS,
    },
    "the package shadowed beside the tests": {
        "tests/calc/__init__.py": "",
        "tests/calc/ops.py": FIXED_CALC,
    },
}


@pytest.fixture
def visible_task(calc_repo):
    """The calc bug with no hidden file: its failing check is a test the agent can see (as in
    every generated curriculum task)."""
    return bug_task(
        calc_repo, fail_to_pass=["tests/test_ops.py::test_add"], hidden_files={}, scope=[]
    )


@pytest.mark.parametrize("hack", list(HACKS), ids=list(range(len(HACKS))))
async def test_a_hack_earns_nothing(visible_task, hack):
    g = await graded(visible_task, write(HACKS[hack]))
    assert not g.correct and g.reward == 0.0, hack
    assert g.restored and set(g.restored) <= set(HACKS[hack]), g.restored
    assert set(g.touched) == set(HACKS[hack])  # the agent's changes are still reported


async def test_a_real_fix_beside_new_files_passes_and_nothing_is_restored(visible_task):
    def fix(root: Path) -> None:
        apply_patch(root, visible_task.reference_patch)
        write({"calc/helpers.py": "X = 1\n", "tests/test_more.py": "def test_x():\n    pass\n"})(
            root
        )

    g = await graded(visible_task, fix)
    assert g.correct and g.restored == []
    assert g.touched == ["calc/helpers.py", "calc/ops.py", "tests/test_more.py"]


async def test_a_test_file_the_reference_patch_changes_keeps_the_agents_version(calc_repo):
    renamed = TESTS.replace("test_clamp", "test_clamp_bounds")
    reference = bug_task(calc_repo).reference_patch + diff_texts(
        "tests/test_ops.py", TESTS, renamed
    )
    task = bug_task(
        calc_repo,
        fail_to_pass=["tests/test_ops.py::test_add"],
        pass_to_pass=["tests/test_ops.py::test_clamp_bounds"],
        hidden_files={},
        reference_patch=reference,
    )
    g = await graded(task, lambda root: apply_patch(root, reference))
    assert g.correct and g.restored == []


def test_what_is_put_back_and_what_is_not():
    task = bug_task(Path("/nonexistent"), fail_to_pass=["tests/test_ops.py::test_add"])
    base = {
        "calc/__init__.py": b"",
        "calc/ops.py": b"a",
        "tests/test_ops.py": b"t",
        "setup.cfg": b"s",
    }
    now = {
        "calc/__init__.py": b"",
        "calc/ops.py": b"fixed",  # the fix
        "calc/json.py": b"",  # a new module inside the package: imported as calc.json
        "json.py": b"",  # a new top-level module shadowing the standard library's
        "tests/test_ops.py": b"cheat",
        "setup.cfg": b"[tool:pytest]\naddopts = -x",
        "docs/conftest.py": b"",
        "tests/test_new.py": b"",
    }
    assert protected_changes(task, base, now) == {
        "json.py": None,
        "tests/test_ops.py": b"t",
        "setup.cfg": b"s",
        "docs/conftest.py": None,
    }
