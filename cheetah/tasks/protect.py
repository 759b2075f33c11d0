"""What the grader puts back before it runs the checks: the files that decide how tests run.

A model trained on the grade finds the cheapest way to a passing test run, and the cheapest
ways are not fixes: rewrite the failing test, add a ``conftest.py`` whose hook marks every
report passed, set pytest options in ``pyproject.toml``, or drop a ``pytest.py`` at the top
of the repo that prints the summary lines (``python -m pytest`` imports from the working
directory first). Each of these earned full reward before this module. So, before the hidden
files go in, ``protected_changes`` lists every change of the agent's to

- a file that holds one of the task's checks (the test file of a test id), as the task
  defined it;
- a file that configures or extends pytest: any ``conftest.py``, ``pytest.ini``,
  ``tox.ini``, ``setup.cfg``, ``pyproject.toml``, ``sitecustomize.py``, ``usercustomize.py``;
- a new module that would be imported in place of another one: a new top-level module or
  package (or one beside a check's test file, where pytest puts that directory first on
  ``sys.path``) named like a standard-library module, the test runner's own packages, or one
  of the repo's own packages

and the grader restores them as they were (deleting what the agent created). The file
keeps the agent's version if the task's reference patch changes it too (a refactor that
renames a function updates its tests; a doctest lives in the module it tests). The grade
still reports every file the agent touched; the restored ones are listed in
``Grade.restored``.

Deliberately left out: code under test that subverts pytest from inside the test process
(a fixed module that patches ``_pytest`` when imported). The checks run in the same process
as the code they check, as in every SWE-bench-style grader; catching that would take a
runner outside the workspace's Python, which the tasks' own ``test_command`` rules out.
"""

from __future__ import annotations

import sys
from pathlib import PurePosixPath

from cheetah.tasks.patch import PatchError, patch_paths
from cheetah.tasks.schema import Task

RUNNER_FILES = frozenset(
    {
        "conftest.py",
        "pytest.ini",
        "tox.ini",
        "setup.cfg",
        "pyproject.toml",
        "sitecustomize.py",
        "usercustomize.py",
    }
)
RUNNER_MODULES = frozenset(
    {"pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli"}
)


def _module_name(rel: str, parent: str) -> str | None:
    """The module ``rel`` defines when ``parent`` is on ``sys.path``, else None."""
    path, base = PurePosixPath(rel), PurePosixPath(parent)
    try:
        parts = path.relative_to(base).parts if parent else path.parts
    except ValueError:
        return None
    if len(parts) == 1 and parts[0].endswith(".py"):
        return parts[0][:-3]
    if len(parts) >= 2:
        return parts[0]  # a file anywhere in a package directory there
    return None


def _own_packages(baseline: dict[str, bytes]) -> set[str]:
    names = set()
    for rel in baseline:
        parts = PurePosixPath(rel).parts
        if len(parts) == 1 and rel.endswith(".py"):
            names.add(rel[:-3])
        elif len(parts) == 2 and parts[1] == "__init__.py":
            names.add(parts[0])
    return names


def reference_files(task: Task) -> set[str]:
    """The files the task's reference patch changes (none when it has none or it is broken)."""
    if not task.reference_patch:
        return set()
    try:
        return patch_paths(task.reference_patch)
    except PatchError:
        return set()


def _existed(baseline: dict[str, bytes], parent: str, module: str) -> bool:
    """Whether the baseline has ``module`` (file or package) under ``parent`` already."""
    stem = f"{parent}/{module}" if parent else module
    return f"{stem}.py" in baseline or any(rel.startswith(stem + "/") for rel in baseline)


def protected_changes(
    task: Task, baseline: dict[str, bytes], current: dict[str, bytes]
) -> dict[str, bytes | None]:
    """The changes that put the protected files back (see the module docstring): each path
    to its baseline content, or None where the agent created it."""
    check_files = {c.test_file for c in task.fail_to_pass + task.pass_to_pass if c.test_file}
    shadowable = RUNNER_MODULES | set(sys.stdlib_module_names) | _own_packages(baseline)
    parents = {str(PurePosixPath(f).parent) for f in check_files}
    first_on_path = {""} | {"" if p == "." else p for p in parents}
    allowed = reference_files(task)
    out: dict[str, bytes | None] = {}
    for rel in sorted(baseline.keys() | current.keys()):
        before, after = baseline.get(rel), current.get(rel)
        if before == after or rel in allowed:
            continue
        shadows = before is None and any(
            (m := _module_name(rel, d)) in shadowable and not _existed(baseline, d, m)
            for d in first_on_path
        )
        if rel in check_files or PurePosixPath(rel).name in RUNNER_FILES or shadows:
            out[rel] = before
    return out
