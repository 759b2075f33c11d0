"""The generator's test runs: steered and read as the grader's are, the first one timed.

Every run the task generator makes (``tasks/generate.py``) is the grader's pytest call
(``tasks/pytest_run.py``: plugin autoload off, the environment's plugins and the repo's config
file named, each test's outcome from the grade plugin's report, never from printed text) over a
``SuiteLayout``'s paths, so a kept task's checks run at grading as they ran when it was made.

The baseline is the first run and the clock for the rest. It tries each layout in turn
(``suite_layout.suite_layouts``) until one passes a test, each under ``first_limit_s`` (the
``--timeout`` when one is given); every later run's limit is ``factor`` times the baseline's
time, at least ``floor_s`` (or exactly the ``--timeout``). A baseline that times out, passes
nothing or writes no report is a ``BaselineError`` naming each try, its cause and the limit.

A test whose node id holds a memory address is never a check (its id changes every run).
Deliberately left out: re-measuring under load (a machine busier during mutant runs than during
the baseline is what the factor is for), and timing test files one by one.
"""

from __future__ import annotations

import re
import secrets
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cheetah.core.workspace import ExecResult, is_junk
from cheetah.tasks.pytest_run import (
    PYTEST_CONFIGS,
    Runner,
    find_runner,
    pytest_command,
    split_report,
)
from cheetah.tasks.suite_layout import SuiteLayout, without_addopts

OUTPUT_LIMIT = 2_000_000
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_UNKNOWN_ARGS = "error: unrecognized arguments:"  # pytest's usage error


class Executes(Protocol):
    """Where a test run happens: a task session or a trusted copy on this host."""

    async def exec(self, command: str, *, timeout_s: float, output_limit: int) -> ExecResult: ...


class BaselineError(RuntimeError):
    """No layout gave a usable baseline: the message names each try, its cause and the limit."""


@dataclass(frozen=True)
class SuiteRun:
    """One run: outcomes by node id (empty when no report came), the run's own output."""

    outcomes: dict[str, str]
    output: str
    timed_out: bool
    wall_s: float
    reported: bool

    @property
    def passing(self) -> set[str]:
        """Tests that passed and can be checks: a node id that holds a memory address (a
        parameter's ``repr``, ``<... at 0x7f...>``) names another test in every run."""
        return {
            t
            for t, o in self.outcomes.items()
            if o == "PASSED" and "::" in t and not _ADDRESS.search(t)
        }


async def run_suite(
    ws: Executes, layout: SuiteLayout, runner: Runner, timeout_s: float
) -> SuiteRun:
    """Run ``layout`` in ``ws`` as the grader would run its files (see the module docstring)."""
    nonce = secrets.token_hex(12)
    cmd = pytest_command(layout.command, runner, nonce, list(layout.paths))
    res = await ws.exec(cmd, timeout_s=timeout_s, output_limit=OUTPUT_LIMIT)
    own, report = split_report(res.output, nonce)
    outcomes = report.outcomes if report and not res.timed_out else {}
    return SuiteRun(outcomes, own, res.timed_out, res.wall_s, report is not None)


@dataclass(frozen=True)
class Limits:
    """Seconds for test runs: ``fixed`` (a ``--timeout``) overrides the measured ones (the
    defaults are ``GenerateConfig``'s)."""

    fixed: float | None
    first_s: float
    floor_s: float
    factor: float

    @property
    def first(self) -> float:
        return self.fixed if self.fixed is not None else self.first_s

    def after(self, baseline_s: float) -> float:
        if self.fixed is not None:
            return self.fixed
        return max(self.floor_s, self.factor * baseline_s)

    def said(self) -> str:
        if self.fixed is not None:
            return f"the limit is --timeout {self.fixed:g} s"
        return f"the first run's limit is {self.first_s:g} s; pass --timeout SECONDS to change it"


@dataclass(frozen=True)
class Baseline:
    """The layout that passed, its runner, what passed, its time and the limit that follows."""

    layout: SuiteLayout
    runner: Runner
    run: SuiteRun
    limit_s: float

    @property
    def passing(self) -> set[str]:
        return self.run.passing


def _config_tree(repo: Path) -> dict[str, bytes]:
    """The repo's files that may hold pytest settings (all ``pytest_config_file`` reads)."""
    return {
        f.relative_to(repo).as_posix(): f.read_bytes()
        for name in PYTEST_CONFIGS
        for f in repo.rglob(name)
        if f.is_file() and not is_junk(f.relative_to(repo))
    }


def why_not(run: SuiteRun, limit_s: float) -> str:
    """Why ``run`` is no baseline, in words."""
    if run.timed_out:
        return f"timed out after {limit_s:g} s"
    lines = [x.strip() for x in run.output.strip().splitlines() if x.strip()] or ["(no output)"]
    # pytest's own complaint (a usage or config error) says more than its last line
    said = next((x for x in lines if ": error:" in x), None) or next(
        (x for x in lines if x.startswith("ERROR:")), lines[-1]
    )
    said = said[:200]
    if not run.reported:
        return f"pytest wrote no report (is the test command a pytest command?): {said}"
    if not run.outcomes:
        return f"collected no test: {said}"
    counts = Counter(run.outcomes.values())
    return "no test passed (" + ", ".join(f"{n} {o}" for o, n in sorted(counts.items())) + ")"


async def measure_baseline(
    ws: Executes, repo: Path, layouts: list[SuiteLayout], limits: Limits, python: str = "python"
) -> Baseline:
    """The first layout whose run passes a test, timed (see the module docstring)."""
    tree = _config_tree(repo)
    tries: list[str] = []
    last = ""
    queue = list(layouts)
    while queue:
        layout = queue.pop(0)
        runner = await find_runner(
            ws,  # type: ignore[arg-type]  # any Executes will do: find_runner only runs a probe
            tree,
            list(layout.paths) or ["conftest.py"],  # no paths: the config at the root
            python,
            limits.first,
        )
        run = await run_suite(ws, layout, runner, limits.first)
        if run.passing and not run.timed_out:
            return Baseline(layout, runner, run, limits.after(run.wall_s))
        more = f", ... ({len(layout.paths)} paths)" if len(layout.paths) > 2 else ""
        shown = f" ({', '.join(layout.paths[:2])}{more})"
        tries.append(
            f"{layout.runner}{shown if layout.paths else ''}: {why_not(run, limits.first)}"
        )
        last = run.output.strip()[-1500:]
        if run.timed_out:
            break  # a longer suite under the next layout would time out too
        if layout.custom_command is None and not run.reported and _UNKNOWN_ARGS in run.output:
            queue.insert(0, without_addopts(layout))
    raise BaselineError(
        "baseline test run: " + "; ".join(tries) + f" ({limits.said()})" + f"\n{last}"
    )
