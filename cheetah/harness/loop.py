"""The agent loop: prompt -> policy -> parse calls -> run them concurrently -> results -> ...

``run_agent`` is the one loop the product, evaluation and training all use. What the
model did wrong goes back to it as an observation: a tool's error, a malformed call,
an unknown tool are error results it reads next turn. The loop ends normally for a
typed reason (``AgentStop``): ``finished`` (a message with no tool calls that the model
ended itself) or ``limit`` (turns, completion tokens, wall time, a conversation past the
model's context window: ``ContextExhausted``, or a reply without tool calls cut at the
token cap: finish reason "length", the detail naming the cap). A cut reply is never an
answer: it has no calls because the cap fell before them. A cut reply *with* calls runs its
complete calls; the call the cap cut off is a malformed call whose error says so, and the
loop goes on (the model can write shorter messages). Anything else is not the model's doing (the
policy's server is down, the env server lost the session, a bug): it propagates as
``AgentError``, which carries the trajectory so far (stop reason ``error``) so the caller
can keep it, while nothing grades or trains on it as if the model had failed.

Tools run through a ``ToolRunner``: ``LocalTools`` over a ``Workspace`` in this
process, or a remote session (env server) that speaks the same protocol.

A viewer follows a run through ``LoopEvents`` (``harness/display.py``): with one, a
``StreamingPolicy`` streams its reply and the turn records the time to its first piece of
text (``Turn.first_token_s``). Without one (eval, RL) nothing streams.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from cheetah.core.wire import ToolCall, ToolResult, ToolSpec
from cheetah.core.workspace import Workspace
from cheetah.harness.policy import ContextExhausted, Generation, Policy, StreamingPolicy
from cheetah.harness.protocol import parse_message, render_results, render_tool_specs
from cheetah.harness.trajectory import CallRecord, Message, Trajectory, Turn
from cheetah.tools import default_tools
from cheetah.tools.base import CodeSearch, Limits, Tool, ToolContext
from cheetah.tools.batch import DEFAULT_CALL_TIMEOUT_S, run_batch, unknown_tool

SYSTEM_INTRO = """\
You are a coding agent working in a software repository. Explore before you edit: read and \
search the code, make small exact edits, and run the tests to check your work. Paths are \
relative to the repository root."""


class AgentLimits(BaseModel):
    """When the loop stops even if the model has not finished; defaulted here once (the CLI
    flags of ``cheetah agent`` and ``cheetah eval`` are derived from these fields)."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int = Field(30, ge=1, description="stop after this many turns")
    max_tokens: int = Field(
        32_000, ge=1, description="stop once the model has written this many tokens in all"
    )
    max_wall_s: float = Field(600.0, gt=0, description="stop after this many seconds")
    call_timeout_s: float = Field(
        DEFAULT_CALL_TIMEOUT_S, gt=0, description="limit for one tool call, in seconds"
    )


@runtime_checkable
class ToolRunner(Protocol):
    """Runs the calls of one message somewhere: locally, in a sandbox, or on an env server."""

    def specs(self) -> list[ToolSpec]: ...

    async def run_tools(self, calls: list[ToolCall]) -> list[ToolResult]: ...


class LocalTools:
    """Tools over a workspace in this process."""

    def __init__(
        self,
        workspace: Workspace,
        tools: dict[str, Tool] | None = None,
        limits: Limits | None = None,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        code_search: CodeSearch | None = None,
    ) -> None:
        self.tools = tools if tools is not None else default_tools()
        self.ctx = ToolContext(
            workspace=workspace, limits=limits or Limits(), code_search=code_search
        )
        self.call_timeout_s = call_timeout_s

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self.tools.values()]

    async def run_tools(self, calls: list[ToolCall]) -> list[ToolResult]:
        return await run_batch(calls, self.ctx, self.tools, call_timeout_s=self.call_timeout_s)


