"""Pure functions from trajectories and grades to the numbers an eval reports.

``behaviour`` summarizes how a set of runs used the tools (what learning should
change first): parse rate, old_str match rate, right-file edit rate, calls per turn,
turns per task, reads and searches before the first edit, edits that would change
nothing, closing answers that claim a change the workspace does not show
(``tasks/claims.py``), and the share of turns cut by the token limit. Confidence
intervals and paired tests live in ``tasks/stats.py``.

Deliberately left out: per-token latency (the report shows wall time per task; token
timing belongs to the inference benchmarks).
"""

from __future__ import annotations

from math import comb
from statistics import fmean

from cheetah.harness.trajectory import Trajectory
from cheetah.tasks.claims import false_claim

EXPLORE_TOOLS = frozenset({"read_file", "list_dir", "grep", "codebase_search"})
EDIT_TOOLS = frozenset({"edit_file"})


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k) for n samples, c correct."""
    if n <= 0 or k <= 0:
        raise ValueError("n and k must be positive")
    k = min(k, n)
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def trajectory_metrics(traj: Trajectory) -> dict[str, float | int | None]:
    """Tool use of one run: calls, parallelism, exploration before the first edit, edits."""
    calls = traj.calls
    turns_with_calls = sum(1 for t in traj.turns if t.calls)
    first_edit = next((i for i, c in enumerate(calls) if c.name in EDIT_TOOLS), None)
    before = calls if first_edit is None else calls[:first_edit]
    prompt = [t.prompt_tokens for t in traj.turns if t.prompt_tokens is not None]
    return {
        "turns": len(traj.turns),
        "tool_calls": len(calls),
        "tool_errors": sum(c.is_error for c in calls),
        "calls_per_turn": len(calls) / turns_with_calls if turns_with_calls else 0.0,
        "max_calls_in_turn": max((len(t.calls) for t in traj.turns), default=0),
        "explore_before_edit": sum(c.name in EXPLORE_TOOLS for c in before),
        "first_edit_turn": next(
            (t.index for t in traj.turns if any(c.name in EDIT_TOOLS for c in t.calls)), None
        ),
        "edits": sum(c.name in EDIT_TOOLS and not c.is_error for c in calls),
        "noop_edits": sum(
            c.name in EDIT_TOOLS
            and "old_str" in c.args
            and c.args["old_str"] == c.args.get("new_str")
            for c in calls
        ),
        "false_claim": int(false_claim(traj)),
        "turns_cut": sum(t.finish_reason == "length" for t in traj.turns),
        "completion_tokens": traj.completion_tokens,
        "prompt_tokens": sum(prompt) if prompt else None,
        "agent_wall_s": traj.wall_s,
    }


def mean_of(rows: list[dict], key: str) -> float | None:
    """Mean of ``key`` over the rows that have a number for it."""
    values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
    return fmean(values) if values else None


def _share(num: int, den: int) -> float | None:
    return num / den if den else None


def behaviour(trajs: list[Trajectory], targets: list[set[str] | None]) -> dict[str, float | None]:
    """Tool-use behaviour over runs; ``targets[i]`` are the files run i should edit (the
    reference patch's), or None when unknown. A rate with nothing to count is None."""
    calls = [c for t in trajs for c in t.calls]
    turns = [turn for t in trajs for turn in t.turns]
    replaces = [c for c in calls if c.name == "edit_file" and "old_str" in c.args]
    judged = [(t, want) for t, want in zip(trajs, targets, strict=True) if want]
    right = sum(
        any(
            c.name in EDIT_TOOLS and not c.is_error and norm(c.args.get("path", "")) in want
            for c in t.calls
        )
        for t, want in judged
    )
    rows = [trajectory_metrics(t) for t in trajs]
    return {
        "parse_rate": _share(sum(not c.meta.get("malformed") for c in calls), len(calls)),
        "old_str_match_rate": _share(sum(not c.is_error for c in replaces), len(replaces)),
        "right_file_edit_rate": _share(right, len(judged)),
        "calls_per_turn": mean_of(rows, "calls_per_turn"),
        "turns_per_task": mean_of(rows, "turns"),
        "explore_before_edit": mean_of(rows, "explore_before_edit"),
        "noop_edits": mean_of(rows, "noop_edits"),
        "false_claims": mean_of(rows, "false_claim"),
        "truncated_turn_share": _share(
            sum(turn.finish_reason == "length" for turn in turns), len(turns)
        ),
    }


def norm(path: str) -> str:
    """A workspace path as patches name it (no ./, no doubled or trailing slashes)."""
    return "/".join(p for p in path.strip().split("/") if p not in ("", "."))
