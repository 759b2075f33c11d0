import asyncio
import subprocess
import sys

import pytest

from cheetah.core.workspace import LocalWorkspace
from cheetah.harness.loop import (
    AgentError,
    AgentLimits,
    LocalTools,
    WithoutTools,
    run_agent,
    system_prompt,
)
from cheetah.harness.policy import Generation, PolicyError, ScriptedPolicy
from cheetah.harness.trajectory import Trajectory
from tests.conftest import FIX_SCRIPT


def _pytest(repo):
    return subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=repo, capture_output=True)


async def test_scripted_agent_fixes_the_planted_bug(sample_repo, monkeypatch):
    monkeypatch.setenv("PATH", f"{sys.prefix}/bin:" + __import__("os").environ["PATH"])
    assert _pytest(sample_repo).returncode != 0
    traj = await run_agent(
        "Fix the failing tests", ScriptedPolicy.from_file(FIX_SCRIPT), LocalWorkspace(sample_repo)
    )
    assert traj.stop_reason == "finished", traj.stop_detail
    assert _pytest(sample_repo).returncode == 0
    assert len(traj.turns) == 5 and len(traj.calls) == 10
    assert not any(c.is_error for c in traj.calls), [c.output for c in traj.calls if c.is_error]
    first_run = traj.turns[0].calls[2]
    assert first_run.name == "run_terminal" and "2 failed, 6 passed" in first_run.output
    assert traj.turns[3].calls[0].output.startswith("exit code: 0")
    assert traj.todos[-1] == {"text": "run the tests and the linter", "status": "done"}
    # The message list is what the model saw: system, query, then assistant/results pairs.
    roles = [m.role for m in traj.messages]
    assert roles == ["system", "user"] + ["assistant", "user"] * 4 + ["assistant"]
    assert traj.messages[3].content.startswith('<tool_result name="todo" index="1">')


async def test_trajectory_json_round_trip(sample_repo, tmp_path):
    traj = await run_agent(
        "Fix it", ScriptedPolicy.from_file(FIX_SCRIPT), LocalWorkspace(sample_repo)
    )
    path = traj.save(tmp_path / "out" / "t.json")
    again = Trajectory.load(path)
    assert again == traj
    assert again.summary()["tool_calls"] == 10


def _loop_forever():
    return ScriptedPolicy(['<tool name="list_dir"></tool>'] * 100)


async def test_turn_token_and_wall_limits(ws):
    t = await run_agent("q", _loop_forever(), ws, AgentLimits(max_turns=3))
    assert (t.stop_reason, t.stop_detail, len(t.turns)) == ("limit", "turn limit of 3 reached", 3)
    t = await run_agent("q", _loop_forever(), ws, AgentLimits(max_tokens=20))
    assert t.stop_reason == "limit" and "token limit of 20" in t.stop_detail
    assert t.completion_tokens >= 20

    class Slow:
        name = "slow"

        async def generate(self, messages):
            await asyncio.sleep(600)  # only the wall limit can end it, however busy the host

    t = await run_agent("q", Slow(), ws, AgentLimits(max_wall_s=0.3))
    # far below the 600 s the policy would take, far above a busy machine's stop
    assert t.stop_reason == "limit" and "wall time limit" in t.stop_detail and t.wall_s < 60


async def test_slow_tools_hit_the_wall_limit(ws):
    # The limit must fire while the tools run: 2 s leave a busy machine time to reach them
    # (the scripted turn), and only the limit can end the 600 s sleep.
    policy = ScriptedPolicy(['<tool name="run_terminal"><command>sleep 600</command></tool>'])
    t = await run_agent("q", policy, ws, AgentLimits(max_wall_s=2))
    assert t.stop_reason == "limit" and "while running tools" in t.stop_detail


async def test_policy_failure_propagates_with_the_turns_so_far(ws):
    with pytest.raises(AgentError, match="no message left") as info:
        await run_agent("q", ScriptedPolicy(['<tool name="list_dir"></tool>']), ws)
    t = info.value.trajectory
    assert isinstance(info.value.__cause__, PolicyError)
    assert t.stop_reason == "error" and "no message left" in t.stop_detail
    assert len(t.turns) == 1 and t.turns[0].calls[0].name == "list_dir"


async def test_a_broken_tool_runner_propagates_instead_of_becoming_a_trajectory(ws):
    class LostSession:
        def specs(self):
            return []

        async def run_tools(self, calls):
            raise ConnectionError("env server went away")

    policy = ScriptedPolicy(['<tool name="list_dir"></tool>', "done"])
    with pytest.raises(AgentError, match="env server went away") as info:
        await run_agent("q", policy, LostSession())
    assert info.value.trajectory.stop_reason == "error" and len(info.value.trajectory.turns) == 1


async def test_malformed_calls_are_errors_the_model_sees(ws):
    policy = ScriptedPolicy(
        ['<tool name="read_file"><path>x</tool>', '<tool name="zap"></tool>', "ok"]
    )
    t = await run_agent("q", policy, ws)
    assert t.stop_reason == "finished"
    assert t.turns[0].calls[0].is_error and "never closed" in t.turns[0].calls[0].output
    assert 'status="error"' in t.messages[3].content
    assert "unknown tool 'zap'" in t.messages[5].content


async def test_token_ids_and_logprobs_are_recorded(ws):
    class WithTokens:
        name = "engine"

        async def generate(self, messages):
            return Generation(
                text="done",
                completion_tokens=2,
                token_ids=[5, 6],
                logprobs=[-0.1, -0.2],
                prompt_token_ids=[1, 2, 3],
                policy_version=7,
            )

    t = await run_agent("q", WithTokens(), ws)
    turn = t.turns[0]
    assert (turn.token_ids, turn.logprobs, turn.prompt_token_ids, turn.policy_version) == (
        [5, 6],
        [-0.1, -0.2],
        [1, 2, 3],
        7,
    )
    assert t.messages[-1].token_ids == [5, 6]


