"""The grader's pytest plugin (``tasks/grade_plugin.py``) run by a real pytest: outcomes in
``-rA``'s words, subtests, and a run whose report machinery was replaced."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

TESTS = """\
import unittest

import pytest


class T(unittest.TestCase):
    def test_subtests_pass_and_skip(self):
        for i in range(2):
            with self.subTest(i=i):
                if i:
                    self.skipTest("absent")

    def test_a_subtest_fails(self):
        with self.subTest(i=0):
            self.assertEqual(1, 2)


def test_plain():
    pass


@pytest.mark.xfail(reason="known")
def test_known_bug():
    assert False


@pytest.fixture
def broken():
    raise RuntimeError("setup")


def test_setup_error(broken):
    pass
"""
PATCH = """\
import _pytest.reports

_pytest.reports.TestReport.from_item_and_call = staticmethod(
    _pytest.reports.TestReport.from_item_and_call
)


def test_x():
    pass
"""


def run(tmp_path: Path, source: str) -> dict:
    (tmp_path / "test_it.py").write_text(source)
    report = tmp_path / "report.json"
    env = {**os.environ, "CHEETAH_GRADE_REPORT": str(report), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    args = ["-p", "cheetah.tasks.grade_plugin", "-p", "no:cacheprovider", "-q", "test_it.py"]
    subprocess.run([sys.executable, "-m", "pytest", *args], cwd=tmp_path, env=env, check=False)
    return json.loads(report.read_text())


def test_outcomes_in_the_words_of_the_summary(tmp_path):
    got = run(tmp_path, TESTS)
    assert got["outcomes"] == {
        "test_it.py::T::test_subtests_pass_and_skip": "PASSED",  # a skipped subtest is no failure
        "test_it.py::T::test_a_subtest_fails": "FAILED",
        "test_it.py::test_plain": "PASSED",
        "test_it.py::test_known_bug": "XFAIL",
        "test_it.py::test_setup_error": "ERROR",
    }
    assert got["tampered"] == []


def test_a_replaced_report_function_is_reported(tmp_path):
    got = run(tmp_path, PATCH)
    assert got["outcomes"] == {"test_it.py::test_x": "PASSED"}
    assert got["tampered"] == ["TestReport.from_item_and_call"]
