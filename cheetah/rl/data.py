"""From trajectories to training samples: token ids exactly as the engine produced them.

A sample is the whole conversation tokenized with the model's chat template
(``cheetah.model.chat.tokenize_chat``): assistant messages enter as the engine's own
token ids (never re-tokenized) with loss mask 1, everything else (system prompt,
query, tool results, template headers) with mask 0. The behaviour logprobs of the
masked-in tokens are the engine's, turn by turn, so they line up one to one; a
trajectory whose turns lack token ids or logprobs cannot be used for RL and is
refused with the reason. Samples longer than ``max_len`` are cut at the end (their
later tokens are not trained on); the sample counts what was cut (``dropped_tokens``,
``dropped_trained``) so that no truncation goes unreported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from cheetah.harness.trajectory import Trajectory
from cheetah.model.chat import tokenize_chat


class SampleError(ValueError):
    """A trajectory cannot become a training sample (no engine token ids, misaligned)."""


@dataclass
class Sample:
    input_ids: list[int]
    loss_mask: list[int]
    behaviour_logprobs: list[float]  # one per input id; 0.0 where the mask is 0
    advantage: float = 0.0
    rollout_id: int | None = None
    versions: list[int] = field(default_factory=list)
    dropped_tokens: int = 0  # cut by max_len
    dropped_trained: int = 0  # of those, tokens the loss would have trained on

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


def sample_from_trajectory(
    traj: Trajectory,
    tokenizer: Any,
    *,
    advantage: float = 0.0,
    max_len: int = 4096,
    need_logprobs: bool = True,
    rollout_id: int | None = None,
) -> Sample:
    assistant = [m for m in traj.messages if m.role == "assistant"]
    if need_logprobs and any(m.token_ids is None for m in assistant):
        raise SampleError(f"trajectory {traj.id}: an assistant turn has no engine token ids")
    chat = tokenize_chat(traj.messages, tokenizer)
    behaviour: list[float] = [0.0] * len(chat.token_ids)
    if need_logprobs:
        lps = [lp for t in traj.turns for lp in (t.logprobs or [])]
        positions = [i for i, m in enumerate(chat.loss_mask) if m]
        if len(lps) != len(positions):
            raise SampleError(
                f"trajectory {traj.id}: {len(positions)} assistant tokens but {len(lps)} "
                "behaviour logprobs"
            )
        for pos, lp in zip(positions, lps, strict=True):
            behaviour[pos] = lp
    n = min(len(chat.token_ids), max_len)
    return Sample(
        input_ids=chat.token_ids[:n],
        loss_mask=chat.loss_mask[:n],
        behaviour_logprobs=behaviour[:n],
        advantage=advantage,
        rollout_id=rollout_id,
        versions=[t.policy_version or 0 for t in traj.turns],
        dropped_tokens=len(chat.token_ids) - n,
        dropped_trained=sum(chat.loss_mask[n:]),
    )


def untrain_turns(sample: Sample, turns: frozenset[int]) -> Sample:
    """``sample`` with the loss mask of its assistant messages ``turns`` (0-based) set to 0:
    each assistant message is one run of 1s in the mask (``tokenize_chat``)."""
    if not turns:
        return sample
    mask, run, inside = list(sample.loss_mask), -1, False
    for i, m in enumerate(mask):
        if m and not inside:
            run += 1
        inside = bool(m)
        if m and run in turns:
            mask[i] = 0
    sample.loss_mask = mask
    return sample


def ended_by_cut_reply(traj: Trajectory) -> bool:
    """The rollout ended because ``max_new_tokens`` cut its last reply before any tool call
    (stop reason ``limit``: such a reply is not an answer; ``harness/loop.py``)."""
    last = traj.turns[-1] if traj.turns else None
    return (
        traj.stop_reason == "limit"
        and last is not None
        and last.finish_reason == "length"
        and not last.calls
    )


def truncation_metrics(samples: list[Sample], trajs: list[Trajectory]) -> dict[str, float]:
    """What limits cut, per step: turns ended by ``max_new_tokens`` (finish reason
    "length"), rollouts a limit stopped (of them, those whose last reply the cap cut),
    samples cut by ``max_seq_len``, and the tokens (trained ones) lost. Counts only: the
    reward of a rollout is its grade whatever stopped it (``rl/reward.py``)."""
    turns = [t for tr in trajs for t in tr.turns]
    return {
        "turns_cut_by_max_new_tokens": sum(t.finish_reason == "length" for t in turns),
        "turn_cut_share": (
            sum(t.finish_reason == "length" for t in turns) / len(turns) if turns else 0.0
        ),
        "rollouts_stopped_by_limit": sum(t.stop_reason == "limit" for t in trajs),
        "rollouts_ended_by_max_new_tokens": sum(map(ended_by_cut_reply, trajs)),
        "samples_cut_by_max_seq_len": sum(s.dropped_tokens > 0 for s in samples),
        "tokens_dropped_by_max_seq_len": sum(s.dropped_tokens for s in samples),
        "trained_tokens_dropped": sum(s.dropped_trained for s in samples),
    }
