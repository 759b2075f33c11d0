"""Grade a workspace after the agent stops: hidden checks, conventions, one reward.

Order matters: first every process the agent left running is killed, and the
agent's changes are measured against the baseline (the files as the agent got
them): touched files, out-of-scope files, new ruff problems in touched Python
files. Then the files that decide how the tests run (the checks' own test files,
pytest's config and plugins, new modules that would shadow others) are put back as
they were (``tasks/protect.py``: rewriting a failing test is not a fix). Only then
are the hidden files written in and the test patch applied (overwriting whatever the
agent put at those paths, so an agent can not pre-empt a hidden test), and the
checks run through ``workspace.exec`` with timeouts.
Correctness is all checks passing.

The grader sees the workspace only as a ``TaskSession`` (file trees in and out,
commands), so it grades a local copy, an in-process isolated session and a session
on a remote env server alike.

The reward is ``correctness_weight * correct + conventions_weight * conventions``,
the conventions term counted only for a correct result by default (otherwise doing
nothing would earn it). Everything that went into it is in the returned ``Grade``.

Test-id checks run as one pytest call over the files that hold them (``-rA`` gives
each test's outcome); an id pytest did not report counts as failed ("missing").
Ruff runs on this host on file contents (it only reads them; the repo's root ruff
settings are copied beside them), so lint does not depend on what a sandbox image
ships.

Deliberately left out: partial credit for some checks passing, flaky-test reruns,
style checks beyond ruff.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re
import shlex
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from ruff.__main__ import find_ruff_bin

from cheetah.core.workspace import PathError
from cheetah.harness.trajectory import Trajectory
from cheetah.tasks.patch import PatchError, changed_files, diff_trees, patch_tree, with_changes
from cheetah.tasks.protect import protected_changes
from cheetah.tasks.schema import Check, Task
from cheetah.tasks.session import TaskSession

Outcome = Literal["passed", "failed", "error", "missing", "timeout"]
_SUMMARY = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL) (.+?)(?: - .*)?$")
_SECTION = re.compile(r"^_{3,} (.+?) _{3,}$")


class GraderConfig(BaseModel):
    """How a workspace is graded. One source of truth: eval, validate and the training run's
    ``[grader]`` section all take it."""

    model_config = ConfigDict(extra="forbid")

    check_timeout_s: float = Field(
        120.0, gt=0.0, description="limit for each pytest call or command check"
    )
    correctness_weight: float = Field(
        0.8, ge=0.0, description="weight of 'all checks pass' in the reward"
    )
    conventions_weight: float = Field(0.2, ge=0.0, description="weight of the conventions score")
    conventions_only_if_correct: bool = Field(
        True, description="count conventions only for a correct result"
    )
    lint_penalty: float = Field(0.25, ge=0.0, description="conventions lost per new ruff problem")
    scope_penalty: float = Field(
        0.5, ge=0.0, description="conventions lost per file touched out of scope"
    )
    lint: bool = Field(True, description="compare ruff problems in touched .py files")
    default_lint_select: str = Field(
        "E4,E7,E9,F",
        description="ruff rules for repos without their own ruff config (the repo's "
        "conventions win when it declares them)",
    )
    pytest_args: str = Field(
        "-rA --tb=short -p no:cacheprovider --continue-on-collection-errors",
        description="extra arguments for test-id checks",
    )
    python: str = Field("python", description="the interpreter that runs pytest in the workspace")
    detail_chars: int = Field(2000, ge=0, description="output kept per check in the grade")


class CheckResult(BaseModel):
    label: str
    kind: Literal["fail_to_pass", "pass_to_pass"]
    passed: bool
    outcome: Outcome
    detail: str = ""
    wall_s: float = 0.0


class Grade(BaseModel):
    """What the grader found; goes into ``Trajectory.grade`` (as a dict) and ``.reward``."""

    task_id: str
    correct: bool
    reward: float
    conventions: float
    checks: list[CheckResult] = Field(default_factory=list)
    touched: list[str] = Field(default_factory=list)
    out_of_scope: list[str] = Field(default_factory=list)
    new_lint: list[str] = Field(default_factory=list)
    restored: list[str] = Field(
        default_factory=list, description="files put back before the checks (tasks/protect.py)"
    )
    errors: list[str] = Field(default_factory=list)
    diff: str = ""
    wall_s: float = 0.0

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]


Baseline = dict[str, bytes]


async def capture_baseline(workspace: TaskSession) -> Baseline:
    """The workspace's files as the agent gets them (call it before the agent runs)."""
    return await workspace.read_tree()


