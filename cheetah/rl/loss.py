"""GRPO-style objective as pure functions over typed inputs.

- ``group_advantages``: reward minus its group's mean, divided by the group's std
  (``scale="std"``, GRPO) or not (``scale="none"``, as Dr. GRPO argues, which keeps
  easy and hard groups on one scale). A group whose rewards are all equal gives 0.
- ``policy_loss``: token-level clipped policy gradient. The ratio is taken against
  the *proximal* logprobs when given (the trainer's own logprobs before this update,
  decoupled PPO), and the gap between proximal and *behaviour* logprobs (what the
  engine sampled with, possibly some versions stale and numerically different) is
  corrected with a truncated importance weight ``min(pi_prox / pi_behav, is_cap)``.
  Without proximal logprobs the ratio is against the behaviour logprobs (plain PPO).
  ``rl/trainer.py`` passes as proximal the trainer's logprobs from before the batch's first
  update: on that first update (and so with ``train.updates_per_batch = 1``) the ratio is
  exactly 1 and the step is a token-level policy gradient times the truncated importance
  weight; on later updates of the same batch the clip bounds the ratio.
  Tokens are averaged over all unmasked tokens of the batch (token-level mean), so
  long rollouts weigh by their tokens, not by one sample each.
- an optional KL penalty to a *reference* policy (``kl_coef`` > 0; the trainer's
  reference is the policy RL started from, the SFT checkpoint in a run with a warm start):
  per sampled token the k3 estimate ``exp(ref - lp) - (ref - lp) - 1`` (>= 0, unbiased for
  KL(policy || reference) on the policy's own samples), token-averaged like the policy
  term and added times ``kl_coef``. The truncated importance weight, the staleness bound and
  the clip keep each *update* near the policy that sampled; they do not stop many small
  updates from walking away from what SFT taught (the tool-call format first: ten steps of
  four updates lost 8 tasks, BENCHMARKS.md); the penalty holds the policy to it, and most
  strongly against lowering a token's probability (k3's gradient grows as exp(ref - lp)).
- metrics: clip fraction, trainer-versus-engine mismatch (KL estimate k3 and the max
  absolute logprob difference), importance weights, the KL to the reference, entropy.

Deliberately left out: value functions (group baselines replace them), a KL term on the
whole vocabulary (the sampled-token estimate needs no second set of logits kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from cheetah.rl.config import LossConfig

DEFAULT_LOSS = LossConfig()


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    scale: Literal["std", "none"] = "std",
    eps: float = 1e-6,
) -> torch.Tensor:
    """Per-sample advantage relative to the other samples of its group."""
    rewards = rewards.float()
    adv = torch.empty_like(rewards)
    for g in torch.unique(group_ids):
        idx = group_ids == g
        r = rewards[idx]
        centred = r - r.mean()
        if scale == "std":
            centred = centred / (r.std(unbiased=False) + eps)
        adv[idx] = centred
    return adv


@dataclass
class LossOutput:
    loss: torch.Tensor
    clip_fraction: float
    mismatch_kl: float
    mismatch_max_abs: float
    is_weight_mean: float
    tokens: int
    reference_kl: float = 0.0


def policy_loss(
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: LossConfig = DEFAULT_LOSS,
    proximal_logprobs: torch.Tensor | None = None,
    reference_logprobs: torch.Tensor | None = None,
) -> LossOutput:
    """Clipped PG loss over [batch, tokens] logprobs of the sampled tokens; ``mask`` is 1 on
    tokens the policy produced. ``advantages`` is per sample [batch] or per token. With
    ``reference_logprobs`` and ``cfg.kl_coef`` > 0 the KL penalty is added."""
    mask = mask.to(logprobs.dtype)
    n = mask.sum().clamp(min=1)
    adv = advantages[:, None].expand_as(logprobs) if advantages.dim() == 1 else advantages
    behaviour = behaviour_logprobs.detach()
    if proximal_logprobs is None:
        anchor, weight = behaviour, torch.ones_like(logprobs)
    else:
        anchor = proximal_logprobs.detach()
        weight = torch.exp(anchor - behaviour).clamp(max=cfg.is_cap)
    ratio = torch.exp(logprobs - anchor)
    clipped = ratio.clamp(1 - cfg.clip_low, 1 + cfg.clip_high)
    per_token = -torch.minimum(ratio * adv, clipped * adv) * weight
    loss = (per_token * mask).sum() / n
    ref_kl = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    if reference_logprobs is not None:
        log_ratio = reference_logprobs.detach() - logprobs
        ref_kl = ((torch.exp(log_ratio) - log_ratio - 1) * mask).sum() / n
        if cfg.kl_coef:
            loss = loss + cfg.kl_coef * ref_kl
    with torch.no_grad():
        was_clipped = ((ratio * adv) > (clipped * adv)).to(mask.dtype)
        diff = (logprobs.detach() - behaviour) * mask
        k3 = ((torch.exp(diff) - 1) - diff) * mask  # KL(behaviour || trainer) estimate, >= 0
        return LossOutput(
            loss=loss,
            clip_fraction=float((was_clipped * mask).sum() / n),
            mismatch_kl=float(k3.sum() / n),
            mismatch_max_abs=float(diff.abs().max()) if bool(mask.any()) else 0.0,
            is_weight_mean=float((weight * mask).sum() / n),
            tokens=int(mask.sum()),
            reference_kl=float(ref_kl.detach()),
        )


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean entropy of the next-token distribution over unmasked positions."""
    with torch.no_grad():
        logp = torch.log_softmax(logits.float(), dim=-1)
        ent = -(logp.exp() * logp).sum(-1)
        m = mask.to(ent.dtype)
        return float((ent * m).sum() / m.sum().clamp(min=1))


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Logprob of each ``tokens[:, t]`` under ``logits[:, t]`` (already shifted by the caller)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens[..., None]).squeeze(-1)
