"""Rollout orchestration on Ray: workers run rollouts, the driver keeps them all busy.

``RolloutWorker`` is a Ray actor hosting a rollout function (the harness against an
environment and an engine, or a fake for benchmarks); it runs up to ``capacity``
rollouts at once (an async actor). ``run_rollouts`` is the driver loop around the
pure ``RolloutScheduler``: start what the scheduler assigns, and whenever any rollout
finishes, record it and start the next one at once; whenever the scheduler has a
batch, hand it to the trainer (``on_batch``), which runs concurrently with the
rollouts (asynchronous) unless the scheduler is in barrier mode. A worker that dies
mid-rollout has its rollouts re-queued; nothing it finished is lost (results are
handed to ``on_result`` the moment they arrive, for the run store to persist).

One machine: ``ray.init()`` local; a cluster: ``ray.init(address=...)`` and more
workers. Explicit actor methods, explicit fan-out (no generated remote methods).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Protocol

import ray
from ray.exceptions import ActorDiedError, RayActorError

from cheetah.rl.scheduler import Finished, Group, RolloutScheduler, RolloutSpec


class RolloutFn(Protocol):
    async def __call__(self, spec: RolloutSpec) -> Finished: ...


@ray.remote
class RolloutWorker:
    def __init__(self, make_fn: Callable[[], RolloutFn]) -> None:
        self.fn = make_fn()

    async def run(self, spec: RolloutSpec) -> Finished:
        return await self.fn(spec)

    def ping(self) -> bool:
        return True


def start_workers(
    n: int, capacity: int, make_fn: Callable[[], RolloutFn], num_cpus: float = 0.25
) -> dict[Hashable, Any]:
    """``n`` worker actors, each running up to ``capacity`` rollouts concurrently."""
    return {
        f"worker-{i}": RolloutWorker.options(max_concurrency=capacity, num_cpus=num_cpus).remote(
            make_fn
        )
        for i in range(n)
    }


@dataclass
class DriverStats:
    batches: int = 0
    worker_failures: int = 0


async def run_rollouts(
    scheduler: RolloutScheduler,
    workers: dict[Hashable, Any],
    on_batch: Callable[[list[Group]], Awaitable[None]],
    *,
    on_result: Callable[[Finished], None] | None = None,
) -> DriverStats:
    """Drive rollouts until the scheduler has nothing left to start, run or train on."""
    stats = DriverStats()
    running: dict[asyncio.Future, tuple[Hashable, RolloutSpec]] = {}
    trainer: asyncio.Task | None = None
    version = 0

    def launch() -> None:
        for wid, spec in scheduler.assign(trainer_busy=trainer is not None):
            fut = asyncio.wrap_future(workers[wid].run.remote(spec).future())
            running[fut] = (wid, spec)

    def maybe_train() -> None:
        nonlocal trainer
        if trainer is None and (batch := scheduler.take_batch(version)) is not None:
            stats.batches += 1
            trainer = asyncio.create_task(on_batch(batch))

    launch()
    maybe_train()
    while running or trainer is not None:
        waiting = [*running, *([trainer] if trainer else [])]
        done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        for fut in done:
            if fut is trainer:
                trainer.result()  # a trainer failure stops the run, loudly
                trainer = None
                version += 1
                continue
            wid, spec = running.pop(fut)
            try:
                result = fut.result()
            except (RayActorError, ActorDiedError):
                stats.worker_failures += 1
                scheduler.fail(spec, worker_lost=True)
                workers.pop(wid, None)
                continue
            if on_result:
                on_result(result)
            scheduler.finish(result)
        launch()
        maybe_train()
        if not running and trainer is None and not scheduler.idle and not scheduler.capacity:
            raise RuntimeError("every rollout worker has died")
    return stats