def _section(output: str, test_id: str) -> str:
    """The failure section pytest printed for ``test_id`` (``___ name ___``), if any."""
    name = test_id.split("::")[-1]
    lines = output.splitlines()
    for i, line in enumerate(lines):
        m = _SECTION.match(line)
        if m and m[1].split(".")[-1] == name:
            end = next(
                (
                    j
                    for j in range(i + 1, len(lines))
                    if _SECTION.match(lines[j]) or lines[j].startswith("=")
                ),
                len(lines),
            )
            return "\n".join(lines[i:end])
    return ""


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_pytest_outcomes(output: str) -> dict[str, str]:
    """Node id -> PASSED/FAILED/ERROR/... from pytest's ``-rA`` summary (colours, which a
    repo's own ``addopts = --color=yes`` turns on, are stripped first)."""
    out: dict[str, str] = {}
    for line in _ANSI.sub("", output).splitlines():
        m = _SUMMARY.match(line.strip())
        if m:
            out[m[2]] = m[1]
    return out


async def run_test_checks(
    workspace: TaskSession,
    checks: list[tuple[str, Check]],
    config: GraderConfig,
    files_present: set[str],
    command: str | None = None,
) -> list[CheckResult]:
    """All test-id checks in one pytest call over their files (``command`` + the files)."""
    if not checks:
        return []
    files = sorted({c.test_file for _, c in checks if c.test_file})
    present = [f for f in files if f in files_present]
    timeout = max(c.timeout_s or config.check_timeout_s for _, c in checks)
    output, timed_out, wall = "", False, 0.0
    if present:
        base = command or f"{config.python} -m pytest {config.pytest_args}"
        cmd = f"{base} {shlex.join(present)}"
        res = await workspace.exec(cmd, timeout_s=timeout, output_limit=400_000)
        output, timed_out, wall = res.output, res.timed_out, res.wall_s
    outcomes = parse_pytest_outcomes(output)
    results = []
    for kind, check in checks:
        assert check.test is not None
        got = outcomes.get(check.test)
        if timed_out:
            outcome: Outcome = "timeout"
            detail = f"pytest did not finish within {timeout:g} s\n{output[-config.detail_chars :]}"
        elif check.test_file not in present:
            outcome, detail = "missing", f"no file {check.test_file}"
        elif got is None:
            outcome, detail = (
                "missing",
                "pytest did not report this test\n" + output[-config.detail_chars :],
            )
        elif got in ("PASSED", "XPASS"):
            outcome, detail = "passed", ""
        else:
            outcome = "error" if got == "ERROR" else "failed"
            detail = (_section(output, check.test) or output)[-config.detail_chars :]
        results.append(
            CheckResult(
                label=check.label,
                kind=kind,  # type: ignore[arg-type]
                passed=outcome == "passed",
                outcome=outcome,
                detail=detail,
                wall_s=wall,
            )
        )
    return results


async def run_command_check(
    workspace: TaskSession, kind: str, check: Check, config: GraderConfig
) -> CheckResult:
    assert check.command is not None
    timeout = check.timeout_s or config.check_timeout_s
    res = await workspace.exec(check.command, timeout_s=timeout, output_limit=64_000)
    if res.timed_out:
        outcome: Outcome = "timeout"
        detail = f"did not finish within {timeout:g} s\n{res.output}"
    else:
        outcome = "passed" if res.exit_code == 0 else "failed"
        detail = "" if outcome == "passed" else f"exit status {res.exit_code}\n{res.output}"
    return CheckResult(
        label=check.label,
        kind=kind,  # type: ignore[arg-type]
        passed=outcome == "passed",
        outcome=outcome,
        detail=detail[-config.detail_chars :],
        wall_s=res.wall_s,
    )


async def run_checks(
    workspace: TaskSession, task: Task, config: GraderConfig, files_present: set[str]
) -> list[CheckResult]:
    """Every check of the task, in task order (fail-to-pass first).

    ``files_present``: the workspace's file paths (test-id checks whose file is
    missing fail as "missing" without running pytest on it).
    """
    tagged = [("fail_to_pass", c) for c in task.fail_to_pass] + [
        ("pass_to_pass", c) for c in task.pass_to_pass
    ]
    tests = [(k, c) for k, c in tagged if c.test is not None]
    test_results = iter(
        await run_test_checks(workspace, tests, config, files_present, task.test_command)
    )
    results = []
    for kind, check in tagged:
        if check.test is not None:
            results.append(next(test_results))
        else:
            results.append(await run_command_check(workspace, kind, check, config))
    return results


RUFF_CONFIGS = ("ruff.toml", ".ruff.toml", "pyproject.toml")


def has_ruff_config(tree: dict[str, bytes]) -> bool:
    """Whether the repo declares ruff settings at its root (ruff.toml, .ruff.toml, [tool.ruff])."""
    if "ruff.toml" in tree or ".ruff.toml" in tree:
        return True
    return b"[tool.ruff" in tree.get("pyproject.toml", b"")


