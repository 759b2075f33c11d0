"""The pytest plugin the grader loads to learn each test's outcome: it never reads stdout.

The grader writes this file's source into a directory it makes outside the workspace, under a
module name made per run (``tasks/pytest_run.py``), loads it with ``-p`` while plugin autoload is
off, and reads the JSON file it writes at the end of the session (path in
``CHEETAH_GRADE_REPORT``, read at import, before any code under test runs). Outcomes use
pytest's ``-rA`` words: PASSED, FAILED, ERROR (setup or teardown failed, or the collector),
SKIPPED, XFAIL, XPASS; a failure or error is never overwritten by a later phase, and a failed
subtest (``unittest``'s ``subTest``, pytest's ``subtests``) fails its test.

It also watches the run it reports on: it notes pytest's and pluggy's functions that make,
carry and log a test's report when it is imported (before any conftest or code under test),
and at the end lists in ``tampered`` each one that was replaced, and each registered plugin
whose module lives in the workspace outside its test code (a plugin the change planted: the
grader never takes test code or ``conftest.py`` from the agent).
The grader fails every check of a tampered run and flags it.

A test module that calls ``unittest.main()`` at import (no ``__name__`` guard) would parse
pytest's own arguments and end the process; this plugin replaces ``unittest.main`` with a
no-op for the run, so such a module is collected like any other (pytest runs its
``TestCase`` classes itself). The task generator loads this plugin too, so a task's tests run
the same way when it is made and when it is graded.

It runs inside the task's Python, so it uses the standard library and pytest only, no cheetah
import. Deliberately left out: code under test that patches this module's own functions or
objects the list does not name (the grader also flags diffs that reach for the runner:
``tasks/change.py``).
"""

import json
import os
import sys
import unittest

import _pytest.python
import _pytest.reports
import _pytest.runner
import pluggy

_REPORT = os.environ.get("CHEETAH_GRADE_REPORT", "")


def _no_main(*args, **kwargs):
    """``unittest.main`` while pytest runs: the module's tests are pytest's to collect and run."""
    return None


unittest.main = _no_main
_SEVERITY = {"FAILED": 3, "ERROR": 3, "XPASS": 1, "XFAIL": 1, "SKIPPED": 1, "PASSED": 0}
_outcomes: dict = {}


def _watched():
    """(label, owner, attribute) of the functions a report passes through (those this pytest
    and pluggy have)."""
    report, base = _pytest.reports.TestReport, _pytest.reports.BaseReport
    runner, python = _pytest.runner, _pytest.python
    caller = getattr(pluggy, "HookCaller", None)
    names = [
        ("TestReport.from_item_and_call", report, "from_item_and_call"),
        ("TestReport.__init__", report, "__init__"),
        ("BaseReport.passed", base, "passed"),
        ("BaseReport.failed", base, "failed"),
        ("runner.call_and_report", runner, "call_and_report"),
        ("runner.runtestprotocol", runner, "runtestprotocol"),
        ("runner.pytest_runtest_makereport", runner, "pytest_runtest_makereport"),
        ("runner.CallInfo.from_call", getattr(runner, "CallInfo", None), "from_call"),
        ("python.Function.runtest", python.Function, "runtest"),
        ("python.pytest_pyfunc_call", python, "pytest_pyfunc_call"),
        ("pluggy.HookCaller.__call__", caller, "__call__"),
        ("pluggy.PluginManager._hookexec", pluggy.PluginManager, "_hookexec"),
        ("pluggy.PluginManager.register", pluggy.PluginManager, "register"),
    ]
    return [(label, owner, name) for label, owner, name in names if owner is not None]


def _attribute(owner, name):
    return owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)


_ORIGINAL = [(label, owner, name, _attribute(owner, name)) for label, owner, name in _watched()]
_TEST_DIRS = {"tests", "test", "testing"}


def _planted(rel):
    """Whether a plugin module at ``rel`` (in the workspace) is not the repo's test code,
    which the grader never takes from the agent."""
    parts = rel.split(os.sep)
    name = parts[-1]
    return not (
        name == "conftest.py" or name.startswith("test_") or _TEST_DIRS.intersection(parts[:-1])
    )


def _tampered(session):
    out = [label for label, owner, name, was in _ORIGINAL if _attribute(owner, name) is not was]
    root = os.getcwd() + os.sep
    for plugin in session.config.pluginmanager.get_plugins():
        module = plugin if hasattr(plugin, "__file__") else sys.modules.get(type(plugin).__module__)
        path = os.path.realpath(getattr(module, "__file__", None) or "")
        if path.startswith(root) and _planted(path[len(root) :]):
            out.append(f"plugin from the workspace: {path[len(root) :]}")
    return out


def _record(nodeid, outcome):
    old = _outcomes.get(nodeid)
    if old is None or _SEVERITY[outcome] > _SEVERITY[old]:
        _outcomes[nodeid] = outcome


def pytest_runtest_logreport(report):
    if type(report).__name__ == "SubtestReport" and not report.failed:
        return  # a subtest that passed or skipped says nothing against its test
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.failed:
            outcome = "FAILED"
        elif report.skipped:
            outcome = "XFAIL" if xfail else "SKIPPED"
        else:
            outcome = "XPASS" if xfail else "PASSED"
    elif report.failed:
        outcome = "ERROR"
    elif report.skipped:
        outcome = "XFAIL" if xfail else "SKIPPED"
    else:
        return
    _record(report.nodeid, outcome)


def pytest_collectreport(report):
    if report.failed:
        _record(report.nodeid, "ERROR")


def pytest_sessionfinish(session, exitstatus):
    if not _REPORT:
        return
    fd = os.open(_REPORT, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        report = {"outcomes": _outcomes, "exitstatus": int(exitstatus)}
        json.dump({**report, "tampered": _tampered(session)}, f)
