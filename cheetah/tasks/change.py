"""The agent's change: what crosses from the workspace the agent shaped to the grading session.

A model trained on the grade finds the cheapest way to a passing test run, and the cheapest
ways are not fixes: rewrite the failing test, add a ``conftest.py`` or a runner config that
flips failures, plant bytecode of a "fixed" module, a ``*.dist-info`` whose entry point pytest
autoloads, a module that shadows a plugin. Listing such files to put back cannot keep up (each
pytest release reads another config name). So the grader never runs the checks where the agent
worked: it takes the agent's change as a text diff, keeps only what a source fix is made of,
and applies that to a fresh session of the pristine snapshot (``tasks/grader.py``), the way
SWE-bench's harness applies a model's patch to a clean checkout.

``agent_change`` compares the tree the agent got (``baseline``) with the tree it left. A
changed path crosses when it is

- a text file (UTF-8, no NUL byte; links, FIFOs and caches never reach a tree at all:
  ``core/safefs.read_tree`` skips them, and ``__pycache__``/``*.pyc``);
- not test code: no file of the task's checks, hidden files or test patch, nothing under a
  ``tests``/``test``/``testing`` directory, no ``test_*.py``/``*_test.py``/``tests.py``
  (the task brings its own tests);
- not runner or interpreter configuration: no ``conftest.py``, ``pytest.ini``,
  ``.pytest.ini``, ``pytest.toml``, ``.pytest.toml``, ``tox.ini``, ``setup.cfg``,
  ``pyproject.toml``, ``sitecustomize.py``, ``usercustomize.py``, ``*.pth``;
- not package metadata: nothing under ``*.dist-info``, ``*.egg-info``, no ``*.egg-link``;
- if the agent created it, inside a package directory the baseline already had (a directory
  holding ``__init__.py``): a new top-level module, or one beside the tests, could be imported
  in place of the standard library, pytest or one of its plugins.

A path the task's reference patch touches crosses whatever its kind, and so does any path of a
kind the reference patch touches (a refactor that renames a function updates its tests; a fix
that adds a module at the top of a flat repo); the checks' own files cross only when the
reference patch changes that very file. Everything else is reported in ``ungraded`` with the
reason, and ``touched`` still lists every path the agent changed.

``runner_flags`` is the second half: code under test runs in the test process, so a diff whose
non-test code, on the lines it adds, reaches for the test runner or for other modules' objects
without naming them cannot be graded honestly and is flagged (the grade is 0 with the reason),
unless the reference patch does the same in that file. It looks at tokens, not text (comments
and docstrings are free): the runner's names (``pytest``, ``_pytest``, ``pluggy``,
``unittest``, ``atexit``) as names or module strings; ``importlib``, ``__import__``, ``gc``,
``ctypes``, ``builtins``; the builtins ``exec``, ``eval``, ``compile``; and the attributes
that lead to loaded modules, frames, import hooks and tracing (``.modules``, ``.f_globals``,
``.f_back``, ``._getframe``, ``.meta_path``, ``.settrace``, ``.__subclasses__``, ...). A name
spelled in rot13 still needs one of these to reach a module; the grader's own plugin also
reports pytest functions replaced at run time (``tasks/grade_plugin.py``).

Deliberately left out: reading intent from code beyond those tokens (a fix may legitimately
need ``importlib``; the flag then costs it the reward unless the task's reference does the
same); binary fixes (a task whose reference patch ships binary data is out of scope: unified
diffs carry text).
"""

from __future__ import annotations

import difflib
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from cheetah.tasks.patch import (
    PatchError,
    changed_files,
    diff_trees,
    patch_files,
    patch_paths,
    with_changes,
)
from cheetah.tasks.schema import Task

CONFIG_NAMES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        ".pytest.ini",
        "pytest.toml",
        ".pytest.toml",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
