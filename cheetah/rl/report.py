"""What a training run reports besides the held-out stages: per-step behaviour metrics of the
rollouts, and the reward-curve plot (``reward.png``). ``rl/stages.py`` has the stage summary.
Left out: plots of the behaviour metrics (the dashboard draws every stored series).
"""

from __future__ import annotations

import statistics
from pathlib import Path

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
