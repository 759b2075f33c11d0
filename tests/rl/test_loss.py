"""The loss against values worked out by hand."""

import math

import pytest
import torch

from cheetah.rl.loss import (
    LossConfig,
    entropy_from_logits,
    group_advantages,
    policy_loss,
    token_logprobs,
)


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5])
    groups = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = group_advantages(rewards, groups)
    # group 0: mean 0.5, population std 0.5 -> +-1; group 1: all equal -> 0
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, -1.0, 1.0, 0.0, 0.0]), atol=1e-4)
    adv = group_advantages(rewards, groups, scale="none")
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, -0.5, 0.5, 0.0, 0.0]))


def test_on_policy_loss_is_minus_mean_advantage_and_gradient_is_advantage():
    lp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    out = policy_loss(lp, lp.detach().clone(), torch.tensor([2.0]), torch.tensor([[1, 1, 0]]))
    assert out.loss.item() == pytest.approx(-2.0)  # ratio 1 on 2 tokens: -(2 + 2) / 2
    out.loss.backward()
    assert lp.grad.tolist() == [[-1.0, -1.0, 0.0]]  # d/dlp of -A*exp(lp-b)/n = -A/n
    assert out.clip_fraction == 0 and out.mismatch_kl == 0 and out.tokens == 2


def test_clipping_by_hand():
    behaviour = torch.zeros(1, 2)
    lp = torch.tensor([[math.log(1.5), math.log(0.5)]])
    cfg = LossConfig(clip_low=0.2, clip_high=0.28)
    # positive advantage: token 1 ratio 1.5 clipped to 1.28; token 2 ratio 0.5 stays (min)
    out = policy_loss(lp, behaviour, torch.tensor([1.0]), torch.ones(1, 2), cfg)
    assert out.loss.item() == pytest.approx(-(1.28 + 0.5) / 2)
    assert out.clip_fraction == pytest.approx(0.5)
    # negative advantage: token 1 ratio 1.5 kept (min of -1.5, -1.28), token 2 clipped to 0.8
    out = policy_loss(lp, behaviour, torch.tensor([-1.0]), torch.ones(1, 2), cfg)
    assert out.loss.item() == pytest.approx((1.5 + 0.8) / 2)
    assert out.clip_fraction == pytest.approx(0.5)


def test_truncated_importance_weight_and_mismatch_metrics():
    behaviour = torch.tensor([[math.log(0.25), math.log(0.5)]])
    proximal = torch.tensor([[math.log(0.75), math.log(0.5)]])  # weights 3 (capped 2) and 1
    lp = proximal.clone()
    out = policy_loss(
        lp,
        behaviour,
        torch.tensor([1.0]),
        torch.ones(1, 2),
        LossConfig(is_cap=2.0),
        proximal_logprobs=proximal,
    )
    assert out.loss.item() == pytest.approx(-(2.0 + 1.0) / 2)
    assert out.is_weight_mean == pytest.approx(1.5)
    d = math.log(3)
    assert out.mismatch_max_abs == pytest.approx(d)
    assert out.mismatch_kl == pytest.approx(((3 - 1) - d) / 2)


def test_kl_penalty_to_the_reference_by_hand():
    lp = torch.tensor([[math.log(0.5), math.log(0.25)]], requires_grad=True)
    reference = torch.tensor([[math.log(0.5), math.log(0.5)]])  # token 2: ref/policy = 2
    adv, mask = torch.tensor([0.0]), torch.ones(1, 2)  # no policy gradient: the penalty alone
    out = policy_loss(lp, lp.detach(), adv, mask, LossConfig(kl_coef=0.1),
                      reference_logprobs=reference)  # fmt: skip
    k3 = (2 - math.log(2) - 1) / 2  # token 1 contributes 0
    assert out.reference_kl == pytest.approx(k3)
    assert out.loss.item() == pytest.approx(0.1 * k3)
    out.loss.backward()
    # d/dlp of exp(r - lp) - (r - lp) - 1 is 1 - exp(r - lp): the penalty raises the token
    # whose probability fell below the reference's, and leaves the equal one alone
    assert lp.grad[0, 0].item() == pytest.approx(0.0)
    assert lp.grad[0, 1].item() == pytest.approx(0.1 * (1 - 2) / 2)
    # without kl_coef the estimate is still reported, the loss is the policy term's
    off = policy_loss(lp, lp.detach(), adv, mask, reference_logprobs=reference)
    assert off.reference_kl == pytest.approx(k3) and off.loss.item() == pytest.approx(0.0)


def test_entropy_and_token_logprobs():
    logits = torch.zeros(1, 2, 4)  # uniform over 4 tokens
    assert entropy_from_logits(logits, torch.ones(1, 2)) == pytest.approx(math.log(4))
    lp = token_logprobs(logits, torch.tensor([[1, 3]]))
    assert torch.allclose(lp, torch.full((1, 2), -math.log(4)))
