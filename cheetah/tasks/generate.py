"""Generate bug-fix tasks from a real Python repo: mutate, run its tests, keep what they catch.

1. The repo's own tests run once as given (the baseline): how they run is found by
   ``suite_layout`` (pytest as the repo configures it, test files by name, or a test command
   and paths the user, the package list or the repo's ``[tool.cheetah]`` gives), every run
   steered and read as the grader's are, and the baseline's time sets the later runs' limit
   (``suite_run``). Tests failing already are ignored; a suite where nothing passes is an
   error that names each try, its cause and the limit.
2. Candidate mutants come from ``mutate.mutants_of`` over the source files (tests, files
   named like tests, given test paths, ``conftest.py``, ``setup.py``, docs and examples are
   never mutated); up to ``max_mutants`` are sampled with a seed, interleaved over operators
   and files.
3. Each mutant runs the tests in a workspace, one per worker: a task session (sandboxed:
   the isolated backend, or env servers through a fleet; with the repo's Python
   environment when it has one), or, for repos the caller trusts, a copy on this host.
   Kept: mutants that make at least one baseline-passing test fail. Dropped: mutants
   no test notices ("survived"), that time out (a hang makes a poor task), or after
   which no test passes at all ("broke the suite", e.g. an import error).
4. Duplicates are dropped: the same mutated file text, or the same file, line and set
   of failing tests as a mutant already kept.
5. The query is written from the failing tests' names and pytest's ``E`` lines
   (what the tests saw), never the mutated code, its file or the operator; a line
   that quotes the mutated or original source line is left out.

A task's snapshot is the repo directory plus the mutation as a patch; its
fail-to-pass checks are the tests the mutant broke, its pass-to-pass checks the other
baseline-passing tests in the same test files (so grading runs only those files).

Deliberately left out: equivalent-mutant detection beyond "no test fails", mutating
non-Python files, and choosing test files per mutant by coverage.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from cheetah.core.workspace import ExecResult, LocalWorkspace, interpreter_env, is_junk
from cheetah.tasks.mutate import OPERATORS, Mutant, mutants_of
from cheetah.tasks.patch import diff_texts
from cheetah.tasks.schema import Check, Snapshot, Task
from cheetah.tasks.session import TaskSession, TaskSessionOpener
from cheetah.tasks.suite_layout import LayoutError, SuiteSettings, suite_layouts
from cheetah.tasks.suite_run import Baseline, BaselineError, Limits, measure_baseline, run_suite

_NOT_SOURCE = re.compile(
    r"(^|/)(tests?|testing|docs?|examples?|benchmarks?|build|dist|\.[^/]+|venv|site-packages)/"
    r"|(^|/)(test[^/]*|[^/]*_test|conftest|setup|noxfile|tasks)\.py$"
)
_E_LINE = re.compile(r"^E\s+(.*\S)")
MAX_FAILING_SHOWN = 8
MAX_E_LINES = 12


class GenerateError(RuntimeError):
    """Generation cannot start: no repo, no source files, unusable test settings, or a
    baseline with no passing test (the message says why and under which limit)."""


# The grader's check limit when a task names none: a task whose runs need more carries its own.
GRADER_CHECK_TIMEOUT_S = 120.0


class GenerateConfig(BaseModel):
    max_mutants: int = Field(150, description="mutants to try at most")
    max_tasks: int = Field(50, description="stop once this many tasks are kept")
    test_command: str | None = Field(
        None,
        description="a pytest command for the repo's tests (default: found by suite_layout); "
        "stored in each task and used, with the test files appended, to grade it",
    )
    test_paths: list[str] = Field(
        default_factory=list, description="test files or folders given to pytest (default: found)"
    )
    timeout_s: float | None = Field(
        None, description="limit for every test run (default: measured, see the next three)"
    )
    first_run_limit_s: float = Field(600.0, gt=0, description="limit for the baseline run")
    limit_floor_s: float = Field(20.0, gt=0, description="least limit for the runs after it")
    limit_factor: float = Field(5.0, gt=0, description="later runs' limit / the baseline's time")
    seed: int = 0
    concurrency: int = Field(2, ge=1)
    src: list[str] = Field(default_factory=list, description="files/folders to mutate (auto)")
    operators: list[str] = Field(default_factory=lambda: list(OPERATORS))
    heldout_fraction: float = Field(0.2, ge=0.0, le=1.0)
    id_prefix: str | None = None
    env: str | None = Field(
        None, description="the repo's Python environment (tasks/envs.py); stored in each task"
    )


@dataclass
class GenerateResult:
    tasks: list[Task]
    stats: dict[str, int] = field(default_factory=dict)
    runner: str = ""  # how the tests ran (suite_layout.SuiteLayout.runner)
    baseline_s: float = 0.0  # the baseline run's time
    limit_s: float = 0.0  # the limit of every run after it


def source_files(repo: Path, src: list[str]) -> list[str]:
    """Repo-relative Python files to mutate: ``src`` if given, else all non-test code."""
    roots = [repo / s for s in src] if src else [repo]
    out: set[str] = set()
    for r in roots:
        files = [r] if r.is_file() else sorted(r.rglob("*.py"))
        for f in files:
            rel = f.relative_to(repo).as_posix()
            if (
                f.suffix == ".py"
                and not is_junk(Path(rel))
                and (src or not _NOT_SOURCE.search(rel))
            ):
                out.add(rel)
    return sorted(out)


def sample_mutants(
    repo: Path, files: list[str], config: GenerateConfig
) -> tuple[list[Mutant], int]:
    """Up to ``max_mutants`` mutants, interleaved over operators and files; and the total."""
    buckets: dict[tuple[str, str], list[Mutant]] = {}
    total = 0
    for rel in files:
        try:
            text = (repo / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for m in mutants_of(rel, text):
            if m.operator in config.operators:
                buckets.setdefault((m.operator, rel), []).append(m)
                total += 1
    rng = random.Random(config.seed)
    keys = sorted(buckets)
    rng.shuffle(keys)
    for k in keys:
        rng.shuffle(buckets[k])
    chosen: list[Mutant] = []
    while len(chosen) < config.max_mutants and any(buckets[k] for k in keys):
        for k in keys:
            if buckets[k] and len(chosen) < config.max_mutants:
                chosen.append(buckets[k].pop())
    return chosen, total


def failure_lines(output: str, mutant: Mutant) -> list[str]:
    """pytest's ``E`` lines, minus any that quote the mutated or the original source line."""
    secret = {mutant.original_line, mutant.mutated_line} - {""}
    lines: list[str] = []
    for raw in output.splitlines():
        m = _E_LINE.match(raw)
        if not m:
            continue
        text = m.group(1)[:200]
        if any(s in text for s in secret) or mutant.path in text or text in lines:
            continue
        lines.append(text)
        if len(lines) >= MAX_E_LINES:
            break
    return lines


