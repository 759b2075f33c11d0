"""Asynchronous, load-balanced rollouts against a synchronous-barrier baseline.

(a) discrete-event simulation driving the real RolloutScheduler: 1,000 workers,
    100,000 rollouts, lognormal turn counts and tool latencies (sigma 1.5); a sweep
    over max_staleness shows what bounding staleness costs.
(b) the same comparison on real Ray workers (RolloutWorker actors running the real
    harness loop) with a fake engine that sleeps per token and tools that sleep.

Goal: async at least 3x the barrier's throughput, engine utilization at least 90%.

    python bench/rollout_scheduling.py [--skip-sim] [--skip-ray] [--ray-rollouts 384]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the doubles live in tests/

import ray

from cheetah.rl.ray_rollouts import run_rollouts, start_workers
from cheetah.rl.scheduler import RolloutScheduler
from tests.rl.fakes import FakeEngine, FakeRollout, FakeWork
from tests.rl.simulate import SimConfig, simulate

SLOTS = 32  # rollouts per Ray worker


def row(r) -> str:
    return (
        f"{r.mode:8s} {r.rollouts_per_hour:12.0f} {r.engine_utilization:8.3f} "
        f"{r.engine_utilization_steady:8.3f} {r.worker_utilization:8.3f} "
        f"{r.groups_dropped_stale:8d} {r.makespan_s / 3600:9.2f} {r.wall_s:7.1f}"
    )


def part_a() -> None:
    cfg = SimConfig()
    print(f"(a) simulation: {cfg}")
    print(
        f"{'mode':8s} {'rollouts/h':>12s} {'eng.util':>8s} {'steady':>8s} {'wrk.util':>8s} "
        f"{'stale':>8s} {'sim hours':>9s} {'wall s':>7s}"
    )
    sync = simulate(cfg, barrier=True)
    print(row(sync))
    for st in (4, 8, 16):
        cfg_st = SimConfig(max_staleness=st)
        r = simulate(cfg_st, barrier=False)
        print(
            row(r)
            + f"   max_staleness={st}  ratio {r.rollouts_per_hour / sync.rollouts_per_hour:.2f}x"
        )


async def ray_run(barrier: bool, rollouts: int, engine, workers) -> dict:
    steps = {"n": 0, "trained": 0}

    async def on_batch(batch) -> None:
        await asyncio.sleep(1.0)  # a training step
        steps["n"] += 1
        steps["trained"] += sum(len(g.rollouts) for g in batch)
        await engine.load_weights.remote(steps["n"], 0.1)

    sched = RolloutScheduler(
        lambda g: f"task-{g}",
        workers={w: 16 for w in workers},
        group_size=8,
        max_in_flight=16 * len(workers),
        groups_per_step=8,
        max_staleness=8,
        barrier=barrier,
        max_rollouts=rollouts,
    )
    await engine.reset_stats.remote()
    steady = []

    def on_result(_) -> None:  # engine figures as the last rollout starts: no end-of-run drain
        if sched.done_starting and not steady:
            steady.append(engine.snapshot.remote())

    t0 = time.perf_counter()
    await run_rollouts(sched, workers, on_batch, on_result=on_result)
    wall = time.perf_counter() - t0
    util = await engine.utilization.remote()
    busy, cap = await steady[0] if steady else (0.0, 1.0)
    return {
        "mode": "barrier" if barrier else "async",
        "wall_s": wall,
        "trained": steps["trained"],
        "per_s": steps["trained"] / wall,
        "engine_util": util,
        "steady": busy / cap,
        "dropped": sched.stats.groups_dropped_stale,
    }


def part_b(rollouts: int) -> None:
    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR")
    try:
        engine = FakeEngine.options(max_concurrency=2000).remote(slots=16, token_s=0.005)
        work = FakeWork()
        workers = start_workers(4, SLOTS, lambda: FakeRollout(engine, work))
        print(
            f"\n(b) Ray: 4 workers x {SLOTS} slots, engine 16 slots x 0.005 s/token, {work}, "
            f"{rollouts} rollouts, groups of 8, 8 groups per 1 s training step"
        )
        results = [asyncio.run(ray_run(b, rollouts, engine, workers)) for b in (True, False)]
        for r in results:
            print(
                f"{r['mode']:8s} trained {r['trained']:5d} in {r['wall_s']:6.1f} s  "
                f"{r['per_s']:6.2f} rollouts/s  engine util {r['engine_util']:.3f} "
                f"(steady {r['steady']:.3f})  "
                f"stale groups dropped {r['dropped']}"
            )
        print(f"ratio async/barrier: {results[1]['per_s'] / results[0]['per_s']:.2f}x")
    finally:
        ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--skip-sim", action="store_true")
    ap.add_argument("--skip-ray", action="store_true")
    ap.add_argument("--ray-rollouts", type=int, default=512)
    args = ap.parse_args()
    print(f"command: python {' '.join(shlex.quote(a) for a in sys.argv)}")
    if not args.skip_sim:
        part_a()
    if not args.skip_ray:
        part_b(args.ray_rollouts)


if __name__ == "__main__":
    main()
