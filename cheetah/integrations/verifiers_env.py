"""verifiers (prime-rl's environment library) on cheetah's tasks: multi-turn episodes through
``tasks.gym.TaskEnv``.

verifiers 0.4 finds an environment by its taskset id: ``vf-eval cheetah-verifiers``,
``vf.load_environment(vf.resolve_env_config({"taskset": {"id": "cheetah-verifiers"}}))`` and
prime-rl's env servers all import the installed module of that name (``-`` becomes ``_``)
and take the ``Taskset``, ``Harness`` and ``Env`` subclasses its ``__all__`` exports. cheetah
installs that module, ``cheetah_verifiers``, as a re-export of the classes here:

- ``CheetahTaskset`` loads a task file (a bundled set's name or a JSONL path) filtered by
  split and tier; each verifiers task carries only the cheetah task's id (traces stay small
  and hidden tests stay out of them). Limits, shuffles and id picks are verifiers' own
  ``--select.*``.
- ``CheetahEnv.run`` plays one episode in a fresh ``TaskEnv`` (the product's loop, tools,
  limits and grader; sessions in this process or on env servers, opened in ``start``):
  ``reset``'s system prompt and query open the agent's interaction, each reply goes to
  ``step``, each observation's tool results are the next user turn. The reward is the
  grade's (``grade``), and ``trace.info`` holds the stop reason, turns and correctness.
- ``CheetahChat`` is the harness: one chat completion per turn through the interception
  endpoint, in this process. verifiers' own harnesses run a program in a box with their
  own tools; cheetah's tools run in the session, so the model only needs to talk.

The agent's ``max_turns`` (verifiers' knob) becomes cheetah's turn limit, so cheetah ends
and grades the episode before verifiers would cut it; an exchange verifiers ends for
another reason (a token limit, a failed call) is not graded and scores 0. Deliberately left
out: token ids (verifiers' interception records them for its trainer; cheetah's token
limit counts estimated tokens) and verifiers' sandbox runtimes (the agent needs no box: the
``subprocess`` runtime is the default and runs nothing).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import verifiers.v1 as vf
from openai import AsyncOpenAI
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire

from cheetah.core.http_gate import read_token
from cheetah.harness.loop import AgentLimits
from cheetah.tasks import schema
from cheetah.tasks.grader import GraderConfig
from cheetah.tasks.gym import TaskEnv
from cheetah.tasks.loaders import load_tasks, select_tasks
from cheetah.tasks.remote_sessions import fleet_sessions
from cheetah.tasks.session import TaskSessionOpener, local_sessions


class CheetahTasksetConfig(vf.TasksetConfig):
    tasks: str = "curriculum"
    """A bundled task set's name (``curriculum``, ``benchmark``, ``real``) or a JSONL file."""
    split: str | None = None
    """Only tasks of this split (``train``, ``heldout``); None keeps all."""
    tier: list[str] = Field(default_factory=list)
    """Only tasks of these tiers; empty keeps all."""


class CheetahTask(vf.Task[vf.TaskData]):
    @property
    def key(self) -> str:
        return self.data.id or ""  # the cheetah task's id: unique in a task file


class CheetahTaskset(vf.Taskset[CheetahTask, CheetahTasksetConfig]):
    def __init__(self, config: CheetahTasksetConfig) -> None:
        if config.system_prompt is not None:
            raise ValueError("cheetah's system prompt lists the session's tools: keep it")
        super().__init__(config)
        chosen = select_tasks(load_tasks(config.tasks), split=config.split, tier=config.tier)
        self.tasks: dict[str, schema.Task] = {t.id: t for t in chosen}

    def load(self) -> Iterator[CheetahTask]:
        for task_id in self.tasks:
            # no prompt: the env opens the exchange with TaskEnv's system prompt and query
            yield CheetahTask(vf.TaskData(id=task_id, name=task_id), self.config.task)


class CheetahChat(vf.Harness[vf.HarnessConfig]):
    """The conversation so far in, one chat completion out (see the module docstring)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True  # each turn relaunches on the whole conversation
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(
        self,
        ctx: vf.ModelContext,
        trace: vf.Trace,
        runtime: vf.Runtime,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: vf.TaskData,
        tool_interception_url: str | None = None,
    ) -> vf.ProgramResult:
        _, prompt = self.resolve_prompt(data)
        if not isinstance(prompt, list):
            raise vf.HarnessError("CheetahChat continues conversations the env opens")
        # no client retries: a failed call is the rollout's, under verifiers' retry rules
        async with AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client:
            r = await client.chat.completions.create(
                model=ctx.model, messages=[message_to_wire(m) for m in prompt]
            )
        return vf.ProgramResult(0, r.choices[0].message.content or "", "")


class CheetahEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The model's seat; its ``max_turns`` is cheetah's turn limit."""
    sandbox: Literal["isolated", "local"] = "isolated"
    """Where sessions run when no env server is given (``local``: unsandboxed)."""
    env_urls: list[str] = Field(default_factory=list)
    """cheetah env servers (``cheetah env serve``) to run the sessions on instead."""
    env_token_file: Path | None = None
    """The env servers' bearer token file (needed with ``env_urls``)."""
    grader: GraderConfig = GraderConfig()
    """How episodes are graded (cheetah's grader settings)."""


class CheetahEnv(vf.Env[CheetahEnvConfig]):
    taskset: CheetahTaskset

    async def start(self) -> None:
        self._stack = contextlib.AsyncExitStack()
        self.sessions = await self._stack.enter_async_context(_sessions(self.config))

    async def stop(self) -> None:
        await self._stack.aclose()  # serving() calls stop() only after start()

    async def run(self, task: CheetahTask, agents: vf.Agents) -> None:
        cap = self.config.agent.max_turns
        limits = AgentLimits(max_turns=cap) if cap else AgentLimits()
        env = TaskEnv(self.sessions, limits, self.config.grader)
        obs, _ = await env.reset(self.taskset.tasks[task.data.id or ""])
        try:
            async with agents.agent.interaction(task) as chat:
                segment = await chat.turn(obs.new)
                while not segment.terminated:
                    obs, reward, terminated, truncated, info = await env.step(_reply(segment))
                    if terminated or truncated:
                        _record(chat.trace, reward, info)
                        return
                    segment = await chat.turn(obs.new)
                chat.trace.record_reward("grade", 0.0)
                chat.trace.info.update(graded=False, stop_reason=chat.trace.stop_condition)
        finally:
            await env.close()  # an episode verifiers ended: its session closes ungraded


def _reply(segment: vf.Segment) -> str:
    """The segment's assistant message as the model wrote it (``last_reply`` strips it)."""
    said = [m.content or "" for m in segment.messages if m.role == "assistant"]
    return said[-1] if said else ""


def _record(trace: vf.Trace, reward: float, info: dict[str, Any]) -> None:
    trace.record_reward("grade", reward)
    trace.info.update(
        graded=True,
        task_id=info["task_id"],
        stop_reason=info["stop_reason"],
        stop_detail=info["stop_detail"],
        turns=info["turns"],
        tools_s=info["tools_s"],
        correct=info["grade"].correct,
    )


def _sessions(config: CheetahEnvConfig) -> contextlib.AbstractAsyncContextManager:
    """The ``TaskSessionOpener`` the config asks for, as an async context."""
    if not config.env_urls:
        opener: TaskSessionOpener = local_sessions(config.sandbox)
        return contextlib.nullcontext(opener)
    if config.env_token_file is None:
        raise ValueError("env_urls needs env_token_file (the env servers' token)")
    return fleet_sessions(config.env_urls, read_token(config.env_token_file))
