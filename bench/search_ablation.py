"""Does semantic search help the learned agent? The same checkpoint on the same held-out
tasks, with `codebase_search` on offer and taken away (`cheetah eval --without-tool`).

Runs `cheetah eval` twice (greedy, one sample a task) and prints, paired over the tasks:
pass rate with its Wilson 95% interval, the exact McNemar test, turns per task (exact
Wilcoxon signed-rank), and the search calls the agent made (codebase_search, grep) in each
condition. `--reuse` compares the reports already in `--out` without running again.

    python bench/search_ablation.py --model runs/find/checkpoints/step-3 --tier locate \
        --out /tmp/ablate
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cheetah.harness.trajectory import Trajectory
from cheetah.tasks.stats import compare, wilcoxon_signed_rank, wilson_interval

CONDITIONS = {"with": [], "without": ["--without-tool", "codebase_search"]}


def run_eval(a: argparse.Namespace, cond: str) -> None:
    argv = [
        str(Path(sys.executable).parent / "cheetah"), "eval", "--tasks", a.tasks,
        "--split", a.split, "--tier", a.tier, "--model", a.model,
        "--max-turns", str(a.max_turns), "--max-new-tokens", str(a.max_new_tokens),
        "--concurrency", str(a.concurrency), "--out", str(a.out / cond), *CONDITIONS[cond],
    ]  # fmt: skip
    if a.limit:
        argv += ["--limit", str(a.limit)]
    print("$", shlex.join(argv), flush=True)
    subprocess.run(argv, check=True)


def load(out: Path) -> dict[str, dict]:
    """Task id -> whether it passed, its turns and its search calls (one sample a task)."""
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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="checkpoint directory (or any --model spec)")
    p.add_argument("--tasks", default="curriculum")
    p.add_argument("--split", default="heldout")
    p.add_argument("--tier", default="locate", help="a finding tier: locate or named")
    p.add_argument("--limit", type=int, default=0, help="first N tasks only (0: all)")
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--reuse", action="store_true", help="compare the reports in --out as they are")
    a = p.parse_args()
    for cond in CONDITIONS:
        if not (a.reuse and (a.out / cond / "report.json").is_file()):
            run_eval(a, cond)
    on, off = load(a.out / "with"), load(a.out / "without")
    shared = sorted(set(on) & set(off))
    print(f"\n{len(shared)} tasks ({a.tier}, {a.split}), model {a.model}")
    print(f"{'condition':<28} {'solved':>7} {'pass%':>6} {'95% CI':>14} {'turns':>6} "
          f"{'codebase_search':>16} {'grep':>6}  (calls per task)")  # fmt: skip
    for name, rows in (("codebase_search on offer", on), ("codebase_search taken away", off)):
        solved = sum(rows[t]["correct"] for t in shared)
        low, high = wilson_interval(solved, len(shared))
        print(
            f"{name:<28} {solved:>7} {100 * solved / len(shared):>6.1f} "
            f"[{100 * low:5.1f}, {100 * high:5.1f}] "
            f"{fmean(rows[t]['turns'] for t in shared):>6.2f} "
            f"{fmean(rows[t]['codebase_search'] for t in shared):>16.2f} "
            f"{fmean(rows[t]['grep'] for t in shared):>6.2f}"
        )
    c = compare({t: off[t]["correct"] for t in shared}, {t: on[t]["correct"] for t in shared})
    turns_p = wilcoxon_signed_rank(
        [off[t]["turns"] for t in shared], [on[t]["turns"] for t in shared]
    )
    print(
        f"on offer vs taken away: solved only with it {c.only_after}, only without it "
        f"{c.only_before}, exact McNemar p = {c.p_value:.3g}; turns per task "
        f"{fmean(on[t]['turns'] - off[t]['turns'] for t in shared):+.2f} "
        f"(Wilcoxon p = {turns_p:.3g})"
    )


if __name__ == "__main__":
    main()
