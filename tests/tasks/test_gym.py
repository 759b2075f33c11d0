"""The Gymnasium-style session API: reset/step over the product's loop and grader."""

from __future__ import annotations

import pytest

from cheetah.harness.loop import AgentLimits
from cheetah.tasks.gym import SyncTaskEnv, TaskEnv
from cheetah.tasks.session import local_sessions
from tests.sandbox.conftest import needs_isolation

FIX = (
    'Fixing the operator and reading the test together.\n<tool name="edit_file">'
    "<path>calc/ops.py</path><old_str>return a - b</old_str><new_str>return a + b</new_str>"
    '</tool>\n<tool name="read_file"><path>tests/test_ops.py</path></tool>'
)


@pytest.mark.parametrize("backend", ["local", pytest.param("isolated", marks=needs_isolation)])
async def test_an_episode_is_reset_stepped_and_graded(calc_task, backend):
    sessions = local_sessions(backend)
    env = TaskEnv(sessions)
    obs, info = await env.reset(calc_task)
    assert [m["role"] for m in obs.new] == ["system", "user"] and info["task_id"] == "calc-add"
    assert obs.new[1]["content"] == calc_task.query and "edit_file" in obs.new[0]["content"]
    obs, reward, terminated, truncated, _ = await env.step(FIX)
    assert (reward, terminated, truncated) == (0.0, False, False)
    [results] = obs.new  # both calls' results, in one user message
    assert results["role"] == "user" and "def test_add" in results["content"]
    assert len(obs.messages) == 4
    obs, reward, terminated, truncated, info = await env.step("Fixed: add() adds again.")
    assert terminated and not truncated and reward == pytest.approx(1.0)
    assert info["grade"].correct and info["turns"] == 2 and info["stop_reason"] == "finished"
    assert obs.new == [] and obs.messages[-1]["content"] == "Fixed: add() adds again."
    assert not sessions.env.sessions  # the session is closed once graded
    with pytest.raises(RuntimeError, match="before reset"):
        await env.step("again")


async def test_a_limit_truncates_and_the_episode_is_still_graded(calc_task):
    env = TaskEnv(local_sessions("local"), AgentLimits(max_turns=1))
    await env.reset(calc_task)
    _, reward, terminated, truncated, info = await env.step(
        '<tool name="read_file"><path>calc/ops.py</path></tool>'
    )
    assert truncated and not terminated and reward == 0.0
    assert info["stop_reason"] == "limit" and not info["grade"].correct


async def test_a_message_the_callers_cap_cut_truncates_instead_of_finishing(calc_task):
    env = TaskEnv(local_sessions("local"))
    await env.reset(calc_task)
    _, reward, terminated, truncated, info = await env.step(
        "I will start by reading calc/ops.py and th", finish_reason="length"
    )
    assert truncated and not terminated and reward == 0.0
    assert info["stop_reason"] == "limit" and "the token cap" in info["stop_detail"]


async def test_reset_closes_an_open_episode_and_bad_calls_are_observations(calc_task):
    sessions = local_sessions("local")
    env = TaskEnv(sessions)
    await env.reset(calc_task)
    obs, *_ = await env.step('<tool name="no_such_tool"><x>1</x></tool>')
    assert "no_such_tool" in obs.new[0]["content"]  # an error the model reads, not a crash
    await env.reset(calc_task)  # the first episode's session is closed, ungraded
    assert len(sessions.env.sessions) == 1
    await env.close()
    assert not sessions.env.sessions


def test_the_blocking_wrapper_runs_the_same_episode(calc_task):
    env = SyncTaskEnv(lambda: local_sessions("local"))
    try:
        env.reset(calc_task)
        env.step(FIX)
        _, reward, terminated, _, _ = env.step("Done.")
        assert terminated and reward == pytest.approx(1.0)
    finally:
        env.close()
