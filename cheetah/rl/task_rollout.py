"""``TaskRollout``: the rollout function a worker runs for one training or held-out sample.

One task, one env-fleet session, the harness with the policy engine, the grader: all through
``tasks.episode.run_episode``, the episode that eval and SFT run too; then the shaped reward
(``rl/reward.py``). The result is a ``Finished`` record carrying the trajectory as JSON.
A task that could not run, or an episode the engine or the env broke (``AgentError``),
returns an error instead: the driver drops its group, so RL never trains on a failure
that was not the model's. Left out: retries (the fleet already fails sessions over).
"""

from __future__ import annotations

from typing import Any

from cheetah.inference.ray_engine import RayEngine
from cheetah.model.loading import tokenizer_for
from cheetah.rl.config import TrainRunConfig
from cheetah.rl.reward import shaped_reward
from cheetah.rl.scheduler import Finished, RolloutSpec


def remote_engines(cfg: TrainRunConfig) -> list[Any]:
    """One ``RemoteEngine`` per ``model.engine_urls`` server, each sending the bearer token
    of ``model.engine_token_file`` (unset: ``$CHEETAH_API_TOKEN``, then ``$OPENAI_API_KEY``)."""
    from cheetah.core.http_gate import read_token
    from cheetah.inference.remote import RemoteEngine

    m = cfg.model
    token = read_token(m.engine_token_file) if m.engine_token_file is not None else None
    return [
        RemoteEngine(url, kind=m.engine_kind, staging_dir=m.staging_dir, api_key=token)
        for url in m.engine_urls
    ]


def env_token(cfg: TrainRunConfig) -> str:
    from cheetah.core.http_gate import read_token

    if cfg.rollout.env_token_file is None:
        raise ValueError("rollout.env_urls needs rollout.env_token_file (the servers' token)")
    return read_token(cfg.rollout.env_token_file)


class TaskRollout:
    """Runs in a rollout worker: one task, one env-fleet session, the harness, the grader."""

    def __init__(self, engine: Any, cfg: dict) -> None:
        from cheetah.sandbox.fleet import EnvFleet
        from cheetah.tasks.loaders import load_tasks
        from cheetah.tasks.session import TaskSessionOpener

        self.cfg = TrainRunConfig.model_validate(cfg)
        self.engines = [RayEngine(engine)] if engine is not None else remote_engines(self.cfg)
        self.tokenizer = tokenizer_for(self.cfg.model.spec)
        self.tasks = {t.id: t for f in self.cfg.tasks.files() for t in load_tasks(f)}
        fleet = EnvFleet(self.cfg.rollout.env_urls, env_token(self.cfg))
        self.sessions = TaskSessionOpener(fleet)

    async def __call__(self, spec: RolloutSpec) -> Finished:
        from cheetah.harness.engine_policy import EnginePolicy
        from cheetah.harness.loop import AgentError
        from cheetah.inference.protocol import SamplingParams
        from cheetah.tasks.episode import run_episode

        r = self.cfg.rollout
        task = self.tasks[spec.task_id]
        greedy = spec.mode == "eval"
        sampling = SamplingParams(
            temperature=0.0 if greedy else r.temperature,
            max_tokens=r.max_new_tokens,
            seed=self.cfg.run.seed * 1_000_003 + spec.rollout_id,
        )
        engine = self.engines[spec.rollout_id % len(self.engines)]
        policy = EnginePolicy(engine, self.tokenizer, sampling)
        try:
            ep = await run_episode(
                task,
                policy,
                self.sessions,
                limits=r.limits(),
                grader=self.cfg.grader,
            )
        except AgentError as e:  # the engine or the env failed, not the model: never trained on
            return Finished(spec, reward=0.0, versions=[], error=f"the episode broke: {e}")
        if ep.error is not None:
            return Finished(spec, reward=0.0, versions=[], error=ep.error)
        traj = ep.trajectory
        assert traj is not None and ep.grade is not None
        traj.reward = shaped_reward(
            ep.grade.reward, traj, r.format_weight, r.turn_cost, r.claim_cost, ep.grade.diff
        )
        versions = [t.policy_version or 0 for t in traj.turns]
        return Finished(
            spec, reward=traj.reward, versions=versions, trajectory=traj.model_dump_json()
        )