async def test_a_tool_taken_away_is_unlisted_and_unknown_while_the_rest_run(ws):
    (ws.root / "a.py").write_text("x = 1\n")
    runner = WithoutTools(LocalTools(ws), ["codebase_search"])
    prompt = system_prompt(runner.specs())
    assert "## codebase_search" not in prompt and "## grep" in prompt
    policy = ScriptedPolicy(
        [
            '<tool name="codebase_search"><query>x</query></tool>\n'
            '<tool name="grep"><pattern>x = 1</pattern></tool>',
            "done",
        ]
    )
    t = await run_agent("q", policy, runner)
    hidden, grep = t.turns[0].calls
    assert hidden.is_error and "unknown tool 'codebase_search'" in hidden.output
    assert "the tools are: read_file" in hidden.output and "codebase_search," not in hidden.output
    assert not grep.is_error and "a.py:1: x = 1" in grep.output
    assert [c.index for c in t.turns[0].calls] == [1, 2]  # results keep the calls' order


def test_system_prompt_lists_every_tool(ws):
    prompt = system_prompt(LocalTools(ws).specs())
    for name in ("read_file", "list_dir", "grep", "edit_file", "run_terminal", "lint", "todo"):
        assert f"## {name}" in prompt


async def test_a_conversation_past_the_context_window_is_a_limit_not_an_error(ws):
    from cheetah.harness.policy import ContextExhausted

    class Full:
        name = "full"

        def __init__(self):
            self.turns = 0

        async def generate(self, messages):
            self.turns += 1
            if self.turns > 1:
                raise ContextExhausted("the prompt has 2317 tokens; leaving no room to generate")
            return Generation(text='<tool name="list_dir"></tool>', completion_tokens=5)

    t = await run_agent("q", Full(), ws)
    assert t.stop_reason == "limit" and "context window full" in t.stop_detail
    assert len(t.turns) == 1


class _Cut:
    """Replies that the token cap cut (finish reason "length"), then a finished one."""

    name = "cut"

    def __init__(self, texts, cap=8, tokens=8):
        self.texts, self.cap, self.tokens = list(texts), cap, tokens

    async def generate(self, messages):
        text = self.texts.pop(0)
        cut = bool(self.texts) or text != "done"
        return Generation(
            text=text,
            completion_tokens=self.tokens if cut else 1,
            finish_reason="length" if cut else "stop",
            max_new_tokens=self.cap,
        )


async def test_a_reply_cut_at_the_token_cap_is_a_limit_not_an_answer(ws):
    t = await run_agent("q", _Cut(["I will now look at the fi"], cap=8), ws)
    assert (t.stop_reason, len(t.turns)) == ("limit", 1)
    assert "max_new_tokens=8" in t.stop_detail and "before the model finished" in t.stop_detail
    assert t.turns[0].finish_reason == "length"
    # without the cap known, the detail still names the token cap
    t = await run_agent("q", _Cut(["rambling"], cap=None), ws)
    assert t.stop_reason == "limit" and "the token cap" in t.stop_detail
    # cut before the cap: the engine's context window ended it
    t = await run_agent("q", _Cut(["rambling"], cap=2048, tokens=30), ws)
    assert t.stop_reason == "limit" and t.stop_detail.startswith("context window full")


async def test_a_cut_reply_with_calls_runs_them_and_tells_the_model_why_the_last_broke(ws):
    (ws.root / "a.py").write_text("x = 1\n")
    cut = '<tool name="list_dir"></tool><tool name="read_file"><path>a.p'
    t = await run_agent("q", _Cut([cut, "done"], cap=16), ws)
    assert t.stop_reason == "finished" and len(t.turns) == 2
    listed, broken = t.turns[0].calls
    assert not listed.is_error and "a.py" in listed.output
    assert broken.is_error and "cut off at max_new_tokens=16" in broken.output


async def test_each_stop_reason_has_its_detail(ws):
    """finished, limit (turns, tokens, wall, context, cap) and error, side by side."""
    from cheetah.harness.policy import ContextExhausted

    class Full:
        name = "full"

        async def generate(self, messages):
            raise ContextExhausted("the prompt has 9000 tokens")

    finished = await run_agent("q", ScriptedPolicy(["done"]), ws)
    turns = await run_agent("q", _loop_forever(), ws, AgentLimits(max_turns=1))
    tokens = await run_agent("q", _loop_forever(), ws, AgentLimits(max_tokens=1))
    context = await run_agent("q", Full(), ws)
    capped = await run_agent("q", _Cut(["..."], cap=4, tokens=4), ws)
    with pytest.raises(AgentError) as err:
        await run_agent("q", ScriptedPolicy([]), ws)
    got = {
        "finished": finished,
        "turns": turns,
        "tokens": tokens,
        "context": context,
        "cap": capped,
        "error": err.value.trajectory,
    }
    assert {k: v.stop_reason for k, v in got.items()} == {
        "finished": "finished",
        "turns": "limit",
        "tokens": "limit",
        "context": "limit",
        "cap": "limit",
        "error": "error",
    }
    assert "turn limit of 1" in turns.stop_detail and "token limit of 1" in tokens.stop_detail
    assert "context window full" in context.stop_detail
    assert "max_new_tokens=4" in capped.stop_detail and "no message left" in err.value.args[0]