def write_query(failing: list[str], output: str, mutant: Mutant) -> str:
    shown = failing[:MAX_FAILING_SHOWN]
    more = len(failing) - len(shown)
    parts = [
        f"{len(failing)} test(s) of this repository fail:",
        *[f"- {t}" for t in shown],
        *([f"- ... and {more} more"] if more > 0 else []),
    ]
    lines = failure_lines(output, mutant)
    if lines:
        parts += ["", "pytest reports:", "```", *lines, "```"]
    parts += ["", "Find the bug in the library code and fix it. Do not change the tests."]
    return "\n".join(parts)


def _short(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def make_task(
    repo: Path,
    config: GenerateConfig,
    prefix: str,
    mutant: Mutant,
    failing: list[str],
    base: Baseline,
    output: str,
) -> Task:
    passing = base.passing
    # Checks run as the baseline's later runs did: a task that needs more than the grader's
    # default limit carries its own.
    timeout = base.limit_s if base.limit_s > GRADER_CHECK_TIMEOUT_S else None
    stem = Path(mutant.path).stem
    tid = f"{prefix}-{stem}-{mutant.operator}-L{mutant.line}-{_short(mutant.mutated)[:6]}"
    files = {t.split("::", 1)[0] for t in failing}
    p2p = sorted(t for t in passing if t.split("::", 1)[0] in files and t not in failing)
    bucket = int(_short(tid), 16) / 16**8
    return Task(
        id=tid,
        query=write_query(failing, output, mutant),
        snapshot=Snapshot(
            dir=str(repo), patch=diff_texts(mutant.path, mutant.original, mutant.mutated)
        ),
        fail_to_pass=[Check(test=t, timeout_s=timeout) for t in failing],
        pass_to_pass=[Check(test=t, timeout_s=timeout) for t in p2p],
        reference_patch=diff_texts(mutant.path, mutant.mutated, mutant.original),
        scope=[mutant.path, "tests/*", "test/*", "*test_*.py"],
        tags=["generated", mutant.operator, prefix],
        kind="generated",
        tier="generated",
        split="heldout" if bucket < config.heldout_fraction else "train",
        test_command=base.layout.custom_command,
        env=config.env,
    )


class _Copy:
    """A trusted worker: a copy of the repo on this host, tests run unsandboxed."""

    def __init__(self, ws: LocalWorkspace) -> None:
        self.ws = ws

    async def write(self, rel: str, text: str) -> None:
        (self.ws.root / rel).write_text(text, encoding="utf-8")

    async def exec(self, command: str, *, timeout_s: float, output_limit: int) -> ExecResult:
        return await self.ws.exec(command, timeout_s=timeout_s, output_limit=output_limit)

    async def close(self) -> None:
        pass


class _Sandboxed:
    """A worker that is a task session (isolated sandbox, or env servers through a fleet)."""

    def __init__(self, sessions: TaskSessionOpener, session: TaskSession) -> None:
        self.sessions, self.session = sessions, session

    async def write(self, rel: str, text: str) -> None:
        await self.session.write_files({rel: text.encode("utf-8")})

    async def exec(self, command: str, *, timeout_s: float, output_limit: int) -> ExecResult:
        return await self.session.exec(command, timeout_s=timeout_s, output_limit=output_limit)

    async def close(self) -> None:
        await self.sessions.close(self.session)


def _limits(config: GenerateConfig) -> Limits:
    return Limits(
        config.timeout_s, config.first_run_limit_s, config.limit_floor_s, config.limit_factor
    )


async def _workers(
    repo: Path, config: GenerateConfig, sessions: TaskSessionOpener | None, tmp: str
) -> list[_Copy | _Sandboxed]:
    if sessions is None:
        workers: list[_Copy | _Sandboxed] = []
        for i in range(config.concurrency):
            dest = Path(tmp) / f"w{i}"
            shutil.copytree(
                repo, dest, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache", ".git")
            )
            env = interpreter_env()
            if config.env:
                env["PATH"] = f"{Path(config.env) / 'bin'}{os.pathsep}{env['PATH']}"
            workers.append(_Copy(LocalWorkspace(dest, env)))
        return workers
    # The repo as it is: every session forks from one snapshot of it.
    task = Task(id="baseline", query="-", snapshot=Snapshot(dir=str(repo)),
                pass_to_pass=[Check(command="true")], env=config.env)  # fmt: skip
    opened = await asyncio.gather(*(sessions.create(task) for _ in range(config.concurrency)))
    return [_Sandboxed(sessions, s) for s in opened]


async def generate_tasks(
    repo: str | Path,
    config: GenerateConfig | None = None,
    *,
    on_progress: Callable[[int, int, int], None] | None = None,
    sessions: TaskSessionOpener | None = None,
    suggested: SuiteSettings | None = None,
) -> GenerateResult:
    """Mutate ``repo``'s code and return the tasks its tests catch (see the module docstring).
    Test runs go to task sessions of ``sessions`` (sandboxed); with None, to copies of the
    repo on this host, unsandboxed (trusted repos only). ``suggested``: how a package list
    says the tests run (``config``'s own test command and paths win over it)."""
    config = config or GenerateConfig()
    repo = Path(repo).resolve()
    if not repo.is_dir():
        raise GenerateError(f"no repository at {repo}")
    files = source_files(repo, config.src)
    if not files:
        raise GenerateError(f"no Python source files to mutate under {repo}")
    prefix = config.id_prefix or re.sub(r"[^A-Za-z0-9_.-]", "-", repo.name)
    given = SuiteSettings(
        config.test_command, tuple(config.test_paths), "--test-command/--test-path"
    )
    try:
        layouts = suite_layouts(repo, given, *([suggested] if suggested else []))
    except LayoutError as e:
        raise GenerateError(str(e)) from None
    stats = dict.fromkeys(
        ("candidates", "tried", "killed", "survived", "timeouts", "broken", "duplicates"), 0
    )
    with tempfile.TemporaryDirectory(prefix="cheetah-gen-") as tmp:
        workers = await _workers(repo, config, sessions, tmp)
        try:
            try:
                base = await measure_baseline(workers[0], repo, layouts, _limits(config))
            except BaselineError as e:
                raise GenerateError(str(e)) from None
            tests = base.layout.paths  # given test paths are never mutated either
            files = [f for f in files if not any(f == t or f.startswith(f"{t}/") for t in tests)]
            result = await _generate(repo, config, files, prefix, stats, workers, base, on_progress)
        finally:
            await asyncio.gather(*(w.close() for w in workers))
    result.runner, result.baseline_s, result.limit_s = (
        base.layout.runner,
        base.run.wall_s,
        base.limit_s,
    )
    return result


async def _generate(
    repo: Path,
    config: GenerateConfig,
    files: list[str],
    prefix: str,
    stats: dict[str, int],
    workers: list[_Copy | _Sandboxed],
    base: Baseline,
    on_progress: Callable[[int, int, int], None] | None,
) -> GenerateResult:
    passing = base.passing
    mutants, stats["candidates"] = sample_mutants(repo, files, config)
    queue: asyncio.Queue[tuple[int, Mutant]] = asyncio.Queue()
    for i, m in enumerate(mutants):
        queue.put_nowait((i, m))
    # Which of two mutants with one effect is kept must not depend on which finished first:
    # runs only collect what they caught, kept tasks are chosen in sampling order after them.
    caught: dict[int, tuple[Mutant, list[str], str]] = {}
    effects: set[tuple[str, int, frozenset[str]]] = set()  # to stop at max_tasks

    async def work(ws: _Copy | _Sandboxed) -> None:
        while not queue.empty() and len(effects) < config.max_tasks:
            i, m = queue.get_nowait()
            await ws.write(m.path, m.mutated)
            try:
                # A hanging mutant costs a few baseline runs, not the first run's limit.
                res = await run_suite(ws, base.layout, base.runner, base.limit_s)
            finally:
                await ws.write(m.path, m.original)
            stats["tried"] += 1
            got = res.outcomes
            failing = sorted(t for t in passing if got.get(t) != "PASSED")
            if res.timed_out:
                stats["timeouts"] += 1
            elif not any(o == "PASSED" for o in got.values()):
                stats["broken"] += 1
            elif not failing:
                stats["survived"] += 1
            else:
                stats["killed"] += 1
                caught[i] = (m, failing, res.output)
                effects.add((m.path, m.line, frozenset(failing)))
            if on_progress:
                on_progress(len(mutants), stats["tried"], len(effects))

    await asyncio.gather(*(work(w) for w in workers))
    kept: list[Task] = []
    seen_text: set[tuple[str, str]] = set()
    seen_effect: set[tuple[str, int, frozenset[str]]] = set()
    for i in sorted(caught):
        m, failing, output = caught[i]
        effect = (m.path, m.line, frozenset(failing))
        if (m.path, m.mutated) in seen_text or effect in seen_effect:
            stats["duplicates"] += 1
        elif len(kept) < config.max_tasks:
            seen_text.add((m.path, m.mutated))
            seen_effect.add(effect)
            kept.append(make_task(repo, config, prefix, m, failing, base, output))
    kept.sort(key=lambda t: t.id)
    return GenerateResult(tasks=kept, stats=stats)
