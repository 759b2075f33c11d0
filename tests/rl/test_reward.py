"""Reward shaping (pure): task reward plus the weighted share of calls that ran cleanly."""

import pytest

from cheetah.harness.trajectory import CallRecord, Trajectory, Turn
from cheetah.rl.reward import call_success_rate, shaped_reward


def traj(*errors: list[bool]) -> Trajectory:
    turns = [
        Turn(
            index=i,
            assistant="",
            calls=[
                CallRecord(index=j + 1, name="read_file", args={}, output="", is_error=e)
                for j, e in enumerate(errs)
            ],
        )
        for i, errs in enumerate(errors)
    ]
    return Trajectory(query="q", policy="p", turns=turns)


def test_call_success_rate_by_hand():
    assert call_success_rate(traj([True, False], [False, False])) == pytest.approx(3 / 4)
    assert call_success_rate(traj([], [])) == 0.0  # no call at all earns nothing
    assert call_success_rate(traj([True])) == 0.0


def test_shaped_reward_adds_the_weighted_rate_only_when_asked():
    t = traj([False, True])
    assert shaped_reward(0.8, t, 0.0) == 0.8
    assert shaped_reward(0.0, t, 0.2) == pytest.approx(0.1)
    assert shaped_reward(1.0, t, 0.2) == pytest.approx(1.1)


def test_turn_cost_rewards_solving_in_fewer_turns():
    three = traj([False], [False], [False])
    one = traj([False, False, False])  # the same calls in one message
    assert shaped_reward(1.0, three, 0.0, turn_cost=0.05) == pytest.approx(0.85)
    assert shaped_reward(1.0, one, 0.0, turn_cost=0.05) == pytest.approx(0.95)
    # a failure pays nothing for its turns: quitting early must not beat trying
    assert shaped_reward(0.0, three, 0.0, turn_cost=0.05) == 0.0
    assert shaped_reward(0.0, one, 0.2, turn_cost=0.05) == pytest.approx(0.2)


def test_claim_cost_charges_a_claimed_change_the_workspace_does_not_show():
    refused = traj([True])
    refused.turns.append(Turn(index=1, assistant="I changed `a` to `b` in m.py."))
    honest = traj([True])
    honest.turns.append(Turn(index=1, assistant="The edit was not applied."))
    assert shaped_reward(0.0, refused, 0.0, claim_cost=0.5, diff="") == -0.5
    assert shaped_reward(0.0, honest, 0.0, claim_cost=0.5, diff="") == 0.0
    assert shaped_reward(0.0, refused, 0.0, claim_cost=0.0, diff="") == 0.0  # off by default
    # a claim beside a change is not charged, whatever the grader thought of the change
    assert shaped_reward(0.0, refused, 0.0, claim_cost=0.5, diff="+b\n") == 0.0
