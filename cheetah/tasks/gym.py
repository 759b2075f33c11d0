"""A Gymnasium-style session API over cheetah's tasks: for trainers that drive the model.

``TaskEnv.reset(task)`` opens the task's session and returns the first observation (the
system prompt with the tool list, and the task's query); ``step(assistant_message)`` runs the
message's tool calls and returns ``(observation, reward, terminated, truncated, info)``:

- a message with tool calls: the observation is the rendered results (the user message the
  agent reads next), reward 0, neither flag set;
- a message without tool calls (``terminated``) or a limit reached (``truncated``: turns,
  tokens, wall time, context, or a message without calls that the caller says its token cap
  cut, ``finish_reason="length"``): the episode is graded with the task's hidden checks, the
  reward is the grade's, ``info`` holds the grade, the stop reason and the trajectory, and the
  session is closed.

One implementation of the loop: ``run_agent`` itself runs in a background task with a policy
whose ``generate`` hands the conversation to the caller and waits for ``step``'s message, so
parsing, concurrent calls, limits, typed stops and grading are the product's and the
trainer's alike. Sessions come from any ``TaskSessionOpener`` (isolated here, or env servers
through the fleet). A failure that is not the model's doing (``AgentError``, the env lost)
is raised from ``step``, never graded. ``SyncTaskEnv`` is the same behind blocking calls (a
private event loop thread), for trainers that are not async.

Deliberately left out: reward shaping (a trainer adds its own: ``info`` has turns and
tool time), vectorised envs (run several ``TaskEnv`` at once), and the ``gymnasium.Env`` base
class itself (its spaces do not describe text; the method names and return shapes follow it).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from cheetah.harness.loop import AgentError, AgentLimits, run_agent
from cheetah.harness.policy import Generation, estimate_tokens
from cheetah.harness.trajectory import Message, Trajectory
from cheetah.tasks.grader import GraderConfig, attach, capture_baseline, grade
from cheetah.tasks.schema import Task
from cheetah.tasks.session import TaskSession, TaskSessionOpener, open_task


@dataclass
class Observation:
    """What the model sees next: ``new``, the messages since its own last one (the system
    prompt and query after ``reset``, the tool results after a ``step``; none at the end), and
    ``messages``, the whole conversation (chat format)."""

    new: list[dict[str, str]]
    messages: list[dict[str, str]]


def _dicts(messages: list[Message]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


class _Bridge:
    """The policy ``run_agent`` calls: it hands the conversation out and waits for a reply."""

    name = "external"

    def __init__(self) -> None:
        self.prompts: asyncio.Queue[list[Message]] = asyncio.Queue()
        self.replies: asyncio.Queue[Generation] = asyncio.Queue()

    async def generate(self, messages: list[Message]) -> Generation:
        await self.prompts.put(messages)
        return await self.replies.get()


@dataclass
class _Episode:
    task: Task
    session: TaskSession
    baseline: dict[str, bytes]
    bridge: _Bridge
    loop_task: asyncio.Task
    seen: int = 0  # messages already shown to the caller
    info: dict[str, Any] = field(default_factory=dict)


class TaskEnv:
    """One episode at a time over ``sessions`` (see the module docstring)."""

    def __init__(
        self,
        sessions: TaskSessionOpener,
        limits: AgentLimits | None = None,
        grader: GraderConfig | None = None,
    ) -> None:
        self.sessions, self.limits, self.grader = sessions, limits or AgentLimits(), grader
        self._ep: _Episode | None = None

    async def reset(self, task: Task) -> tuple[Observation, dict[str, Any]]:
        """Open ``task`` (closing an episode still open) and return its first observation."""
        await self.close()
        session = await open_task(self.sessions, task)
        try:
            baseline = await capture_baseline(session)
        except BaseException:
            await self.sessions.close(session)
            raise
        bridge = _Bridge()
        loop_task = asyncio.create_task(
            run_agent(task.query, bridge, session.agent, self.limits, task_id=task.id)
        )
        self._ep = _Episode(task, session, baseline, bridge, loop_task)
        obs = await self._next()
        assert obs is not None, "the agent loop ended before its first turn"
        return obs, {"task_id": task.id}

    async def _next(self) -> Observation | None:
        """The next prompt the loop asks about, or None once the loop has ended."""
        ep = self._ep
        assert ep is not None
        prompt = asyncio.ensure_future(ep.bridge.prompts.get())
        try:
            await asyncio.wait({prompt, ep.loop_task}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the caller gave up (a dropped connection): no orphan
            prompt.cancel()
            raise
        if not prompt.done():
            prompt.cancel()
            return None
        messages = _dicts(prompt.result())
        new, ep.seen = messages[ep.seen :], len(messages)
        return Observation(new=new, messages=messages)

    async def step(
        self,
        assistant: str,
        *,
        token_ids: list[int] | None = None,
        finish_reason: str | None = None,
    ) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Give the model's message (``finish_reason`` "length" when the caller's token cap cut
        it); see the module docstring for what comes back."""
        ep = self._ep
        if ep is None:
            raise RuntimeError("step() before reset(), or after the episode ended")
        tokens = len(token_ids) if token_ids is not None else estimate_tokens(assistant)
        await ep.bridge.replies.put(
            Generation(
                text=assistant,
                completion_tokens=tokens,
                token_ids=token_ids,
                finish_reason=finish_reason,
            )
        )
        ep.seen += 1  # the caller's own message is not news to it
        obs = await self._next()
        if obs is not None:
            return obs, 0.0, False, False, {"task_id": ep.task.id}
        return await self._finish(ep)

    async def _finish(self, ep: _Episode) -> tuple[Observation, float, bool, bool, dict]:
        self._ep = None
        try:
            traj: Trajectory = ep.loop_task.result()  # AgentError: not the model's doing
            g = await grade(ep.task, ep.session, ep.baseline, self.sessions, self.grader)
        finally:
            await self.sessions.close(ep.session)
        attach(traj, g)
        info = {
            "task_id": ep.task.id,
            "stop_reason": traj.stop_reason,
            "stop_detail": traj.stop_detail,
            "turns": len(traj.turns),
            "tools_s": sum(t.tools_s or 0.0 for t in traj.turns),
            "grade": g,
            "trajectory": traj,
        }
        messages = _dicts(traj.messages)
        obs = Observation(new=messages[ep.seen :], messages=messages)
        finished = traj.stop_reason == "finished"
        return obs, g.reward, finished, not finished, info

    async def close(self) -> None:
        """End an open episode without grading it (its session is closed)."""
        ep, self._ep = self._ep, None
        if ep is None:
            return
        ep.loop_task.cancel()
        try:
            await ep.loop_task
        except (asyncio.CancelledError, AgentError):
            pass
        finally:
            await self.sessions.close(ep.session)


class SyncTaskEnv:
    """``TaskEnv`` behind blocking ``reset``/``step``/``close`` (an event loop in a thread)."""

    def __init__(self, make_sessions, **env_args: Any) -> None:
        """``make_sessions()`` builds the ``TaskSessionOpener`` inside the env's own loop."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.env: TaskEnv = self._call(self._make(make_sessions, env_args))

    @staticmethod
    async def _make(make_sessions, env_args: dict[str, Any]) -> TaskEnv:
        return TaskEnv(make_sessions(), **env_args)

    def _call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def reset(self, task: Task):
        return self._call(self.env.reset(task))

    def step(self, assistant: str, **kw):
        return self._call(self.env.step(assistant, **kw))

    def close(self) -> None:
        self._call(self.env.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
