"""Paired `cheetah eval` runs for the benches that compare conditions on the same tasks
(`search_ablation.py`: a tool taken away; `served_quality.py`: one checkpoint served by two
engines): run one condition, read its report back per task, print the paired table.

Per condition: solved, pass rate with its Wilson 95% interval, turns per task and the
search calls made (codebase_search, grep); against the first condition: the exact McNemar
test over the tasks both solved or not, and turns per task (exact Wilcoxon signed-rank).
Greedy and one sample a task, so a task is one pair.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cheetah.harness.trajectory import Trajectory
from cheetah.tasks.stats import compare, wilcoxon_signed_rank, wilson_interval


def run_eval(
    model: str,
    out: Path,
    *,
    tasks: str,
    split: str,
    tier: str,
    max_turns: int,
    max_new_tokens: int,
    concurrency: int,
    limit: int = 0,
    extra: list[str] | None = None,
) -> None:
    """`cheetah eval` of ``model`` into ``out`` (greedy, one sample a task)."""
    argv = [
        str(Path(sys.executable).parent / "cheetah"), "eval", "--tasks", tasks,
        "--split", split, "--tier", tier, "--model", model,
        "--max-turns", str(max_turns), "--max-new-tokens", str(max_new_tokens),
        "--concurrency", str(concurrency), "--out", str(out), *(extra or []),
    ]  # fmt: skip
    if limit:
        argv += ["--limit", str(limit)]
    print("$", shlex.join(argv), flush=True)
    subprocess.run(argv, check=True)


def load(out: Path) -> dict[str, dict]:
    """Task id -> whether it passed, its turns and its search calls (one sample a task)."""
    import json

    report = json.loads((out / "report.json").read_text())
    rows = {}
    for s in report["samples"]:
        traj = Trajectory.load(s["trajectory"]) if s.get("trajectory") else None
        names = [c.name for c in traj.calls] if traj else []
        rows[s["task_id"]] = {
            "correct": bool(s["correct"]),
            "turns": len(traj.turns) if traj else 0,
            "codebase_search": names.count("codebase_search"),
            "grep": names.count("grep"),
        }
    return rows


def print_paired(conditions: dict[str, dict[str, dict]], title: str) -> None:
    """The table over the tasks every condition ran, then each condition against the first."""
    shared = sorted(set.intersection(*(set(rows) for rows in conditions.values())))
    print(f"\n{len(shared)} tasks, {title}")
    print(f"{'condition':<30} {'solved':>7} {'pass%':>6} {'95% CI':>14} {'turns':>6} "
          f"{'codebase_search':>16} {'grep':>6}  (calls per task)")  # fmt: skip
    for name, rows in conditions.items():
        solved = sum(rows[t]["correct"] for t in shared)
        low, high = wilson_interval(solved, len(shared))
        print(
            f"{name:<30} {solved:>7} {100 * solved / len(shared):>6.1f} "
            f"[{100 * low:5.1f}, {100 * high:5.1f}] "
            f"{fmean(rows[t]['turns'] for t in shared):>6.2f} "
            f"{fmean(rows[t]['codebase_search'] for t in shared):>16.2f} "
            f"{fmean(rows[t]['grep'] for t in shared):>6.2f}"
        )
    (first, base), *others = conditions.items()
    for name, rows in others:
        c = compare(
            {t: base[t]["correct"] for t in shared}, {t: rows[t]["correct"] for t in shared}
        )
        turns_p = wilcoxon_signed_rank(
            [base[t]["turns"] for t in shared], [rows[t]["turns"] for t in shared]
        )
        print(
            f"{name} vs {first}: solved only by {name} {c.only_after}, only by {first} "
            f"{c.only_before}, exact McNemar p = {c.p_value:.3g}; turns per task "
            f"{fmean(rows[t]['turns'] - base[t]['turns'] for t in shared):+.2f} "
            f"(Wilcoxon p = {turns_p:.3g})"
        )
