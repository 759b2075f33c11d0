"""The pytest plugin the grader loads to learn each test's outcome: it never reads stdout.

The grader writes this file's source into a directory it makes outside the workspace, under a
module name made per run (``tasks/grader.py``), loads it with ``-p`` while plugin autoload is
off, and reads the JSON file it writes at the end of the session (path in
``CHEETAH_GRADE_REPORT``, read at import, before any code under test runs). Outcomes use
pytest's ``-rA`` words: PASSED, FAILED, ERROR (setup or teardown failed, or the collector),
SKIPPED, XFAIL, XPASS; a failure or error is never overwritten by a later phase.

It runs inside the task's Python, so it uses the standard library only and no cheetah import.
Deliberately left out: defending against code under test that patches this plugin from inside
the same process (the grader flags diffs that reach for the runner: ``tasks/change.py``).
"""

import json
import os

_REPORT = os.environ.get("CHEETAH_GRADE_REPORT", "")
_SEVERITY = {"FAILED": 3, "ERROR": 3, "XPASS": 1, "XFAIL": 1, "SKIPPED": 1, "PASSED": 0}
_outcomes: dict = {}


def _record(nodeid, outcome):
    old = _outcomes.get(nodeid)
    if old is None or _SEVERITY[outcome] > _SEVERITY[old]:
        _outcomes[nodeid] = outcome


def pytest_runtest_logreport(report):
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
        json.dump({"outcomes": _outcomes, "exitstatus": int(exitstatus)}, f)
