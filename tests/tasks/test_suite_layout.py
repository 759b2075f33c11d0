"""How a repo's tests run (``tasks/suite_layout.py``, ``tasks/suite_run.py``): one tiny repo per
layout, each generated from and its tasks graded the way the grader grades them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cheetah.tasks.curriculum import build_curriculum
from cheetah.tasks.generate import GenerateConfig, GenerateError, generate_tasks, source_files
from cheetah.tasks.session import local_sessions
from cheetah.tasks.suite_layout import (
    DEFAULT_TEST_COMMAND,
    LayoutError,
    SuiteSettings,
    files_named_like_tests,
    repo_settings,
    suite_layouts,
)
from cheetah.tasks.suite_run import SuiteRun
from cheetah.tasks.validate import validate_tasks

LIB = """\
def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def span(xs):
    return max(xs) - min(xs)
"""

UNITTEST = """\
import unittest

from calc import clamp, span


class ClampTests(unittest.TestCase):
    def test_low(self):
        self.assertEqual(clamp(-5, 0, 10), 0)

    def test_high(self):
        self.assertEqual(clamp(50, 0, 10), 10)

    def test_inside(self):
        self.assertEqual(clamp(5, 0, 10), 5)


class SpanTests(unittest.TestCase):
    def test_span(self):
        self.assertEqual(span([3, 9, 4]), 6)
"""

PYTEST_STYLE = """\
from calc import clamp, span


def test_clamp():
    assert clamp(-5, 0, 10) == 0 and clamp(50, 0, 10) == 10 and clamp(5, 0, 10) == 5


def test_span():
    assert span([3, 9, 4]) == 6
