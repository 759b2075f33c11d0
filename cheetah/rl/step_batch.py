"""One RL step's batch: complete groups of finished rollouts -> trainer samples + metrics.

Group-relative advantages over the rollouts' rewards (``loss.group_advantages``), each
trajectory parsed once and turned into a sample of the engine's own token ids and
logprobs (``data.sample_from_trajectory``; one too long or without trainable tokens is
skipped and counted), and the step's reward (shaped, and the grader's apart), pass-rate,
behaviour and truncation metrics.
Pure: no trainer, no store.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch

from cheetah.harness.trajectory import Trajectory
from cheetah.rl.curves import behaviour_metrics
from cheetah.rl.data import Sample, SampleError, sample_from_trajectory, truncation_metrics
from cheetah.rl.loss import group_advantages
from cheetah.rl.scheduler import Group


@dataclass
class StepBatch:
    samples: list[Sample]
    rollout_ids: list[int]
    metrics: dict[str, float]

    @property
    def has_signal(self) -> bool:
        """Whether any sample has a non-zero advantage (else a step would change nothing)."""
        return any(s.advantage != 0 for s in self.samples)


def _task_reward(traj: Trajectory) -> float:
    """The grader's reward, before shaping (``rl/reward.py``)."""
    return float((traj.grade or {}).get("reward", 0.0))


def build_step_batch(
    batch: list[Group], tokenizer: Any, max_len: int, resampled: int = 0
) -> StepBatch:
    rewards, gids, ids, trajs = [], [], [], []
    for g in batch:
        for f in g.rollouts:
            rewards.append(f.reward)
            gids.append(g.group_id)
            ids.append(f.spec.rollout_id)
            if f.trajectory is None:  # errors never reach a batch (their groups are dropped)
                raise ValueError(f"rollout {f.spec.rollout_id} has no trajectory")
            trajs.append(Trajectory.model_validate_json(f.trajectory))
    adv = group_advantages(torch.tensor(rewards), torch.tensor(gids))
    samples, skipped = [], 0
    for a, traj, rid in zip(adv.tolist(), trajs, ids, strict=True):
        try:
            samples.append(
                sample_from_trajectory(
                    traj, tokenizer, advantage=a, rollout_id=rid, max_len=max_len
                )
            )
        except SampleError:
            skipped += 1
    metrics: dict[str, float] = {
        "reward_mean": statistics.fmean(rewards),  # shaped: what the advantages come from
        "task_reward_mean": statistics.fmean(_task_reward(t) for t in trajs),  # the grader's
        "pass_rate": statistics.fmean(t.solved for t in trajs),
        # rollouts whose change reached for the test runner (graded 0; tasks/change.py)
        "grade_flagged": sum(bool((t.grade or {}).get("flags")) for t in trajs),
        "samples_skipped": skipped,
        "groups_resampled": resampled,
    }
    metrics.update(behaviour_metrics(trajs))
    metrics.update(truncation_metrics(samples, trajs))
    return StepBatch(samples, ids, metrics)
