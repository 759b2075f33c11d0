"""``run_eval``: K samples of an agent on each task, graded, summarized into a report.

One sample is one ``tasks.episode.run_episode`` (open the task's session and run its
setup, capture the baseline, run the agent, grade, close), the same function RL
rollouts and SFT demonstrations use; the trajectory (with its grade) is saved. Samples run
``concurrency`` at a time. A problem with one task (missing repo or commit, failing
setup, a policy that cannot be built) becomes that sample's ``error`` and the run
goes on; errored samples count as incorrect in pass@k and are listed in the report.

Where samples run is the ``TaskSessionOpener``' business: local copies (trusted tasks only),
in-process isolated sessions, or sessions on env servers through an ``EnvFleet``
(``cheetah.tasks.remote_sessions``).

Deliberately left out: retrying errored samples, resuming an interrupted run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator

from cheetah.harness.loop import AgentError, AgentLimits
from cheetah.harness.policy import Policy
from cheetah.tasks.episode import run_episode
from cheetah.tasks.grader import GraderConfig
from cheetah.tasks.metrics import mean_of, pass_at_k, trajectory_metrics
from cheetah.tasks.schema import Task
from cheetah.tasks.session import TaskSessionOpener
from cheetah.tools import default_tools

PolicyFactory = Callable[[Task], Policy]


class EvalConfig(BaseModel):
    """How an eval runs; saved in the report."""

    samples: int = Field(1, ge=1, description="samples (rollouts) per task: the k of pass@k")
    concurrency: int = Field(2, ge=1, description="samples running at once")
    limits: AgentLimits = Field(default_factory=AgentLimits, description="per sample")
    setup_timeout_s: float = Field(600.0, description="limit for a task's setup command")
    grader: GraderConfig = Field(default_factory=GraderConfig)
    without_tools: list[str] = Field(
        default_factory=list, description="tools taken away from the agent (an ablation)"
    )

    @field_validator("without_tools")
    @classmethod
    def _known_tools(cls, names: list[str]) -> list[str]:
        known = list(default_tools())
        if unknown := [n for n in names if n not in known]:
            raise ValueError(f"unknown tool {unknown[0]!r}; the tools are: {', '.join(known)}")
        return names


class SampleResult(BaseModel):
    task_id: str
    sample: int
    correct: bool = False
    reward: float = 0.0
    conventions: float | None = None
    error: str | None = None
    stop_reason: str | None = None
    stop_detail: str = Field("", description="what stopped the agent (a limit names it)")
    failed_checks: list[str] = Field(default_factory=list)
    diff: str = Field("", description="the diff that was graded (tasks/change.py)")
    ungraded: dict[str, str] = Field(
        default_factory=dict, description="paths the agent changed that were not graded, why"
    )
    flags: list[str] = Field(
        default_factory=list, description="why the change was graded 0 (tasks/change.py)"
    )
    metrics: dict[str, Any] = Field(default_factory=dict)
    wall_s: float = 0.0
    trajectory: str | None = None


class TaskSummary(BaseModel):
    task_id: str
    tier: str
    split: str
    kind: str
    n: int
    correct: int
    pass_at_1: float
    pass_at_k: float
    errors: list[str] = Field(default_factory=list)


class EvalReport(BaseModel):
    model: str
    tasks_file: str | None = None
    session: str = ""
    started_at: str = ""
    wall_s: float = 0.0
    config: EvalConfig
    summary: dict[str, Any] = Field(default_factory=dict)
    by_group: dict[str, dict[str, Any]] = Field(default_factory=dict)
    tasks: list[TaskSummary] = Field(default_factory=list)
    samples: list[SampleResult] = Field(default_factory=list)


async def run_sample(
    task: Task,
    sample: int,
    policy_factory: PolicyFactory,
    sessions: TaskSessionOpener,
    config: EvalConfig,
    traj_dir: Path | None,
) -> SampleResult:
    t0 = time.monotonic()
    res = SampleResult(task_id=task.id, sample=sample)
    try:
        ep = await run_episode(
            task,
            policy_factory(task),
            sessions,
            limits=config.limits,
            grader=config.grader,
            setup_timeout_s=config.setup_timeout_s,
            without_tools=frozenset(config.without_tools),
        )
    except Exception as e:  # one broken sample never stops the run
        res.error, res.wall_s = f"{type(e).__name__}: {e}", time.monotonic() - t0
        if isinstance(e, AgentError):  # the policy or the env failed: keep the turns so far
            res.stop_reason, res.stop_detail = "error", e.trajectory.stop_detail
            if traj_dir is not None:
                path = traj_dir / f"{task.id}.{sample}.json"
                res.trajectory = str(e.trajectory.save(path))
        return res
    if ep.error is not None or ep.trajectory is None or ep.grade is None:
        res.error, res.wall_s = ep.error, time.monotonic() - t0
        return res
    traj, g = ep.trajectory, ep.grade
    res.correct, res.reward, res.conventions = g.correct, g.reward, g.conventions
    res.stop_reason, res.stop_detail = traj.stop_reason, traj.stop_detail
    res.failed_checks = [c.label for c in g.failed_checks]
    res.diff, res.ungraded, res.flags = g.diff, g.ungraded, g.flags
    if g.errors:
        res.error = "; ".join(g.errors)
    res.metrics = trajectory_metrics(traj)
    if traj_dir is not None:
        res.trajectory = str(traj.save(traj_dir / f"{task.id}.{sample}.json"))
    res.wall_s = time.monotonic() - t0
    return res


def summarize(
    tasks: list[Task], samples: list[SampleResult], k: int
) -> tuple[list[TaskSummary], dict, dict]:
    """Per-task pass rates, the overall summary, and pass@1 by tier, split and kind."""
    by_task: dict[str, list[SampleResult]] = {}
    for s in samples:
        by_task.setdefault(s.task_id, []).append(s)
    per_task = []
    for t in tasks:
        rows = by_task.get(t.id, [])
        n, c = len(rows), sum(r.correct for r in rows)
        per_task.append(
            TaskSummary(
                task_id=t.id,
                tier=t.tier,
                split=t.split,
                kind=t.kind,
                n=n,
                correct=c,
                pass_at_1=pass_at_k(n, c, 1) if n else 0.0,
                pass_at_k=pass_at_k(n, c, k) if n else 0.0,
                errors=sorted({r.error for r in rows if r.error}),
            )
        )

    def rates(group: list[TaskSummary]) -> dict[str, Any]:
        m = len(group)
        return {
            "tasks": m,
            "pass@1": sum(g.pass_at_1 for g in group) / m if m else 0.0,
            f"pass@{k}": sum(g.pass_at_k for g in group) / m if m else 0.0,
        }

    metric_rows = [s.metrics for s in samples if s.metrics]
    summary = {
        **rates(per_task),
        "samples": len(samples),
        "k": k,
        "errors": sum(1 for s in samples if s.error),
        "finished": sum(s.stop_reason == "finished" for s in samples),
        "stopped_by_limit": sum(s.stop_reason == "limit" for s in samples),
        "flagged": sum(1 for s in samples if s.flags),
        "mean_reward": mean_of([s.model_dump() for s in samples], "reward"),
        "conventions": mean_of([s.model_dump() for s in samples], "conventions"),
        "conventions_when_correct": mean_of(
            [s.model_dump() for s in samples if s.correct], "conventions"
        ),
        "wall_s_per_task": mean_of([s.model_dump() for s in samples], "wall_s"),
    }
    for key in (
        "tool_calls",
        "calls_per_turn",
        "explore_before_edit",
        "edits",
        "false_claim",
        "turns",
        "turns_cut",
        "completion_tokens",
        "prompt_tokens",
    ):
        summary[key] = mean_of(metric_rows, key)
    groups: dict[str, dict[str, Any]] = {}
    for attr in ("tier", "split", "kind"):
        for value in sorted({getattr(p, attr) for p in per_task}):
            groups[f"{attr}={value}"] = rates([p for p in per_task if getattr(p, attr) == value])
    return per_task, summary, groups


async def run_eval(
    tasks: list[Task],
    policy_factory: PolicyFactory,
    sessions: TaskSessionOpener,
    config: EvalConfig | None = None,
    *,
    model: str = "",
    out_dir: Path | None = None,
    on_sample: Callable[[SampleResult], None] | None = None,
) -> EvalReport:
    """Run every task ``config.samples`` times and build the report (not written here)."""
    config = config or EvalConfig()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    t0 = time.monotonic()
    traj_dir = out_dir / "trajectories" if out_dir else None
    sem = asyncio.Semaphore(config.concurrency)

    async def one(task: Task, k: int) -> SampleResult:
        async with sem:
            res = await run_sample(task, k, policy_factory, sessions, config, traj_dir)
        if on_sample:
            on_sample(res)
        return res

    jobs = [one(t, k) for t in tasks for k in range(config.samples)]
    samples = list(await asyncio.gather(*jobs))
    per_task, summary, groups = summarize(tasks, samples, config.samples)
    return EvalReport(
        model=model,
        session=getattr(sessions, "name", type(sessions).__name__),
        started_at=started,
        wall_s=time.monotonic() - t0,
        config=config,
        summary=summary,
        by_group=groups,
        tasks=per_task,
        samples=samples,
    )