TEST_DIRS = frozenset({"tests", "test", "testing"})
METADATA_SUFFIXES = (".dist-info", ".egg-info")
# Names (anywhere on an added line) of the runner and of ways to reach modules without naming them.
RUNNER_NAMES = frozenset(
    {"pytest", "_pytest", "pluggy", "unittest", "atexit", "importlib", "__import__", "gc"}
    | {"ctypes", "builtins", "__builtins__"}
)
BARE_CALLS = frozenset({"exec", "eval", "compile"})  # builtins, not ``re.compile``
# Attributes that lead to other modules' objects: loaded modules, frames, import hooks, tracing.
INTERNAL_ATTRS = frozenset(
    {"modules", "settrace", "setprofile", "_getframe", "meta_path", "path_hooks"}
    | {"f_globals", "f_locals", "f_back", "f_builtins", "tb_frame", "gi_frame", "cr_frame"}
    | {"__globals__", "__subclasses__"}
)
_RUNNER_STRING = re.compile(r"^(_?pytest|pluggy|unittest|atexit)(\..*)?$")

Kind = str  # "binary", "test", "config", "metadata", "new outside a package"


@dataclass(frozen=True)
class AgentChange:
    """The agent's change as the grader takes it (see the module docstring)."""

    files: dict[str, bytes | None]  # path -> content to grade with (None: deleted)
    diff: str  # the unified diff of exactly ``files`` against the baseline
    touched: list[str] = field(default_factory=list)  # every path the agent changed
    ungraded: dict[str, str] = field(default_factory=dict)  # path -> why it did not cross


def _is_text(data: bytes | None) -> bool:
    if data is None:
        return True
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def is_test_path(rel: str) -> bool:
    """Test code by its place or name (``tests/``, ``test_*.py``, ``*_test.py``, ``tests.py``)."""
    p = PurePosixPath(rel)
    name = p.name
    return (
        bool(TEST_DIRS.intersection(p.parts[:-1]))
        or (name.startswith("test_") and name.endswith(".py"))
        or name.endswith("_test.py")
        or name == "tests.py"
    )


def path_kind(rel: str) -> Kind | None:
    """The kind of file that never crosses by its path alone, or None for source."""
    p = PurePosixPath(rel)
    if any(part.endswith(METADATA_SUFFIXES) for part in p.parts) or p.name.endswith(".egg-link"):
        return "metadata"
    if p.name in CONFIG_NAMES or p.suffix == ".pth":
        return "config"
    if is_test_path(rel):
        return "test"
    return None


def package_dirs(tree: dict[str, bytes]) -> set[str]:
    """Directories that hold an ``__init__.py`` (posix, relative; never the root)."""
    return {
        str(PurePosixPath(rel).parent)
        for rel in tree
        if PurePosixPath(rel).name == "__init__.py" and "/" in rel
    }


def _in_package(rel: str, packages: set[str]) -> bool:
    return any(str(parent) in packages for parent in PurePosixPath(rel).parents)


def task_test_files(task: Task | None) -> set[str]:
    """The files the task brings at grading: its checks' files, hidden files, test patch."""
    if task is None:
        return set()
    files = {c.test_file for c in task.checks if c.test_file} | set(task.hidden_files)
    if task.test_patch:
        try:
            files |= patch_paths(task.test_patch)
        except PatchError:
            pass
    return files


def reference_paths(task: Task | None) -> set[str]:
    """The files the task's reference patch changes (none when it has none or it is broken)."""
    if task is None or not task.reference_patch:
        return set()
    try:
        return patch_paths(task.reference_patch)
    except PatchError:
        return set()


def _why_not(
    rel: str,
    before: bytes | None,
    after: bytes | None,
    packages: set[str],
    task_tests: set[str],
    ref_paths: set[str],
    ref_kinds: set[Kind],
) -> str | None:
    """Why the change of ``rel`` does not cross, or None when it does."""
    if rel in ref_paths:
        return None
    if not _is_text(after):
        return "not a text file"
    if rel in task_tests:
        return "a file the task brings its own version of"
    kind = path_kind(rel)
    if kind is None and before is None and not _in_package(rel, packages):
        kind = "new outside a package"
    if kind is None or kind in ref_kinds:
        return None
    return {
        "metadata": "package metadata (*.dist-info, *.egg-info)",
        "config": "runner or interpreter configuration",
        "test": "test code (the task brings its own tests)",
        "new outside a package": "a new file outside the repo's packages (it could shadow a "
        "module)",
    }[kind]


def _ref_kinds(ref_paths: set[str], baseline: dict[str, bytes], packages: set[str]) -> set[Kind]:
    kinds = {path_kind(p) for p in ref_paths}
    if any(p not in baseline and not _in_package(p, packages) for p in ref_paths):
        kinds.add("new outside a package")
    return {k for k in kinds if k is not None}


