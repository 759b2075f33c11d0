"""The parts of a demonstration that checks its own fix: run the failing test, read the result,
and after a wrong first edit, edit again (issue 46, "verification in the loop").

- ``named_tests``: the failing tests the query names (what an agent with only the report can
  run); ``check_call``: the ``run_terminal`` call that runs them, short traceback, a timeout.
- ``wrong_variant``: a plausible wrong fix of a one-token change, the kind a model makes (the
  fix's operator swapped for another of its family, ``<`` for ``<=``; an integer off on the
  other side): the demonstration edits it first, runs the test, sees it fail, and edits again.
- ``passing_line``: the line of a passing run the closing answer quotes (from the real output).

Deliberately left out: wrong variants of changes over one token (a moved line, a dropped
``if``), and of ``and``/``or``, ``is``/``is not``, ``==``/``!=`` (their families have no third
member, and the "wrong" one would be the bug itself).
"""

from __future__ import annotations

import hashlib
import io
import re
import shlex
import tokenize

from cheetah.harness.protocol import render_call
from cheetah.tasks.schema import Task

TEST_TIMEOUT_S = 120  # generous: the first run in a fresh session imports the package
_FAMILIES = (("<", "<=", ">", ">="), ("+", "-", "*"), ("*", "/", "//"))
_PASSED = re.compile(r"\b\d+ passed\b")


def named_tests(task: Task) -> list[str]:
    """The failing tests of ``task`` its query names, in order (none: it names none)."""
    return [c.test for c in task.fail_to_pass if c.test and c.test in task.query]


def check_command(task: Task) -> str:
    """The command that runs the tests the query names (the whole suite when it names none)."""
    ids = " ".join(shlex.quote(t) for t in named_tests(task))
    return f"python -m pytest -q --tb=line {ids}".rstrip()


def check_call(task: Task) -> str:
    return render_call(
        "run_terminal", {"command": check_command(task), "timeout": str(TEST_TIMEOUT_S)}
    )


def passing_line(result: str) -> str | None:
    """pytest's summary line (``1 passed in 0.03s``) of a run that exited 0, else None."""
    if "exit code: 0" not in result:
        return None
    for line in result.splitlines():
        if _PASSED.search(line) and "failed" not in line and "error" not in line:
            return line.strip(" =")
    return None


def _tokens(text: str) -> list[tokenize.TokenInfo] | None:
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    skip = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    return [t for t in toks if t.type not in skip]


def _alternatives(old: str, new: str) -> list[str]:
    """Other fixes of the family of ``new`` than ``new`` and the bug ``old``."""
    if old.isdigit() and new.isdigit():  # off by one: the other side of the fix
        other = 2 * int(new) - int(old)
        return [str(other)] if other >= 0 and other != int(old) else []
    for family in _FAMILIES:
        if old in family and new in family:
            return [t for t in family if t not in (old, new)]
    return []


def wrong_variant(before: str, old: str, new: str, seed: str) -> str | None:
    """A wrong fix for the edit ``old`` -> ``new`` of file text ``before``: ``new`` with its one
    changed token replaced by another of its family (chosen by ``seed``), unique in the file
    once written (so the edit that corrects it can name it); None when there is none."""
    lead = "\n" if new.startswith("\n") else ""
    a, b = _tokens(old.removeprefix("\n")), _tokens(new.removeprefix("\n"))
    if a is None or b is None or len(a) != len(b):
        return None
    diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x.string != y.string]
    if len(diff) != 1:
        return None
    x, y = a[diff[0]], b[diff[0]]
    options = _alternatives(x.string, y.string)
    if not options:
        return None
    pick = options[hashlib.sha256(seed.encode()).digest()[0] % len(options)]
    lines = new.removeprefix("\n").splitlines(keepends=True)
    (row, col), (end_row, end_col) = y.start, y.end
    if row != end_row:
        return None
    line = lines[row - 1]
    lines[row - 1] = line[:col] + pick + line[end_col:]
    wrong = lead + "".join(lines)
    written = before.replace(old.removeprefix("\n"), wrong.removeprefix("\n"), 1)
    if written.count(wrong.removeprefix("\n")) != 1:
        return None
    return wrong


def retry_turns(task: Task, before: str, path: str, old: str, new: str) -> list[str] | None:
    """A wrong fix of ``old`` -> ``new`` in ``path`` (file text ``before``), the test run that
    shows it failing and the right edit: three assistant messages (None: no wrong variant)."""
    wrong = wrong_variant(before, old, new, task.id)
    if wrong is None:
        return None
    first = {"path": path, "old_str": old, "new_str": wrong}
    again = {"path": path, "old_str": wrong, "new_str": new}
    return [
        "Applying the fix.\n" + render_call("edit_file", first),
        "Running the failing test.\n" + check_call(task),
        "The test still fails: that edit was wrong.\n" + render_call("edit_file", again),
    ]
