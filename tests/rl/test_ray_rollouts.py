"""The Ray driver with real actors: no barrier, every rollout trained once, a dead worker
loses nothing."""

import asyncio
from collections import Counter

import pytest
import ray

from cheetah.harness.trajectory import Trajectory
from cheetah.rl.ray_rollouts import run_rollouts, start_workers
from cheetah.rl.scheduler import RolloutScheduler
from tests.conftest import local_ray
from tests.rl.fakes import FakeEngine, FakeRollout, FakeWork


@pytest.fixture(scope="module")
def ray_local():
    with local_ray(num_cpus=2):
        yield


def test_async_run_trains_every_rollout_once_and_survives_a_dead_worker(ray_local):
    engine = FakeEngine.options(max_concurrency=500).remote(slots=8, token_s=0.002)
    work = FakeWork(turns_median=3, tool_median_s=0.02, max_turns=12)
    workers = start_workers(3, 8, lambda: FakeRollout(engine, work))
    sched = RolloutScheduler(
        lambda g: f"task-{g}",
        workers={w: 8 for w in workers},
        group_size=4,
        max_in_flight=24,
        groups_per_step=2,
        max_staleness=100,
        max_rollouts=96,
    )
    trained: list = []
    versions_seen: set[int] = set()

    async def on_batch(batch):
        await asyncio.sleep(0.2)
        trained.extend(r for g in batch for r in g.rollouts)
        for g in batch:
            versions_seen.update(v for r in g.rollouts for v in r.versions)
        await engine.load_weights.remote(len(trained), 0.0)

    victim = next(iter(workers))
    victim_handle = workers[victim]

    async def main():
        async def kill_soon():
            await asyncio.sleep(0.5)
            ray.kill(victim_handle)

        killer = asyncio.create_task(kill_soon())
        stats = await run_rollouts(sched, workers, on_batch)
        await killer
        return stats

    stats = asyncio.run(main())
    ids = Counter(r.spec.rollout_id for r in trained)
    assert sorted(ids) == list(range(96)) and max(ids.values()) == 1  # none lost, none twice
    assert stats.worker_failures >= 1 and sched.stats.failed >= 1
    assert victim not in workers and sched.stats.started == 96 + sched.stats.failed
    assert len(versions_seen) > 1  # rollouts ran across weight updates
    turns = [len(Trajectory.model_validate_json(r.trajectory).turns) for r in trained]
    assert [len(r.versions) for r in trained] == turns  # a version on every turn