"""

CONFIG = GenerateConfig(max_mutants=5, max_tasks=2, seed=0, concurrency=2)


def make_repo(root: Path, files: dict[str, str]) -> Path:
    for rel, text in {"calc/__init__.py": "from calc.core import clamp, span\n",
                      "calc/core.py": LIB, **files}.items():  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


async def generated_and_valid(repo: Path, config: GenerateConfig = CONFIG):
    """Generate from ``repo`` (trusted copies) and validate what came out as eval grades it."""
    result = await generate_tasks(repo, config)
    assert result.tasks, result.stats
    valid = await validate_tasks(result.tasks[:2], local_sessions("local"))
    assert all(v.ok for v in valid), [v.problems for v in valid]
    return result


async def test_a_pytest_suite_runs_as_the_repo_configures_it(tmp_path):
    repo = make_repo(tmp_path / "plain", {"tests/test_calc.py": PYTEST_STYLE})
    result = await generated_and_valid(repo)
    assert result.runner == "pytest"
    assert all(t.test_command is None for t in result.tasks)  # the grader's own default


async def test_a_unittest_module_that_calls_unittest_main_at_import(tmp_path):
    # pytest alone would end with "unrecognized arguments: -p": the grade plugin neutralises it
    repo = make_repo(tmp_path / "um", {"test/test_calc.py": UNITTEST + "\nunittest.main()\n"})
    result = await generated_and_valid(repo)
    assert result.runner == "pytest"
    checks = {c.test for t in result.tasks for c in t.checks}
    assert checks <= {f"test/test_calc.py::{c}" for c in (
        "ClampTests::test_low", "ClampTests::test_high", "ClampTests::test_inside",
        "SpanTests::test_span")}  # fmt: skip


async def test_test_files_pytest_does_not_collect_by_name_are_given_as_paths(tmp_path):
    repo = make_repo(tmp_path / "odd", {"testcalc.py": UNITTEST, "tests.py": UNITTEST})
    assert files_named_like_tests(repo) == ["testcalc.py", "tests.py"]
    assert source_files(repo, []) == ["calc/__init__.py", "calc/core.py"]  # tests never mutated
    result = await generated_and_valid(repo)
    assert result.runner == "pytest, test files by name"
    files = {c.test_file for t in result.tasks for c in t.checks}
    assert files and files <= {"testcalc.py", "tests.py"}


async def test_a_slow_suite_gets_its_limit_from_the_measured_baseline(tmp_path):
    slow = PYTEST_STYLE.replace("def test_span():", "def test_span():\n    time.sleep(1.5)")
    repo = make_repo(tmp_path / "slow", {"tests/test_calc.py": "import time\n" + slow})
    config = CONFIG.model_copy(
        update={"limit_floor_s": 1.0, "limit_factor": 100.0, "max_mutants": 3}
    )
    result = await generate_tasks(repo, config)
    assert result.tasks and result.baseline_s >= 1.5
    assert result.limit_s == pytest.approx(100.0 * result.baseline_s)
    # over the grader's default check limit: each task carries the measured one
    assert all(c.timeout_s == result.limit_s for t in result.tasks for c in t.checks)


async def test_a_baseline_past_the_timeout_names_the_cause_and_the_limit(tmp_path):
    hang = PYTEST_STYLE.replace("def test_span():", "def test_span():\n    time.sleep(60)")
    repo = make_repo(tmp_path / "hang", {"tests/test_calc.py": "import time\n" + hang})
    with pytest.raises(GenerateError) as e:
        await generate_tasks(repo, CONFIG.model_copy(update={"timeout_s": 1.0}))
    first = str(e.value).splitlines()[0]
    assert "baseline test run: pytest: timed out after 1 s" in first
    assert "the limit is --timeout 1 s" in first


async def test_tool_cheetah_test_paths_and_a_custom_pytest_command(tmp_path):
    repo = make_repo(tmp_path / "custom", {
        "checks/verify_calc.py": PYTEST_STYLE,
        "pyproject.toml": '[tool.cheetah]\ntest_paths = ["checks/verify_calc.py"]\n'
                          'test_command = "python -m pytest -q -rA -p no:cacheprovider -x"\n',
    })  # fmt: skip
    [layout] = suite_layouts(repo)
    assert layout.paths == ("checks/verify_calc.py",) and "[tool.cheetah]" in layout.runner
    result = await generated_and_valid(repo)
    assert all(t.test_command == layout.command for t in result.tasks)  # graded with it too
    assert "checks/verify_calc.py" not in {
        p for t in result.tasks for p in t.reference_patch.split() if p.endswith(".py")
    }  # the given test file is never mutated


async def test_the_package_list_says_how_tests_run_and_the_command_line_wins(tmp_path):
    repo = make_repo(tmp_path / "listed", {"checks/verify_calc.py": PYTEST_STYLE})
    (tmp_path / "fetched.json").write_text(json.dumps([
        {"name": "listed", "version": "1.0", "test_paths": ["checks/verify_calc.py"]}
    ]))  # fmt: skip
    results: dict = {}
    tasks, _ = await build_curriculum(
        [repo], tmp_path, heldout_repos=set(), config=CONFIG, results=results
    )
    assert tasks and results["listed"].runner == "pytest, test_paths from the package list"
    given = SuiteSettings(DEFAULT_TEST_COMMAND + " -x", (), "--test-command")
    [layout] = suite_layouts(repo, given, SuiteSettings(None, ("checks",), "the package list"))
    assert layout.command.endswith(" -x") and layout.paths == ("checks",)


async def test_unusable_settings_and_commands_are_clear_errors(tmp_path):
    repo = make_repo(tmp_path / "bad", {"tests/test_calc.py": PYTEST_STYLE})
    (repo / "pyproject.toml").write_text('[tool.cheetah]\ntest_cmd = "pytest"\n')
    with pytest.raises(LayoutError, match=r"unknown keys \['test_cmd'\]"):
        repo_settings(repo)
    (repo / "pyproject.toml").write_text('[tool.cheetah]\ntest_paths = ["../elsewhere"]\n')
    with pytest.raises(GenerateError, match="is not inside the repo"):
        await generate_tasks(repo, CONFIG)
    (repo / "pyproject.toml").write_text('[tool.cheetah]\ntest_paths = ["nope.py"]\n')
    with pytest.raises(GenerateError, match=r"'nope\.py' is not in"):
        await generate_tasks(repo, CONFIG)
    (repo / "pyproject.toml").unlink()
    config = CONFIG.model_copy(update={"test_command": "python -m unittest"})
    with pytest.raises(GenerateError, match=r"wrote no report \(is the test command a pytest"):
        await generate_tasks(repo, config)
    (repo / "tests" / "test_calc.py").unlink()
    with pytest.raises(GenerateError, match="pytest: collected no test"):
        await generate_tasks(repo, CONFIG)


def test_a_test_whose_id_holds_a_memory_address_is_never_a_check():
    outcomes = {"t.py::test_a": "PASSED", "t.py::test_b[<X object at 0x7f3a2b1c90>]": "PASSED"}
    run = SuiteRun({**outcomes, "t.py": "ERROR"}, "", False, 0.1, True)
    assert run.passing == {"t.py::test_a"}


async def test_addopts_naming_a_missing_plugin_are_dropped_and_the_tasks_say_so(tmp_path):
    repo = make_repo(tmp_path / "xdist", {
        "tests/test_calc.py": PYTEST_STYLE,
        "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "-n 4"\n',  # no pytest-xdist
    })  # fmt: skip
    result = await generated_and_valid(repo)
    assert result.runner == "pytest, the repo's addopts dropped"
    assert all(t.test_command.endswith(" -o addopts=") for t in result.tasks)
