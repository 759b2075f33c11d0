"""Check that a task is well-posed: its checks fail as given and pass once solved.

For each task, in two fresh sessions of the same kind the eval uses, with the grader's own
pytest runner (``tasks/grader.py``: plugin autoload off, its report plugin):

1. the snapshot as the agent gets it: every fail-to-pass check must fail and every
   pass-to-pass check pass (a task whose tests already pass teaches nothing);
2. the snapshot plus the reference patch, taken as the grader takes an agent's change
   (``tasks/change.py``: none of it left out, nothing flagged): every check must pass.

Also: the hidden material must not already be in the snapshot (a hidden test file
the agent could read would leak the answer). Problems are reported per task and the
run goes on; a task without a reference patch is checked for step 1 only.

Tasks that differ only in what the agent is told (``id``, ``query``, ``tier``, ``split``,
``tags``: a curriculum poses one mutant under several query tiers) run the same checks on
the same files, so each such group is validated once and every member gets its result.

Deliberately left out: running each check several times to catch flaky tests.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable

from pydantic import BaseModel, Field

from cheetah.core.workspace import PathError
from cheetah.tasks.change import agent_change, runner_flags
from cheetah.tasks.grader import GraderConfig, install_hidden, run_checks, runner_for
from cheetah.tasks.patch import PatchError, patch_tree, with_changes
from cheetah.tasks.schema import Task
from cheetah.tasks.session import TaskSessionOpener, TaskSetupError, open_task


class TaskValidation(BaseModel):
    task_id: str
    ok: bool
    problems: list[str] = Field(default_factory=list)
    wall_s: float = 0.0


def _leaks(tree: dict[str, bytes], task: Task) -> list[str]:
    problems = []
    for rel, content in task.hidden_files.items():
        if tree.get(rel) == content.encode("utf-8"):
            problems.append(
                f"hidden file {rel} is already in the snapshot: the agent could read it"
            )
    return problems


async def _state(
    sessions: TaskSessionOpener, task: Task, config: GraderConfig, *, solved: bool
) -> list[str]:
    """Problems with the checks in one state (as given, or with the reference patch)."""
    what = "with the reference patch" if solved else "on the snapshot"
    ws = await open_task(sessions, task)
    try:
        tree = await ws.read_tree()
        problems = [] if solved else _leaks(tree, task)
        runner = await runner_for(sessions, ws, task, tree, config)
        if solved:
            try:
                patched = with_changes(tree, patch_tree(tree, task.reference_patch or ""))
            except (PatchError, UnicodeDecodeError) as e:
                return [f"reference patch does not apply: {e}"]
            change = agent_change(task, tree, patched)  # what the grader would take of it
            problems += [
                f"the grader flags the reference patch: {f}"
                for f in runner_flags(task, tree, change)
            ]
            problems += [
                f"the grader leaves {p} of the reference patch out: {why}"
                for p, why in change.ungraded.items()
            ]
            await ws.write_files(change.files)
            tree = with_changes(tree, change.files)
        try:
            tree = await install_hidden(ws, task, tree)
        except (PatchError, PathError, OSError, UnicodeDecodeError) as e:
            return [*problems, f"hidden tests could not be installed: {e}"]
        for r in await run_checks(ws, task, config, set(tree), runner):
            must_pass = solved or r.kind == "pass_to_pass"
            if r.passed != must_pass:
                want = "pass" if must_pass else "fail"
                detail = r.detail.strip().splitlines()[-1:] if r.detail.strip() else []
                tail = f": {detail[0][:200]}" if detail else ""
                problems.append(
                    f"{r.kind} check {r.label!r} should {want} {what} but was {r.outcome}{tail}"
                )
        return problems
    finally:
        await sessions.close(ws)


async def validate_task(
    task: Task, sessions: TaskSessionOpener, config: GraderConfig | None = None
) -> TaskValidation:
    config = config or GraderConfig()
    t0 = time.monotonic()
    problems: list[str] = []
    try:
        problems += await _state(sessions, task, config, solved=False)
        if task.reference_patch:
            problems += await _state(sessions, task, config, solved=True)
        else:
            problems.append("no reference patch: only the unsolved state was checked")
    except TaskSetupError as e:
        problems.append(str(e))
    except Exception as e:  # a broken task never stops the others
        problems.append(f"{type(e).__name__}: {e}")
    return TaskValidation(
        task_id=task.id, ok=not problems, problems=problems, wall_s=time.monotonic() - t0
    )


# What a task tells the agent, not what its checks run on (see the module docstring).
_NOT_VALIDATED = frozenset({"id", "query", "tier", "split", "tags"})


def validation_key(task: Task) -> str:
    """Tasks with equal keys have the same snapshot, setup, checks and patches."""
    body = task.model_dump_json(exclude=set(_NOT_VALIDATED))
    return hashlib.sha256(body.encode()).hexdigest()


async def validate_tasks(
    tasks: list[Task],
    sessions: TaskSessionOpener,
    config: GraderConfig | None = None,
    *,
    concurrency: int = 2,
    on_done: Callable[[TaskValidation], None] | None = None,
) -> list[TaskValidation]:
    """Validate every task, ``concurrency`` at a time; results in task order. Tasks with
    the same ``validation_key`` are validated once (``on_done`` is still called per task)."""
    sem = asyncio.Semaphore(max(1, concurrency))
    groups: dict[str, list[Task]] = {}
    for t in tasks:
        groups.setdefault(validation_key(t), []).append(t)
    results: dict[int, TaskValidation] = {}

    async def one(group: list[Task]) -> None:
        async with sem:
            v = await validate_task(group[0], sessions, config)
        for t in group:
            vt = v if t is group[0] else v.model_copy(update={"task_id": t.id})
            results[id(t)] = vt
            if on_done:
                on_done(vt)

    await asyncio.gather(*(one(g) for g in groups.values()))
    return [results[id(t)] for t in tasks]
