"""How a repo's tests run, as the task generator finds it: a pytest command and what it is given.

pytest is the one runner, because outcomes are read from the grade plugin's report
(``tasks/pytest_run.py``), never from printed text. That covers more than pytest-style suites:
pytest runs ``unittest.TestCase`` classes itself, the grade plugin turns a module's
``unittest.main()`` at import into a no-op, and a file given as a path is collected whatever
its name. So finding how a repo's tests run means choosing what pytest is given, from the first
of these that says anything (field by field: a command from one, paths from another):

1. what the user gives the generator (``--test-command``, ``--test-path``);
2. the package list's ``test_command`` / ``test_paths`` (``tasks fetch`` records them in
   ``fetched.json``);
3. the repo's own ``[tool.cheetah]`` table in ``pyproject.toml`` (``test_command``,
   ``test_paths``);
4. detection, tried in order until a run passes a test: pytest as the repo configures it (its
   config file, ``testpaths``, ``python_files``; doctests only where that config asks), then
   pytest over the files named like tests (``test*.py``, ``*_test.py``, ``tests.py`` that
   define a test function or a ``TestCase``), given as paths; a detected layout whose run
   stops at options pytest does not know (the repo's ``addopts`` name a plugin its
   environment lacks) is tried once more with those ``addopts`` dropped (``-o addopts=``).

A test command must run pytest (``python -m pytest ...``): the grader appends its own
arguments and the test files. Everything here is read from the pristine repo when tasks are
made and stored in each task (``Task.test_command``; test paths become the checks' files), so
no file the agent edits decides how it is graded (``pyproject.toml`` never crosses to the
grading session: ``tasks/change.py``).

Deliberately left out: runners other than pytest (``python -m unittest`` with a
``load_tests`` hook, nose, tox or make targets: no report to read outcomes from), and adding
oddly named files to a suite pytest already collects (files by name are tried only when
pytest's own collection passes nothing).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

DEFAULT_TEST_COMMAND = (
    "python -m pytest -q -rA --tb=short -p no:cacheprovider --continue-on-collection-errors"
)
_TEST_NAME = re.compile(r"^(test[^/]*|[^/]*_test)\.py$")
_SKIP_DIRS = re.compile(
    r"(^|/)(\.[^/]*|venv|env|build|dist|site-packages|node_modules|__pycache__|docs?)/"
)
_DEFINES_TESTS = re.compile(r"^\s*(async\s+)?def test|TestCase\b", re.M)


class LayoutError(ValueError):
    """A test setting cannot be used: the message names where it came from and why."""


@dataclass(frozen=True)
class SuiteSettings:
    """What someone said about how the repo's tests run (each part optional)."""

    test_command: str | None = None
    test_paths: tuple[str, ...] = ()
    source: str = ""  # where it was said, for messages: "--test-command", "the package list", ...


@dataclass(frozen=True)
class SuiteLayout:
    """One way to run the repo's tests: ``command`` (a pytest invocation) with ``paths``
    appended (none: pytest collects as the repo configures it); ``runner`` says it in words."""

    command: str
    paths: tuple[str, ...]
    runner: str

    @property
    def custom_command(self) -> str | None:
        """The command to store in a task (None: the grader's own default)."""
        return None if self.command == DEFAULT_TEST_COMMAND else self.command


def _settings_from(data: object, where: str) -> SuiteSettings:
    if not isinstance(data, dict):
        raise LayoutError(f"{where} is not a table")
    unknown = set(data) - {"test_command", "test_paths"}
    if unknown:
        raise LayoutError(f"{where}: unknown keys {sorted(unknown)} (test_command, test_paths)")
    command, paths = data.get("test_command"), data.get("test_paths", [])
    if command is not None and (not isinstance(command, str) or not command.strip()):
        raise LayoutError(f"{where}: test_command must be a non-empty string")
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise LayoutError(f"{where}: test_paths must be a list of paths (strings)")
    return SuiteSettings(command, tuple(paths), where)


def repo_settings(repo: Path) -> SuiteSettings:
    """The repo's ``[tool.cheetah]`` table (empty settings when it has none)."""
    pyproject = repo / "pyproject.toml"
    if not pyproject.is_file():
        return SuiteSettings()
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError):
        return SuiteSettings()  # not ours to judge: pytest reports a broken config itself
    table = data.get("tool", {}).get("cheetah")
    if table is None:
        return SuiteSettings()
    return _settings_from(table, f"{pyproject} [tool.cheetah]")


def files_named_like_tests(repo: Path) -> list[str]:
    """Repo-relative files named like tests that define a test function or a ``TestCase``
    (outside hidden, build, docs and environment folders)."""
    out = []
    for f in sorted(repo.rglob("*.py")):
        rel = f.relative_to(repo).as_posix()
        if not _TEST_NAME.match(f.name) or _SKIP_DIRS.search(rel) or f.name == "testing.py":
            continue
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if _DEFINES_TESTS.search(text):
            out.append(rel)
    return out


def _checked_paths(repo: Path, settings: SuiteSettings) -> tuple[str, ...]:
    for p in settings.test_paths:
        pure = PurePosixPath(p)
        if pure.is_absolute() or ".." in pure.parts:
            raise LayoutError(f"{settings.source}: test path {p!r} is not inside the repo")
        if not (repo / p).exists():
            raise LayoutError(f"{settings.source}: test path {p!r} is not in {repo}")
    return settings.test_paths


def suite_layouts(repo: Path, *given: SuiteSettings) -> list[SuiteLayout]:
    """The ways to try, in order (see the module docstring); ``given`` highest precedence
    first, the repo's ``[tool.cheetah]`` read here after them."""
    said = [s for s in (*given, repo_settings(repo)) if s.test_command or s.test_paths]
    if said:
        command = next((s for s in said if s.test_command), None)
        paths = next((s for s in said if s.test_paths), None)
        words = [f"test_command from {command.source}"] if command else ["pytest"]
        if paths:
            words.append(f"test_paths from {paths.source}")
        return [
            SuiteLayout(
                command.test_command if command and command.test_command else DEFAULT_TEST_COMMAND,
                _checked_paths(repo, paths) if paths else (),
                ", ".join(words),
            )
        ]
    tries = [SuiteLayout(DEFAULT_TEST_COMMAND, (), "pytest")]
    by_name = files_named_like_tests(repo)
    if by_name:
        tries.append(
            SuiteLayout(DEFAULT_TEST_COMMAND, tuple(by_name), "pytest, test files by name")
        )
    return tries


def without_addopts(layout: SuiteLayout) -> SuiteLayout:
    """``layout`` with the repo's ``addopts`` dropped: the try after a run that stopped at
    options of plugins the environment lacks (``-n`` without pytest-xdist, ...)."""
    return SuiteLayout(
        f"{layout.command} -o addopts=",
        layout.paths,
        f"{layout.runner}, the repo's addopts dropped",
    )


def is_test_file(rel: str) -> bool:
    """Whether the generator treats ``rel`` as test code by its name alone (never mutated)."""
    return bool(_TEST_NAME.match(PurePosixPath(rel).name))
