"""Demonstrations for the SFT warm start: the oracle's episodes turned into training samples.

``collect_demonstrations`` runs ``OraclePolicy`` (the reference patch applied through the
tools, ``tasks/oracle.py``) on each task through ``tasks.episode.run_episode``, the episode
eval and RL run too, many at once, and keeps the episodes the grader passes: a task whose
session fails is reported and skipped, and a wrong fix is never imitated. ``TrainJob.sft``
trains on the samples. ``sft_samples_for`` chooses the source: those demonstrations, or
the correct trajectories of a ``cheetah export`` file (``train.sft_data``: a stronger
model's runs through ``cheetah eval``, say).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

from cheetah.progress import Pace
from cheetah.rl.config import TrainRunConfig
from cheetah.rl.data import Sample, sample_from_trajectory, untrain_turns
from cheetah.rl.export import sft_samples
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
    read_share: float = 0.0,
    recover_share: float = 0.0,
    verify_share: float = 0.0,
    retry_share: float = 0.0,
) -> list[Sample]:
    """One sample per task the oracle solves (``need_logprobs=False``: SFT trains on them);
    ``read_share`` of them read around a quoted line before editing (``oracle.reads_first``),
    ``recover_share`` recover from a refused edit (``oracle.recovers``; the refused edit is
    not trained on), ``verify_share`` run the failing tests after the edit, ``retry_share`` of
    those make a wrong fix first (``oracle.verifies``, ``oracle.retries``)."""
    from cheetah.harness.loop import AgentError
    from cheetah.tasks.episode import Episode, run_episode
    from cheetah.tasks.oracle import OraclePolicy, reads_first, recovers, retries, verifies

    gate = asyncio.Semaphore(max(1, concurrency))
    done, pace = [0], Pace()

    async def demonstrate(task: Task) -> Sample | None:
        async with gate:
            try:
                policy = OraclePolicy(
                    task,
                    run_tests,
                    reads_first(task, read_share),
                    recovers(task, recover_share),
                    verify := verifies(task, verify_share),
                    verify and retries(task, retry_share),
                )
                ep = await run_episode(task, policy, sessions)
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
        sample = sample_from_trajectory(
            ep.trajectory, tokenizer, need_logprobs=False, max_len=max_len
        )
        return untrain_turns(sample, policy.untrained)

    found = await asyncio.gather(*(demonstrate(t) for t in tasks))
    return [s for s in found if s is not None]


async def sft_samples_for(
    cfg: TrainRunConfig,
    env_cfg: TrainRunConfig,
    train_tasks: list[Task],
    records: list[dict[str, Any]] | None,
    tokenizer: Any,
    rng: random.Random,
    log: Callable[[str], None],
    also: list[Task] | None = None,
) -> list[Sample]:
    """The warm start's samples: from ``records`` (``train.sft_data``) when given, else the
    oracle's demonstrations of at most ``sft_steps x sft_batch`` tasks, run on the env
    servers of ``env_cfg``: ``also`` (``tasks.sft_also``) and training tasks for the rest."""
    t = cfg.train
    if records is not None:
        samples, skipped = sft_samples(records, tokenizer, t.max_seq_len)
        log(f"sft: {len(samples)} correct trajectories from {t.sft_data} "
            f"({skipped} wrong or ungraded left out)")  # fmt: skip
        return samples
    from cheetah.rl.task_rollout import env_token
    from cheetah.tasks.remote_sessions import fleet_sessions

    r = env_cfg.rollout
    tasks = [task for task in train_tasks if task.reference_patch]
    rng.shuffle(tasks)  # one pass of the SFT steps needs at most steps x batch demos
    room = t.sft_steps * max(1, t.sft_batch)
    extra = [task for task in also or [] if task.reference_patch][:room]
    tasks = tasks[: room - len(extra)] + extra
    async with fleet_sessions(r.env_urls, env_token(env_cfg)) as sessions:
        return await collect_demonstrations(
            tasks,
            sessions,
            tokenizer,
            run_tests=t.sft_run_tests,
            max_len=t.max_seq_len,
            concurrency=r.workers * r.worker_capacity,
            log=log,
            read_share=t.sft_read_share,
            recover_share=t.sft_recover_share,
            verify_share=t.sft_verify_share,
            retry_share=t.sft_retry_share,
        )
