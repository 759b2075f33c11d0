"""Test doubles with realistic timing for the scheduling tests and benchmarks (not shipped
in the package).

``FakeEngine`` is a Ray actor with a fixed number of decode slots that sleeps
``token_s`` per generated token and stamps every generation with its policy version.
``FakeRollout`` runs the real harness loop (``run_agent``) with a policy that asks the
engine for each turn and a tool that sleeps: turn counts and tool latencies are
lognormal, drawn from the rollout id so both modes of a benchmark see the same work.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from dataclasses import dataclass

import ray

from cheetah.core.wire import ParamSpec, ToolCall, ToolResult, ToolSpec
from cheetah.harness.loop import AgentLimits, run_agent
from cheetah.harness.policy import Generation
from cheetah.rl.scheduler import Finished, RolloutSpec


@ray.remote
class FakeEngine:
    def __init__(self, slots: int, token_s: float) -> None:
        self.slots, self.token_s = slots, token_s
        self.sem = asyncio.Semaphore(slots)
        self.version = 0
        self.paused_until = 0.0
        self.busy_slot_s = 0.0
        self.t0 = time.monotonic()

    async def generate(self, n_tokens: int) -> int:
        async with self.sem:
            wait = self.paused_until - time.monotonic()
            if wait > 0:  # weights are being loaded
                await asyncio.sleep(wait)
            version = self.version
            await asyncio.sleep(n_tokens * self.token_s)
            self.busy_slot_s += n_tokens * self.token_s
            return version

    def load_weights(self, version: int, sync_s: float) -> None:
        self.version = version
        self.paused_until = time.monotonic() + sync_s

    def reset_stats(self) -> None:
        self.busy_slot_s, self.t0 = 0.0, time.monotonic()

    def utilization(self) -> float:
        return self.busy_slot_s / (self.slots * (time.monotonic() - self.t0))

    def snapshot(self) -> tuple[float, float]:
        """(busy slot-seconds so far, capacity slot-seconds so far)."""
        return self.busy_slot_s, self.slots * (time.monotonic() - self.t0)


@dataclass(frozen=True)
class FakeWork:
    turns_median: float = 4.0
    tool_median_s: float = 0.05
    sigma: float = 1.5
    max_turns: int = 40
    tokens_per_turn: int = 20
    seed: int = 0


class _EnginePolicy:
    name = "fake-engine"

    def __init__(self, engine, work: FakeWork, turns: int, rng: random.Random) -> None:
        self.engine, self.work, self.turns, self.rng, self.done = engine, work, turns, rng, 0

    async def generate(self, messages) -> Generation:
        version = await self.engine.generate.remote(self.work.tokens_per_turn)
        self.done += 1
        if self.done >= self.turns:
            text = "done"
        else:
            latency = self.rng.lognormvariate(math.log(self.work.tool_median_s), self.work.sigma)
            text = f'<tool name="wait"><seconds>{latency:.4f}</seconds></tool>'
        return Generation(
            text=text, completion_tokens=self.work.tokens_per_turn, policy_version=version
        )


class _SleepTools:
    def specs(self) -> list[ToolSpec]:
        return [ToolSpec("wait", "sleep", (ParamSpec("seconds", "how long"),))]

    async def run_tools(self, calls: list[ToolCall]) -> list[ToolResult]:
        async def one(c: ToolCall) -> ToolResult:
            await asyncio.sleep(float(c.args["seconds"]))
            return ToolResult(c.index, c.name, "ok")

        return list(await asyncio.gather(*(one(c) for c in calls)))


class FakeRollout:
    def __init__(self, engine, work: FakeWork = FakeWork()) -> None:
        self.engine, self.work = engine, work

    def turns_for(self, rollout_id: int) -> int:
        rng = random.Random(self.work.seed * 1_000_003 + rollout_id)
        t = round(rng.lognormvariate(math.log(self.work.turns_median), self.work.sigma))
        return max(1, min(self.work.max_turns, t))

    async def __call__(self, spec: RolloutSpec) -> Finished:
        rng = random.Random(self.work.seed * 7_919 + spec.rollout_id)
        policy = _EnginePolicy(self.engine, self.work, self.turns_for(spec.rollout_id), rng)
        traj = await run_agent(
            spec.task_id, policy, _SleepTools(), AgentLimits(max_turns=self.work.max_turns + 1)
        )
        versions = [t.policy_version or 0 for t in traj.turns]
        reward = float(len(traj.turns) <= self.work.turns_median)
        return Finished(spec, reward=reward, versions=versions, trajectory=traj.model_dump_json())
