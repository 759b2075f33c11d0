"""The RL reward of one rollout: the grader's task reward plus optional shaping. Pure functions.

The task reward (hidden checks, conventions) is what the benchmark measures. A small
model that has never solved a task gets equal rewards across a whole group, and
group-relative advantages are then zero: GRPO learns nothing. ``format_weight`` adds
a dense term for the one skill every solution needs first, tool calls that parse and
run: the share of the rollout's calls that came back without an error (0 when it made
no call). ``turn_cost`` subtracts a cost per assistant turn from a rollout that earned task
reward, so one that solves the task in fewer turns (several tool calls per message, as the
harness allows) earns more. A rollout without task reward pays nothing for its turns: a cost
there would rank a failure that gives up at once above one that kept trying, and teach the
policy to quit. ``claim_cost`` is charged to a rollout whose closing answer claims a change
the workspace does not show (``tasks/claims.py``): among failed rollouts, one that says
nothing false earns more than one that reports an edit its tools refused. Pass rates and
the benchmark never include any of these.

Deliberately left out: rewards for reading the right file or for partial test passes
(they leak task knowledge into the reward and invite gaming).
"""

from __future__ import annotations

from cheetah.harness.trajectory import Trajectory
from cheetah.tasks.claims import false_claim


def call_success_rate(traj: Trajectory) -> float:
    """Share of the rollout's tool calls that ran without error (0.0 with no calls)."""
    calls = traj.calls
    return sum(not c.is_error for c in calls) / len(calls) if calls else 0.0


def shaped_reward(
    task_reward: float,
    traj: Trajectory,
    format_weight: float,
    turn_cost: float = 0.0,
    claim_cost: float = 0.0,
    diff: str | None = None,
) -> float:
    """``task_reward + format_weight * call_success_rate - turn_cost * turns``, the turn cost
    only where ``task_reward > 0``, minus ``claim_cost`` for a false claim of a change
    (``diff``: the workspace's, when known; else the trajectory's grade or edits)."""
    reward = task_reward
    if claim_cost and false_claim(traj, diff):
        reward -= claim_cost
    if format_weight:
        reward += format_weight * call_success_rate(traj)
    if turn_cost and task_reward > 0:
        reward -= turn_cost * len(traj.turns)
    return reward
