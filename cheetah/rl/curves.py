"""What a training run reports besides the held-out stages: per-step behaviour metrics of the
rollouts, the reward-curve plot (``reward.png``) and the learning curve (``learning.png``:
held-out pass rate and turns per task against rollouts trained on). ``rl/stages.py`` has
the stage summary. Left out: plots of the behaviour metrics (the dashboard draws every
stored series).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from cheetah.harness.trajectory import Trajectory
from cheetah.rl.reward import call_success_rate
from cheetah.rl.store import RunStore
from cheetah.tasks.metrics import behaviour, mean_of, trajectory_metrics


def behaviour_metrics(trajs: list[Trajectory]) -> dict[str, float]:
    """One step's rollouts described as the held-out stages describe theirs
    (``tasks.metrics.behaviour``: parse rate, ``old_str`` match rate, calls per turn, reads
    before the first edit, truncated turns), plus edits per task, completion tokens per
    solved task and the share of tool calls without error. A rate with nothing to count
    (no edit this step, nothing solved) is left out rather than stored as 0."""
    rows = [trajectory_metrics(t) for t in trajs]
    solved = [r for r, t in zip(rows, trajs, strict=True) if t.solved]
    out = behaviour(trajs, [None] * len(trajs))  # no task objects here: no right-file rate
    out["edits_per_task"] = mean_of(rows, "edits")
    out["tokens_per_solved"] = mean_of(solved, "completion_tokens")
    out["call_success"] = statistics.fmean(map(call_success_rate, trajs)) if trajs else None
    return {k: float(v) for k, v in out.items() if v is not None}


def plot_curves(store: RunStore, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in ("reward_mean", "pass_rate", "call_success"):
        series = store.metric_series(name)
        if series:
            ax.plot([s for s, _ in series], [v for _, v in series], marker="o", label=name)
    ax.set_xlabel("step")
    ax.set_ylim(-0.05, 1.05)
    ax.legend()
    ax.set_title("training reward")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_learning_curve(curve: list[dict[str, Any]], path: Path) -> Path | None:
    """Held-out pass rate (left axis) and turns per task (right) against rollouts trained on;
    None without matplotlib or with fewer than two points."""
    if len(curve) < 2:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    x = [p["rollouts"] for p in curve]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(x, [p["pass_rate"] for p in curve], marker="o", color="tab:blue", label="pass rate")
    ax.set_xlabel("rollouts trained on")
    ax.set_ylabel("held-out pass rate")
    ax.set_ylim(-0.05, 1.05)
    turns = [(xi, p["turns_per_task"]) for xi, p in zip(x, curve, strict=True)]
    turns = [(xi, t) for xi, t in turns if t is not None]
    if turns:
        right = ax.twinx()
        right.plot(*zip(*turns, strict=True), marker="s", color="tab:orange", label="turns/task")
        right.set_ylabel("turns per task")
        fig.legend(loc="lower right")
    ax.set_title("held-out learning curve")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
