"""Cost of the eval pipeline itself: workspace, agent loop, grading, per task.

Runs the oracle policy (which applies each task's reference patch through the tools)
over the bundled benchmark at a few concurrency levels and prints, per level and
session kind, the wall time, tasks per minute, the mean wall time of one sample and
of its grading, and pass@1 (which must be 1.0: anything else is a pipeline or task
bug). Session kinds, compared in the same run: ``local`` (trusted copies, the baseline),
``isolated`` (in-process sandbox sessions) and ``fleet`` (sessions on an isolated env
server over HTTP, what ``cheetah eval`` uses by default).

    python bench/tasks_eval.py [--tasks benchmark] [--concurrency 1 2 4]
        [--sessions local isolated fleet] [--limit N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from pathlib import Path

from cheetah.tasks.evaluate import EvalConfig, run_eval
from cheetah.tasks.loaders import load_tasks
from cheetah.tasks.oracle import OraclePolicy
from cheetah.tasks.remote_sessions import fleet_sessions
from cheetah.tasks.session import local_sessions


async def run(tasks, kind: str, conc: int):
    config = EvalConfig(concurrency=conc)
    if kind == "fleet":
        async with fleet_sessions([], capacity=64) as sessions:
            return await run_eval(tasks, OraclePolicy, sessions, config)
    return await run_eval(tasks, OraclePolicy, local_sessions(kind), config)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--tasks", type=Path, default=Path("benchmark"), help="task file or bundled set"
    )
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument(
        "--sessions", nargs="+", default=["local", "isolated", "fleet"], help="session kinds"
    )
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    tasks = load_tasks(args.tasks)[: args.limit]
    print(f"{len(tasks)} tasks from {args.tasks}")
    print(
        f"{'sessions':>9} {'conc':>4} {'wall s':>8} {'tasks/min':>9} {'sample s':>9} "
        f"{'grade s':>8} {'pass@1':>7} {'vs local':>8}"
    )
    for conc in args.concurrency:
        base = None
        for kind in args.sessions:
            t0 = time.monotonic()
            report = asyncio.run(run(tasks, kind, conc))
            wall = time.monotonic() - t0
            base = base if base is not None else (wall if kind == "local" else None)
            sample_s = statistics.fmean(s.wall_s for s in report.samples)
            grade_s = statistics.fmean(
                s.wall_s - (s.metrics.get("agent_wall_s") or 0.0) for s in report.samples
            )
            ratio = f"{wall / base:>7.2f}x" if base else f"{'-':>8}"
            print(
                f"{kind:>9} {conc:>4} {wall:>8.1f} {60 * len(tasks) / wall:>9.1f} "
                f"{sample_s:>9.2f} {grade_s:>8.2f} {report.summary['pass@1']:>7.3f} {ratio}"
            )


if __name__ == "__main__":
    main()
