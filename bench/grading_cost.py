"""Grading cost per task: the grader of a baseline commit against this tree's, in one run.

Issue 44 moved the checks from the agent's session to a fresh session of the pristine snapshot
with only the agent's source diff applied (``cheetah/tasks/change.py``, ``grader.py``). This
bench prices that: for each task, a session is opened, the reference patch written in (what a
solving agent leaves), and ``grade`` timed (``Grade.wall_s``: from the agent's stop to the
reward, the fresh session's start, setup and close included). Both graders grade the same
tasks in isolated sessions, alternating in rounds (old, new, old, new, ...) so a busy machine
slows both alike; each round is its own process importing its tree (a ``git worktree`` of
``--baseline`` for the old one). Printed: the median and p90 per grader, the ratio of medians,
and whether every grade was correct (the oracle must still pass under both).

    python bench/grading_cost.py [--tasks benchmark] [--limit 30] [--rounds 2]
        [--baseline d5e6f54]

Deliberately left out: the agent's run (identical under both graders) and remote env servers
(a fresh session there costs an HTTP create and close more).
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


async def _measure(tasks_file: str, limit: int) -> list[dict]:
    """In this process's ``cheetah`` (whichever tree PYTHONPATH names): grade each solved task."""
    from cheetah.tasks import grader
    from cheetah.tasks.loaders import load_tasks
    from cheetah.tasks.patch import patch_tree
    from cheetah.tasks.session import local_sessions, open_task

    tasks = [t for t in load_tasks(tasks_file) if t.reference_patch][:limit]
    sessions = local_sessions("isolated")
    new_api = "sessions" in inspect.signature(grader.grade).parameters
    rows = []
    for task in tasks:
        ws = await open_task(sessions, task)
        try:
            baseline = await grader.capture_baseline(ws)
            await ws.write_files(patch_tree(baseline, task.reference_patch))
            args = (task, ws, baseline, sessions) if new_api else (task, ws, baseline)
            g = await grader.grade(*args)
        finally:
            await sessions.close(ws)
        rows.append({"task": task.id, "wall_s": g.wall_s, "correct": g.correct})
    return rows


def _worktree(commit: str) -> Path:
    path = Path(f"/tmp/cheetah-bench-grader-{commit}")
    if not (path / "cheetah").is_dir():
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), commit],
            check=True,
            capture_output=True,
        )
    return path


def _round(src: Path, tasks: str, limit: int) -> list[dict]:
    env = {"PYTHONPATH": str(src), "PATH": f"{ROOT / '.venv' / 'bin'}:/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, __file__, "--measure", "--tasks", tasks, "--limit", str(limit)],
        cwd=src,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="benchmark", help="task file or bundled set")
    ap.add_argument("--limit", type=int, default=30, help="tasks graded per round")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per grader")
    ap.add_argument("--baseline", default="d5e6f54", help="commit of the grader to compare")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(asyncio.run(_measure(args.tasks, args.limit))))
        return
    trees = {"old": _worktree(args.baseline), "new": ROOT}
    walls: dict[str, list[float]] = {"old": [], "new": []}
    correct: dict[str, list[bool]] = {"old": [], "new": []}
    t0 = time.monotonic()
    for r in range(args.rounds):
        for name, src in trees.items():
            rows = _round(src, args.tasks, args.limit)
            walls[name] += [row["wall_s"] for row in rows]
            correct[name] += [row["correct"] for row in rows]
            print(
                f"round {r + 1} {name}: {len(rows)} tasks, median "
                f"{statistics.median(row['wall_s'] for row in rows):.3f} s "
                f"({time.monotonic() - t0:.0f} s so far)",
                flush=True,
            )
    print(f"\n{'grader':<8} {'tasks':>6} {'median s':>9} {'p90 s':>7} {'correct':>8}")
    for name in trees:
        w = sorted(walls[name])
        p90 = w[int(0.9 * (len(w) - 1))]
        ok = f"{sum(correct[name])}/{len(correct[name])}"
        print(f"{name:<8} {len(w):>6} {statistics.median(w):>9.3f} {p90:>7.3f} {ok:>8}")
    ratio = statistics.median(walls["new"]) / statistics.median(walls["old"])
    print(f"\nnew / old, median grading time per task: {ratio:.2f}x")


if __name__ == "__main__":
    main()