class WithoutTools:
    """A ``ToolRunner`` with some tools taken away (an ablation: the same agent without,
    say, ``codebase_search``). The system prompt no longer lists them, and a call to one gets
    the error any unknown tool gets; the other calls of the message run as usual."""

    def __init__(self, runner: ToolRunner, names: Iterable[str]) -> None:
        self.runner, self.hidden = runner, frozenset(names)

    def specs(self) -> list[ToolSpec]:
        return [s for s in self.runner.specs() if s.name not in self.hidden]

    async def run_tools(self, calls: list[ToolCall]) -> list[ToolResult]:
        shown = [c for c in calls if c.name not in self.hidden]
        ran = {r.index: r for r in (await self.runner.run_tools(shown) if shown else [])}
        known = [s.name for s in self.specs()]
        return [
            ran.get(c.index)
            or ToolResult(c.index, c.name, f"Error: {unknown_tool(c, known)}", is_error=True)
            for c in calls
        ]


def system_prompt(specs: list[ToolSpec]) -> str:
    return f"{SYSTEM_INTRO}\n\n{render_tool_specs(specs)}"


class AgentStop(Exception):
    """Ends the loop normally: the agent finished, or a limit was reached."""

    def __init__(self, reason: Literal["finished", "limit"], detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


class AgentError(RuntimeError):
    """The policy or the tool runner failed (the cause is ``__cause__``); ``trajectory`` holds
    the turns so far, with stop reason ``error``."""

    def __init__(self, trajectory: Trajectory) -> None:
        super().__init__(trajectory.stop_detail)
        self.trajectory = trajectory


class LoopEvents(Protocol):
    """What a viewer hears while the loop runs, in order, on the loop's task: a turn starts;
    its reply's text as it is written (in one piece from a policy that does not stream); the
    calls it made, as they start (not for a reply without calls); the turn, once its results
    are in (or the reply had no calls)."""

    def on_start(self, index: int) -> None: ...

    def on_text(self, text: str) -> None: ...

    def on_calls(self, turn: Turn, calls: list[ToolCall]) -> None: ...

    def on_turn(self, traj: Trajectory, turn: Turn) -> None: ...


async def run_agent(
    query: str,
    policy: Policy,
    workspace: Workspace | ToolRunner,
    limits: AgentLimits | None = None,
    *,
    events: LoopEvents | None = None,
    task_id: str | None = None,
    code_search: CodeSearch | None = None,
) -> Trajectory:
    """Run the agent on ``query`` until it finishes or hits a limit; return its trajectory.
    ``code_search`` backs ``codebase_search`` when the tools run here (a host workspace);
    a ``ToolRunner`` brings its own."""
    limits = limits or AgentLimits()
    runner = (
        workspace
        if isinstance(workspace, ToolRunner)
        else LocalTools(workspace, call_timeout_s=limits.call_timeout_s, code_search=code_search)
    )
    traj = Trajectory(
        query=query,
        policy=policy.name,
        task_id=task_id,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        messages=[
            Message(role="system", content=system_prompt(runner.specs())),
            Message(role="user", content=query),
        ],
    )
    t0 = time.monotonic()
    try:
        await _loop(traj, policy, runner, limits, t0, events)
    except AgentStop as stop:
        traj.stop_reason, traj.stop_detail = stop.reason, stop.detail
    except Exception as e:  # not the model's doing: the caller decides, the turns are kept
        traj.stop_reason, traj.stop_detail = "error", f"{type(e).__name__}: {e}"
        _close(traj, t0)
        raise AgentError(traj) from e
    _close(traj, t0)
    return traj


def _close(traj: Trajectory, t0: float) -> None:
    traj.wall_s = time.monotonic() - t0
    traj.todos = _last_todos(traj)


async def _loop(
    traj: Trajectory,
    policy: Policy,
    runner: ToolRunner,
    limits: AgentLimits,
    t0: float,
    events: LoopEvents | None,
) -> None:
    deadline = t0 + limits.max_wall_s

    async def bounded(awaitable, what: str):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AgentStop("limit", f"wall time limit of {limits.max_wall_s:g} s reached")
        try:
            return await asyncio.wait_for(awaitable, timeout=remaining)
        except TimeoutError:
            raise AgentStop(
                "limit", f"wall time limit of {limits.max_wall_s:g} s reached while {what}"
            ) from None

    while True:
        if len(traj.turns) >= limits.max_turns:
            raise AgentStop("limit", f"turn limit of {limits.max_turns} reached")
        if traj.completion_tokens >= limits.max_tokens:
            raise AgentStop("limit", f"token limit of {limits.max_tokens} reached")
        if events:
            events.on_start(len(traj.turns))
        g0, first = time.monotonic(), []
        try:
            gen = await bounded(_generate(policy, traj.messages, events, first), "generating")
        except ContextExhausted as e:  # the conversation outgrew the model: a limit, typed
            raise AgentStop("limit", f"context window full: {e}") from None
        turn = _turn(len(traj.turns), gen, time.monotonic() - g0)
        turn.first_token_s = first[0] - g0 if first else None
        traj.turns.append(turn)
        traj.messages.append(Message(role="assistant", content=gen.text, token_ids=gen.token_ids))
        calls = parse_message(gen.text)
        cut = gen.finish_reason == "length"
        if not calls:
            if events:
                events.on_turn(traj, turn)
            if cut:  # the cap fell before any call: the model did not finish, it was stopped
                raise AgentStop("limit", cut_detail(gen))
            raise AgentStop("finished", "the agent replied without tool calls")
        if cut and calls[-1].error:  # the call the cap cut off: say why it is malformed
            calls[-1].error += f" (the message was cut off at {_cap(gen)})"
        if events:
            events.on_calls(turn, calls)
        r0 = time.monotonic()
        results = await bounded(runner.run_tools(calls), "running tools")
        turn.tools_s = time.monotonic() - r0
        turn.calls = [_record(c, r) for c, r in zip(calls, results, strict=True)]
        traj.messages.append(Message(role="user", content=render_results(results)))
        if events:
            events.on_turn(traj, turn)


async def _generate(
    policy: Policy, messages: list[Message], events: LoopEvents | None, first: list[float]
) -> Generation:
    """The policy's reply; with a viewer, streamed to it (``first`` gets the time the first
    piece came), or given to it whole when the policy does not stream."""
    if events is None:
        return await policy.generate(list(messages))
    if not isinstance(policy, StreamingPolicy):
        gen = await policy.generate(list(messages))
        if gen.text:
            events.on_text(gen.text)
        return gen

    def on_text(text: str) -> None:
        if not first:
            first.append(time.monotonic())
        events.on_text(text)

    return await policy.generate_streaming(list(messages), on_text)


def _cap(gen: Generation) -> str:
    return "the token cap" if gen.max_new_tokens is None else f"max_new_tokens={gen.max_new_tokens}"


def cut_detail(gen: Generation) -> str:
    """The stop detail of a reply cut with finish reason "length": the cap that cut it, or
    the context window when the reply ended before the cap (an engine stops there too)."""
    n, cap = gen.completion_tokens, gen.max_new_tokens
    if cap is not None and n < cap:
        return f"context window full: the reply was cut after {n} tokens, before {_cap(gen)}"
    return f"reply cut at {_cap(gen)} before the model finished ({n} tokens)"


def _turn(index: int, gen: Generation, generate_s: float) -> Turn:
    return Turn(
        index=index,
        assistant=gen.text,
        prompt_token_ids=gen.prompt_token_ids,
        token_ids=gen.token_ids,
        logprobs=gen.logprobs,
        prompt_tokens=gen.prompt_tokens,
        completion_tokens=gen.completion_tokens,
        policy_version=gen.policy_version,
        finish_reason=gen.finish_reason,
        generate_s=generate_s,
    )


def _record(c: ToolCall, r: ToolResult) -> CallRecord:
    return CallRecord(
        index=c.index,
        name=c.name,
        args=c.args,
        output=r.output,
        is_error=r.is_error,
        started_s=r.started_s,
        wall_s=r.wall_s,
        meta={**r.meta, "malformed": True} if c.error else r.meta,
    )


def _last_todos(traj: Trajectory) -> list[dict[str, str]]:
    for call in reversed(traj.calls):
        if call.name == "todo" and "todos" in call.meta:
            return call.meta["todos"]
    return []
