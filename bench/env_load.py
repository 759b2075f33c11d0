"""Load from outside: N concurrent episodes through the session API against one env server.

A trainer that drives the model itself (TRL, verifiers, a Gymnasium loop) reaches cheetah's
sandbox only through ``TaskEnv`` (``cheetah/tasks/gym.py``): ``reset`` opens a task session on
the env server, each ``step`` runs one message's tool calls there, and the last step grades
the workspace with the task's hidden tests. This bench drives ``--concurrency`` levels
(default 1, 8, 32, 64) of such episodes at once, each level ``--waves`` times as many
episodes as it has slots (at least ``--min-episodes``), against one ``cheetah env serve``
(isolated backend) started here.

The "model" is the oracle (``tasks/oracle.py``: the reference fix found with grep, read and
applied with ``edit_file``, then "Done"), its messages prepared before timing, so every
second measured is the environment's: session create, tool calls, grading. Every episode
must come back graded correct; anything else is counted as an error. Reported per level:
episodes/s, p50/p95 latency of reset, of a tool step and of the final (grading) step, errors,
and the episodes/s ratio to the one-at-a-time level of the same run.

    python bench/env_load.py [--concurrency 1,8,32,64] [--waves 2] [--tasks benchmark]

Deliberately left out: a model in the loop (the engine's own benches measure that), several
servers (the fleet's failover has its own tests), and the TRL/verifiers adapters on top
(they add only in-process calls per step).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cheetah.harness.loop import AgentLimits
from cheetah.progress import Pace
from cheetah.tasks.gym import TaskEnv
from cheetah.tasks.loaders import load_tasks, select_tasks
from cheetah.tasks.oracle import OraclePolicy
from cheetah.tasks.remote_sessions import fleet_sessions
from cheetah.tasks.schema import Task


@dataclass
class Level:
    concurrency: int
    episodes: int = 0
    correct: int = 0
    errors: list[str] = field(default_factory=list)
    reset_s: list[float] = field(default_factory=list)
    tool_step_s: list[float] = field(default_factory=list)
    final_step_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q / 100 * (len(xs) - 1)))]


async def episode(env: TaskEnv, task: Task, script: list[str], level: Level) -> None:
    t0 = time.monotonic()
    await env.reset(task)
    level.reset_s.append(time.monotonic() - t0)
    for text in script:
        t0 = time.monotonic()
        _, _, terminated, truncated, info = await env.step(text)
        dt = time.monotonic() - t0
        if not (terminated or truncated):
            level.tool_step_s.append(dt)
            continue
        level.final_step_s.append(dt)
        if info["grade"].correct:
            level.correct += 1
        else:
            level.errors.append(f"{task.id}: graded wrong ({info['stop_reason']})")
        return
    level.errors.append(f"{task.id}: the episode did not end with the oracle's last message")


async def run_level(
    sessions,
    tasks: list[Task],
    scripts: dict[str, list[str]],
    n: int,
    waves: int,
    min_episodes: int,
    log,
) -> Level:
    level = Level(n)
    total = max(n * waves, min_episodes)
    queue = [tasks[i % len(tasks)] for i in range(total)]
    pace, done = Pace(), [0]

    async def worker() -> None:
        env = TaskEnv(sessions, AgentLimits(max_turns=20, max_wall_s=3600))
        while queue:
            task = queue.pop()
            try:
                await episode(env, task, scripts[task.id], level)
            except Exception as e:  # counted, never fatal: the point is to see them
                level.errors.append(f"{task.id}: {type(e).__name__}: {e}"[:300])
                await env.close()
            level.episodes += 1
            done[0] += 1
            if pace.due(final=done[0] == total):
                log(f"  N={n}: {done[0]}/{total} episodes")

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(n)))
    level.wall_s = time.monotonic() - t0
    return level


async def main(args: argparse.Namespace) -> int:
    tasks = select_tasks(load_tasks(args.tasks), split=args.split, limit=args.limit)
    if not tasks:
        sys.exit(f"no tasks in {args.tasks} (split {args.split})")
    scripts = {
        t.id: await asyncio.to_thread(OraclePolicy(t, run_tests=args.run_tests)._prepare)
        for t in tasks
    }
    levels = [int(x) for x in args.concurrency.split(",")]
    print(f"env_load: {len(tasks)} tasks from {args.tasks}; levels {levels} x {args.waves} waves")
    print(f"machine: {os.cpu_count()} CPUs; one env server, isolated backend", flush=True)
    results: list[Level] = []
    async with fleet_sessions([], capacity=max(levels) + 8) as sessions:
        print(f"sessions: {sessions.name}", flush=True)
        for n in levels:
            results.append(
                await run_level(
                    sessions,
                    tasks,
                    scripts,
                    n,
                    args.waves,
                    args.min_episodes,
                    lambda s: print(s, flush=True),
                )
            )
    base = results[0].episodes / results[0].wall_s if results[0].wall_s else float("nan")
    head = (
        f"{'N':>4} {'episodes':>8} {'ep/s':>7} {'x N=' + str(levels[0]):>7} "
        f"{'reset p50/p95 s':>16} {'tool step p50/p95 s':>20} {'grade step p50/p95 s':>21} "
        f"{'errors':>6}"
    )
    print(head)
    for lv in results:
        rate = lv.episodes / lv.wall_s
        print(
            f"{lv.concurrency:>4} {lv.episodes:>8} {rate:>7.2f} {rate / base:>7.2f} "
            f"{pct(lv.reset_s, 50):>7.2f}/{pct(lv.reset_s, 95):<8.2f} "
            f"{pct(lv.tool_step_s, 50):>9.2f}/{pct(lv.tool_step_s, 95):<10.2f} "
            f"{pct(lv.final_step_s, 50):>10.2f}/{pct(lv.final_step_s, 95):<10.2f} "
            f"{len(lv.errors):>6}"
        )
    steps = [len(s) for s in scripts.values()]
    print(
        f"steps per episode: median {statistics.median(steps)} (oracle, tests run: {args.run_tests})"
    )
    for lv in results:
        for e in lv.errors[:5]:
            print(f"error at N={lv.concurrency}: {e}")
    return 1 if any(lv.errors for lv in results) else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--concurrency",
        default="1,8,32,64",
        help="comma-separated levels; the first is the baseline",
    )
    ap.add_argument("--waves", type=int, default=2, help="episodes per level = level x waves")
    ap.add_argument("--min-episodes", type=int, default=16, help="at least this many per level")
    ap.add_argument("--tasks", default="benchmark", help="task file or bundled set")
    ap.add_argument("--split", default="heldout")
    ap.add_argument("--limit", type=int, default=64, help="distinct tasks used (round robin)")
    ap.add_argument(
        "--run-tests", action="store_true", help="the oracle also runs the tests in a turn"
    )
    sys.exit(asyncio.run(main(ap.parse_args())))