def agent_change(
    task: Task | None, baseline: dict[str, bytes], current: dict[str, bytes]
) -> AgentChange:
    """What of the agent's change is graded (see the module docstring); ``task`` None for
    work without a task (``cheetah agent --sandbox``: no task tests, no reference patch)."""
    packages = package_dirs(baseline)
    ref_paths = reference_paths(task)
    ref_kinds = _ref_kinds(ref_paths, baseline, packages)
    task_tests = task_test_files(task)
    files: dict[str, bytes | None] = {}
    ungraded: dict[str, str] = {}
    touched = changed_files(baseline, current)
    for rel in touched:
        before, after = baseline.get(rel), current.get(rel)
        why = _why_not(rel, before, after, packages, task_tests, ref_paths, ref_kinds)
        if why is None:
            files[rel] = after
        else:
            ungraded[rel] = why
    return AgentChange(
        files, diff_trees(baseline, with_changes(baseline, files)), touched, ungraded
    )


def _added_lines(before: bytes | None, after: bytes) -> set[int]:
    """1-based numbers of the lines of ``after`` that ``before`` does not have."""
    a = [] if before is None else before.decode("utf-8", "replace").splitlines()
    b = after.decode("utf-8", "replace").splitlines()
    out: set[int] = set()
    for tag, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            out.update(range(j1 + 1, j2 + 1))
    return out


def _token_use(tok: tokenize.TokenInfo, after_dot: bool) -> str | None:
    """What one token reaches for (see the module docstring), or None."""
    if tok.type == tokenize.NAME:
        if tok.string in RUNNER_NAMES or (tok.string in BARE_CALLS and not after_dot):
            return tok.string
        if after_dot and tok.string in INTERNAL_ATTRS:
            return f".{tok.string}"
    elif tok.type == tokenize.STRING:
        body = tok.string.lstrip("rbuRBUfF").strip("'\"")
        if _RUNNER_STRING.match(body) or body in RUNNER_NAMES | INTERNAL_ATTRS:
            return repr(body)
    return None


def _runner_uses(source: bytes, lines: set[int]) -> list[str]:
    """Names, attributes and strings on ``lines`` of a Python file that reach for the test
    runner or for other modules' objects without naming them."""
    try:
        tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    except (tokenize.TokenError, SyntaxError, UnicodeDecodeError):
        # Not Python that tokenizes: fall back to words on the added lines.
        text = source.decode("utf-8", "replace").splitlines()
        words = [
            w for n in sorted(lines) if n <= len(text) for w in re.findall(r"\w+", text[n - 1])
        ]
        return [w for w in words if w in RUNNER_NAMES | BARE_CALLS | INTERNAL_ATTRS]
    found: list[str] = []
    after_dot = False
    for tok in tokens:
        if tok.start[0] in lines and (use := _token_use(tok, after_dot)):
            found.append(use)
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            after_dot = tok.type == tokenize.OP and tok.string == "."
    return found


def _reference_after(task: Task | None, baseline: dict[str, bytes], rel: str) -> bytes | None:
    """The reference patch's version of ``rel`` (None when it does not touch it or fails)."""
    if rel not in reference_paths(task):
        return None

    def read(p: str) -> str | None:
        data = baseline.get(p)
        return None if data is None else data.decode("utf-8", "replace")

    try:
        data = patch_files(task.reference_patch or "", read).get(rel)  # type: ignore[union-attr]
    except PatchError:
        return None
    return None if data is None else data.encode("utf-8")


def runner_flags(task: Task | None, baseline: dict[str, bytes], change: AgentChange) -> list[str]:
    """Why the change cannot be graded honestly: each non-test Python file whose added lines
    reach for the test runner (see the module docstring); empty when none does."""
    flags: list[str] = []
    for rel, after in sorted(change.files.items()):
        if after is None or not rel.endswith(".py") or path_kind(rel) == "test":
            continue
        before = baseline.get(rel)
        uses = _runner_uses(after, _added_lines(before, after))
        if not uses:
            continue
        ref = _reference_after(task, baseline, rel)
        if ref is not None and _runner_uses(ref, _added_lines(before, ref)):
            continue  # the reference fix does it too
        names = ", ".join(dict.fromkeys(uses))
        flags.append(
            f"{rel}: code under test reaches for the test runner or the interpreter's "
            f"internals ({names})"
        )
    return flags
