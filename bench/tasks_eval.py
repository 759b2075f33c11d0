"""Cost of the eval pipeline itself: workspace, agent loop, grading, per task.

Runs the oracle policy (which applies each task's reference patch through the tools)
over the bundled benchmark at a few concurrency levels and prints, per level, the
wall time, tasks per minute, the mean wall time of one sample and of its grading, and
pass@1 (which must be 1.0: anything else is a pipeline or task bug).

    python bench/tasks_eval.py [--tasks benchmarks/tasks.jsonl] [--concurrency 1 2 4] [--limit N]
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
from cheetah.tasks.session import LocalSessionFactory

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=Path, default=ROOT / "benchmarks" / "tasks.jsonl")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()
    tasks = load_tasks(args.tasks)[: args.limit]
    print(f"{len(tasks)} tasks from {args.tasks}")
    print(
        f"{'conc':>4} {'wall s':>8} {'tasks/min':>9} {'sample s':>9} {'grade s':>8} {'pass@1':>7}"
    )
    for conc in args.concurrency:
        t0 = time.monotonic()
        report = asyncio.run(
            run_eval(tasks, OraclePolicy, LocalSessionFactory(), EvalConfig(concurrency=conc))
        )
        wall = time.monotonic() - t0
        sample_s = statistics.fmean(s.wall_s for s in report.samples)
        grade_s = statistics.fmean(
            s.wall_s - (s.metrics.get("agent_wall_s") or 0.0) for s in report.samples
        )
        print(
            f"{conc:>4} {wall:>8.1f} {60 * len(tasks) / wall:>9.1f} {sample_s:>9.2f} "
            f"{grade_s:>8.2f} {report.summary['pass@1']:>7.3f}"
        )


if __name__ == "__main__":
    main()
