"""Demonstrations for the SFT warm start: the oracle's episodes turned into training samples.

``collect_demonstrations`` runs ``OraclePolicy`` (the reference patch applied through the
tools, ``tasks/oracle.py``) on each task through ``tasks.episode.run_episode``, the episode
eval and RL run too, many at once, and keeps the episodes the grader passes: a task whose
session fails is reported and skipped, and a wrong fix is never imitated. ``TrainJob.sft``
trains on the samples.
Left out: demonstrations from any other policy (a stronger model's trajectories).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from cheetah.progress import Pace
from cheetah.rl.data import Sample, sample_from_trajectory
from cheetah.tasks.schema import Task


async def collect_demonstrations(
    tasks: list[Task],
    sessions: Any,
    tokenizer: Any,
    *,
    run_tests: bool,
    max_len: int,
    concurrency: int,
    log: Callable[[str], None],
) -> list[Sample]:
    """One sample per task the oracle solves (``need_logprobs=False``: SFT trains on them)."""
    from cheetah.harness.loop import AgentError
    from cheetah.tasks.episode import Episode, run_episode
    from cheetah.tasks.oracle import OraclePolicy

    gate = asyncio.Semaphore(max(1, concurrency))
    done, pace = [0], Pace()

    async def demonstrate(task: Task) -> Sample | None:
        async with gate:
            try:
                ep = await run_episode(task, OraclePolicy(task, run_tests), sessions)
            except AgentError as e:  # the env broke, not the demonstration: skip the task
                ep = Episode(task, error=str(e))
        done[0] += 1
        if pace.due(final=done[0] == len(tasks)):
            log(f"sft: {done[0]}/{len(tasks)} demonstrations recorded")
        if ep.error is not None or ep.trajectory is None:
            log(f"sft: task {task.id} could not run, skipped: {ep.error}")
            return None
        if ep.grade is None or not ep.grade.correct:  # never imitate a wrong fix
            log(f"sft: the oracle does not solve task {task.id}; skipped")
            return None
        return sample_from_trajectory(
            ep.trajectory, tokenizer, need_logprobs=False, max_len=max_len
        )

    found = await asyncio.gather(*(demonstrate(t) for t in tasks))
    return [s for s in found if s is not None]