async def _ruff(cwd: Path, rel: str, content: bytes, select: list[str]) -> list[str]:
    """Ruff problems in one file's content, as ``path: CODE message`` (no line numbers)."""
    proc = await asyncio.create_subprocess_exec(
        find_ruff_bin(),
        "check",
        "--no-cache",
        "--exit-zero",
        "--output-format=json",
        *select,
        "--stdin-filename",
        rel,
        "-",
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate(content)
    try:
        diags = json.loads(out or b"[]")
    except json.JSONDecodeError:
        return []
    return [f"{rel}: {d.get('code') or 'syntax'} {d.get('message', '')}" for d in diags]


async def new_lint_problems(
    tree: dict[str, bytes],
    baseline: Baseline,
    touched: list[str],
    default_select: str = "E4,E7,E9,F",
) -> list[str]:
    """Ruff problems in touched .py files that the baseline versions did not have.

    Problems are compared as a multiset of ``path: CODE message`` (lines shift when code
    is edited), so moving code keeps its count but restoring deleted code that had
    problems counts them as new. Ruff reads the repo's root settings (copied into a
    scratch directory with nothing else).
    """
    select = [] if has_ruff_config(tree) else ["--select", default_select]
    new: list[str] = []
    with tempfile.TemporaryDirectory(prefix="cheetah-lint-") as tmp:
        cwd = Path(tmp)
        for name in RUFF_CONFIGS:
            if name in tree:
                (cwd / name).write_bytes(tree[name])
        for rel in touched:
            if not rel.endswith(".py") or rel not in tree:
                continue
            after = Counter(await _ruff(cwd, rel, tree[rel], select))
            before = (
                Counter(await _ruff(cwd, rel, baseline[rel], select))
                if rel in baseline
                else Counter()
            )
            new.extend((after - before).elements())
    return new


def in_scope(path: str, scope: list[str]) -> bool:
    """Whether ``path`` matches a scope glob (fnmatch: ``*`` also crosses ``/``)."""
    return not scope or any(fnmatch.fnmatch(path, g) for g in scope)


def combine(correct: bool, conventions: float, config: GraderConfig) -> float:
    conv = conventions if (correct or not config.conventions_only_if_correct) else 0.0
    return config.correctness_weight * float(correct) + config.conventions_weight * conv


async def install_hidden(
    workspace: TaskSession, task: Task, tree: dict[str, bytes]
) -> dict[str, bytes]:
    """Write the hidden files and apply the test patch (only ever called at grading).

    ``tree`` is the workspace's current files; returns them as they are afterwards.
    """
    changes: dict[str, bytes | None] = {
        rel: content.encode("utf-8") for rel, content in task.hidden_files.items()
    }
    after = with_changes(tree, changes)
    if task.test_patch:
        patched = patch_tree(after, task.test_patch)
        changes.update(patched)
        after = with_changes(after, patched)
    if changes:
        await workspace.write_files(changes)
    return after


async def grade(
    task: Task, workspace: TaskSession, baseline: Baseline, config: GraderConfig | None = None
) -> Grade:
    """Grade the workspace as the agent left it. Never raises for problems of the task itself."""
    config = config or GraderConfig()
    t0 = time.monotonic()
    await workspace.stop()
    current = await workspace.read_tree()
    touched = changed_files(baseline, current)
    errors: list[str] = []
    out_of_scope = [p for p in touched if not in_scope(p, task.scope)]
    new_lint = (
        await new_lint_problems(current, baseline, touched, config.default_lint_select)
        if config.lint
        else []
    )
    diff = diff_trees(baseline, current)
    checks: list[CheckResult] = []
    restore = protected_changes(task, baseline, current)
    try:
        if restore:  # the agent's changes to how tests run are not graded (tasks/protect.py)
            await workspace.write_files(restore)
            current = with_changes(current, restore)
        after = await install_hidden(workspace, task, current)
    except (PatchError, PathError, OSError, UnicodeDecodeError) as e:
        errors.append(f"hidden tests could not be installed: {e}")
    else:
        checks = await run_checks(workspace, task, config, set(after))
    correct = not errors and bool(checks) and all(c.passed for c in checks)
    conventions = max(
        0.0, 1.0 - config.lint_penalty * len(new_lint) - config.scope_penalty * len(out_of_scope)
    )
    return Grade(
        task_id=task.id,
        correct=correct,
        reward=combine(correct, conventions, config),
        conventions=conventions,
        checks=checks,
        touched=touched,
        out_of_scope=out_of_scope,
        new_lint=new_lint,
        restored=sorted(restore),
        errors=errors,
        diff=diff,
        wall_s=time.monotonic() - t0,
    )


def attach(traj: Trajectory, g: Grade) -> Trajectory:
    """Record the grade on the trajectory (``grade`` as a dict, ``reward`` as a float)."""
    traj.grade = g.model_dump()
    traj.reward = g.reward
    return traj
