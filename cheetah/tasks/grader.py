"""Grade the agent's change: its source diff, applied to a fresh session, hidden checks, one reward.

The checks never run where the agent worked. First every process the agent left running is
killed and its files are read; ``tasks/change.py`` turns them into the agent's change, the
text diff of source files that crosses (no tests, runner configuration, bytecode, package
metadata or binary files, no new module outside the repo's packages), and flags a diff whose
code under test reaches for the test runner (graded 0, the reason in ``Grade.flags``). Then a
**fresh session of the pristine snapshot** is opened (its setup run), the change written in,
the task's hidden files and test patch applied over it, and the checks run there, as
SWE-bench's harness applies a model's patch to a clean checkout. Scope and new ruff problems
are measured on what the agent touched.

Test-id checks run as one pytest call over the files that hold them, steered by the grader
alone and read from its own plugin's report (``tasks/pytest_run.py``: plugin autoload off, the
environment's plugins and the repo's config file named, no cache, no bytecode); an id the report
lacks counts as failed ("missing"), and a run whose report machinery was replaced or that a
planted plugin joined is "tampered": flagged, 0. Correctness is all checks passing.

The grader sees sessions only as ``TaskSession``s (file trees in and out, commands), so it
grades a local copy, an in-process isolated session and a session on a remote env server
alike. The reward is ``correctness_weight * correct + conventions_weight * conventions``,
the conventions term counted only for a correct result by default (otherwise doing nothing
would earn it). Everything that went into it is in the returned ``Grade``, the graded diff
included; new ruff problems come from ``tasks/lint_delta.py``.

Deliberately left out: partial credit for some checks passing, flaky-test reruns, style checks
beyond ruff, reusing the agent's session for the checks (a fresh one costs a session start
and the task's setup; ``BENCHMARKS.md`` has the measured cost).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import secrets
import time
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cheetah.core.workspace import PathError
from cheetah.harness.trajectory import Trajectory
from cheetah.tasks.change import AgentChange, agent_change, runner_flags
from cheetah.tasks.lint_delta import new_lint_problems
from cheetah.tasks.patch import PatchError, patch_tree, with_changes
from cheetah.tasks.pytest_run import (
    Report,
    Runner,
    find_runner,
    pytest_command,
    split_report,
)
from cheetah.tasks.schema import Check, Task
from cheetah.tasks.session import TaskSession, TaskSessionOpener, TaskSetupError, open_task

Outcome = Literal["passed", "failed", "error", "missing", "timeout", "tampered"]
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
    ungraded: dict[str, str] = Field(
        default_factory=dict,
        description="paths the agent changed that did not cross to the grading session, with "
        "why (tasks/change.py)",
    )
    flags: list[str] = Field(
        default_factory=list,
        description="why the change cannot be graded honestly (graded 0; tasks/change.py)",
    )
    errors: list[str] = Field(default_factory=list)
    diff: str = Field("", description="the diff that was graded: exactly what the checks saw")
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


async def run_test_checks(
    workspace: TaskSession,
    checks: list[tuple[str, Check]],
    config: GraderConfig,
    files_present: set[str],
    command: str | None = None,
    runner: Runner | None = None,
) -> list[CheckResult]:
    """All test-id checks in one pytest call over their files (``command`` + the files), run
    and read as ``tasks/pytest_run.py`` says."""
    if not checks:
        return []
    files = sorted({c.test_file for _, c in checks if c.test_file})
    present = [f for f in files if f in files_present]
    timeout = max(c.timeout_s or config.check_timeout_s for _, c in checks)
    output, timed_out, wall = "", False, 0.0
    report: Report | None = Report({}, [])
    if present:
        nonce = secrets.token_hex(12)
        base = command or f"{config.python} -m pytest {config.pytest_args}"
        cmd = pytest_command(base, runner or Runner(), nonce, present)
        res = await workspace.exec(cmd, timeout_s=timeout, output_limit=2_000_000)
        output, report = split_report(res.output, nonce)
        timed_out, wall = res.timed_out, res.wall_s
    results = []
    for kind, check in checks:
        assert check.test is not None
        got = report.outcomes.get(check.test) if report else None
        outcome: Outcome
        if report and report.tampered:
            outcome = "tampered"
            detail = "the test run was tampered with: " + ", ".join(report.tampered)
        elif timed_out:
            outcome = "timeout"
            detail = f"pytest did not finish within {timeout:g} s\n{output[-config.detail_chars :]}"
        elif check.test_file not in present:
            outcome, detail = "missing", f"no file {check.test_file}"
        elif report is None:
            outcome, detail = (
                "missing",
                "pytest wrote no report (it did not start, or the test command is not "
                "pytest)\n" + output[-config.detail_chars :],
            )
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
    workspace: TaskSession,
    task: Task,
    config: GraderConfig,
    files_present: set[str],
    runner: Runner | None = None,
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
        await run_test_checks(workspace, tests, config, files_present, task.test_command, runner)
    )
    results = []
    for kind, check in tagged:
        if check.test is not None:
            results.append(next(test_results))
        else:
            results.append(await run_command_check(workspace, kind, check, config))
    return results


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


class GradingError(RuntimeError):
    """The grading session could not be made ready (setup, hidden files): the task's own
    problem, recorded in ``Grade.errors``."""


def _runner_key(task: Task) -> str:
    parts = [task.snapshot.model_dump_json(), str(task.env), str(task.setup)]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


async def runner_for(
    sessions: TaskSessionOpener,
    pristine: TaskSession,
    task: Task,
    tree: dict[str, bytes],
    config: GraderConfig,
) -> Runner:
    """The task's ``Runner``, found in ``pristine`` (a session nothing was written to yet)
    the first time ``sessions`` sees its snapshot, environment and setup."""
    key = _runner_key(task)
    runner = sessions.runners.get(key)
    if runner is None:
        files = sorted({c.test_file for c in task.checks if c.test_file})
        runner = sessions.runners[key] = await find_runner(
            pristine, tree, files, config.python, config.check_timeout_s
        )
    return runner


async def check_change(
    task: Task,
    change: AgentChange,
    baseline: Baseline,
    sessions: TaskSessionOpener,
    config: GraderConfig,
) -> list[CheckResult]:
    """The task's checks on a fresh session of its pristine snapshot with ``change`` written
    in and the hidden files and test patch over it."""
    try:
        fresh = await open_task(sessions, task)
    except TaskSetupError as e:
        raise GradingError(f"the grading session could not be opened: {e}") from e
    try:
        runner = await runner_for(sessions, fresh, task, baseline, config)
        try:
            if change.files:
                await fresh.write_files(change.files)
            after = await install_hidden(fresh, task, with_changes(baseline, change.files))
        except (PatchError, PathError, OSError, UnicodeDecodeError) as e:
            raise GradingError(f"hidden tests could not be installed: {e}") from e
        return await run_checks(fresh, task, config, set(after), runner)
    finally:
        await sessions.close(fresh)


async def grade(
    task: Task,
    workspace: TaskSession,
    baseline: Baseline,
    sessions: TaskSessionOpener,
    config: GraderConfig | None = None,
) -> Grade:
    """Grade what the agent left in ``workspace`` (see the module docstring): its change runs
    in a fresh session that ``sessions`` opens, once ``workspace`` is closed (it was opened by
    ``sessions`` too). Never raises for problems of the task itself."""
    config = config or GraderConfig()
    t0 = time.monotonic()
    await workspace.stop()
    current = await workspace.read_tree()
    await sessions.close(
        workspace
    )  # its slot goes to the grading session (no deadlock at capacity)
    change = agent_change(task, baseline, current)
    flags = runner_flags(task, baseline, change)
    touched = change.touched
    out_of_scope = [p for p in touched if not in_scope(p, task.scope)]
    new_lint = (
        await new_lint_problems(current, baseline, touched, config.default_lint_select)
        if config.lint
        else []
    )
    errors: list[str] = []
    checks: list[CheckResult] = []
    if not flags:  # a flagged change earns nothing: running its checks would change no grade
        try:
            checks = await check_change(task, change, baseline, sessions, config)
        except GradingError as e:
            errors.append(str(e))
        flags += sorted({c.detail for c in checks if c.outcome == "tampered"})
    correct = not errors and not flags and bool(checks) and all(c.passed for c in checks)
    conventions = max(
        0.0, 1.0 - config.lint_penalty * len(new_lint) - config.scope_penalty * len(out_of_scope)
    )
    return Grade(
        task_id=task.id,
        correct=correct,
        reward=0.0 if flags else combine(correct, conventions, config),
        conventions=conventions,
        checks=checks,
        touched=touched,
        out_of_scope=out_of_scope,
        new_lint=new_lint,
        ungraded=change.ungraded,
        flags=flags,
        errors=errors,
        diff=change.diff,
        wall_s=time.monotonic() - t0,
    )


def attach(traj: Trajectory, g: Grade) -> Trajectory:
    """Record the grade on the trajectory (``grade`` as a dict, ``reward`` as a float)."""
    traj.grade = g.model_dump()
    traj.reward = g.reward
    return traj
