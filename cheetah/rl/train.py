"""`cheetah train`: the main job, read top to bottom.

1. Resolve the config, open the run directory (``config.json``, ``run.sqlite``).
2. Start Ray locally: one engine actor (``LocalEngine`` over the policy), or none when
   ``model.engine_urls`` names OpenAI-compatible servers (cheetah serve, vLLM, SGLang)
   that reload checkpoint directories; rollout workers that run the harness against
   the env fleet (the servers of ``rollout.env_urls``, or one env server started for
   the run) and grade the result there.
3. Optionally warm up with SFT on oracle trajectories (the reference patch applied
   through the tools), so a small model learns the tool format before RL.
4. Held-out stages (``rl/stages.py``): the same tasks, greedy, one sample each, for the
   base model, after SFT (step 3 comes after the base stage), and after RL (step 6).
5. RL: the scheduler keeps rollouts in flight; every batch of complete groups
   becomes samples (group-relative advantages, the engine's own token ids and
   logprobs), one optimizer step, a weight sync to the engine, metrics into the
   store, a checkpoint every ``checkpoint_every`` steps. Rollouts keep running while
   the trainer steps.
6. The last stage; the reward-curve plot and ``summary.json``: every stage's pass rate
   with its Wilson interval, per tier and behaviour, and exact McNemar tests between
   stages (``mcnemar_p``: the last against the base model).

``--resume`` continues from the newest checkpoint: weights, optimizer and version
come back, rollouts finished but not trained come back from the store, samples that
never finished run again, and nothing is trained twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

import ray

from cheetah.harness.trajectory import Trajectory
from cheetah.rl.config import TrainRunConfig
from cheetah.rl.data import Sample, SampleError, sample_from_trajectory, truncation_metrics
from cheetah.rl.lr_schedule import lr_at
from cheetah.rl.reward import call_success_rate, shaped_reward
from cheetah.rl.rollout import run_rollouts, start_workers
from cheetah.rl.scheduler import Finished, Group, RolloutScheduler, RolloutSpec
from cheetah.rl.stages import stage_record, summarize, table
from cheetah.rl.store import RunStore
from cheetah.tasks.schema import Task


def tokenizer_for(spec: str) -> Any:
    from cheetah.model.loading import default_tokenizer

    if spec in ("default", "tiny"):
        return default_tokenizer()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec)


def load_policy_model(spec: str, mxfp8: bool = False) -> Any:
    """The policy as trainer and engine both run it (with MXFP8 GEMMs when asked)."""
    from cheetah.model.loading import build_tiny, load_model

    loaded = build_tiny() if spec == "tiny" else load_model(spec)
    if mxfp8:
        from cheetah.model.mxfp8 import convert_to_mxfp8

        convert_to_mxfp8(loaded.model)
    return loaded


@ray.remote
class EngineActor:
    """The inference engine in its own process; the trainer reaches it through Ray."""

    def __init__(self, spec: str, max_batch: int, mxfp8: bool = False) -> None:
        from cheetah.inference.local import LocalEngine

        loaded = load_policy_model(spec, mxfp8)
        self.engine = LocalEngine.from_loaded(loaded, max_batch=max_batch)

    async def generate(self, prompt_ids: list[int], sampling: Any) -> Any:
        return await self.engine.generate(prompt_ids, sampling)

    async def load_weights(self, state: dict, version: int) -> None:
        await self.engine.load_weights(state, version)

    def version(self) -> int:
        return self.engine.policy_version


class RayEngine:
    """The ``Engine`` protocol over an ``EngineActor`` handle."""

    def __init__(self, handle: Any) -> None:
        self.handle, self._version = handle, 0

    @property
    def policy_version(self) -> int:
        return self._version

    async def generate(self, prompt_ids: list[int], sampling: Any) -> Any:
        out = await self.handle.generate.remote(prompt_ids, sampling)
        self._version = out.policy_version
        return out

    async def load_weights(self, state: dict, version: int) -> None:
        await self.handle.load_weights.remote(state, version)


def remote_engines(cfg: TrainRunConfig) -> list[Any]:
    from cheetah.inference.remote import RemoteEngine

    return [RemoteEngine(url, staging_dir=cfg.model.staging_dir) for url in cfg.model.engine_urls]


def env_token(cfg: TrainRunConfig) -> str:
    from cheetah.sandbox.server import read_token

    if cfg.rollout.env_token_file is None:
        raise ValueError("rollout.env_urls needs rollout.env_token_file (the servers' token)")
    return read_token(cfg.rollout.env_token_file)


class TaskRollout:
    """Runs in a rollout worker: one task, one env-fleet session, the harness, the grader."""

    def __init__(self, engine: Any, cfg: dict) -> None:
        from cheetah.sandbox.fleet import EnvFleet
        from cheetah.tasks.loaders import load_tasks
        from cheetah.tasks.remote import FleetSessionFactory

        self.cfg = TrainRunConfig.model_validate(cfg)
        self.engines = [RayEngine(engine)] if engine is not None else remote_engines(self.cfg)
        self.tokenizer = tokenizer_for(self.cfg.model.spec)
        self.tasks = {t.id: t for t in load_tasks(self.cfg.tasks.file)}
        fleet = EnvFleet(self.cfg.rollout.env_urls, env_token(self.cfg))
        self.factory = FleetSessionFactory(fleet)

    async def __call__(self, spec: RolloutSpec) -> Finished:
        from cheetah.harness.engine_policy import EnginePolicy
        from cheetah.harness.loop import AgentLimits
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
        ep = await run_episode(
            task, policy, self.factory, limits=AgentLimits(max_turns=r.max_turns)
        )
        if ep.error is not None:
            return Finished(spec, reward=0.0, versions=[], error=ep.error)
        traj = ep.trajectory
        assert traj is not None and ep.grade is not None
        traj.reward = shaped_reward(ep.grade.reward, traj, r.format_weight, r.turn_cost)
        versions = [t.policy_version or 0 for t in traj.turns]
        return Finished(spec, reward=traj.reward, versions=versions, payload=traj.model_dump_json())


def _passed(payload: str) -> bool:
    grade = json.loads(payload).get("grade") or {}
    return bool(grade.get("correct"))


class TrainJob:
    def __init__(
        self, cfg: TrainRunConfig, resume: bool = False, log=print, progress: bool = True
    ) -> None:
        from cheetah.tasks.loaders import load_tasks, select_tasks

        self.cfg, self.resume, self._emit, self.progress = cfg, resume, log, progress
        self._t0 = time.monotonic()
        self._bar = None
        self.dir = cfg.run_dir
        store_path = self.dir / "run.sqlite"
        if store_path.exists() and not resume:
            raise FileExistsError(
                f"{self.dir} already holds a run; pass --resume to continue it or set run.name"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg.save(self.dir / "config.json")
        self.store = RunStore(store_path)
        all_tasks = load_tasks(cfg.tasks.file)
        self.train_tasks = select_tasks(all_tasks, tier=cfg.tasks.tier, split=cfg.tasks.train_split)
        self.eval_tasks = select_tasks(all_tasks, tier=cfg.tasks.tier, split=cfg.tasks.eval_split)
        if 0 < cfg.tasks.eval_limit < len(self.eval_tasks):  # evenly spaced: every repo stays
            n, k = len(self.eval_tasks), cfg.tasks.eval_limit
            self.eval_tasks = [self.eval_tasks[i * n // k] for i in range(k)]
        if not self.train_tasks:
            raise ValueError(
                f"{cfg.tasks.file}: no tasks of tier {cfg.tasks.tier!r} in split "
                f"{cfg.tasks.train_split!r}"
            )
        self.order: list[str] = []
        self.rng = random.Random(cfg.run.seed)
        self.env_server: Any = None

    def task_for_group(self, gid: int) -> str:
        while len(self.order) <= gid:  # a fresh shuffle per pass over the tasks
            ids = [t.id for t in self.train_tasks]
            self.rng.shuffle(ids)
            self.order.extend(ids)
        return self.order[gid]

    # -- setup ----------------------------------------------------------------------------
    def start(self) -> None:
        from cheetah.rl.trainer import TrainConfig, Trainer

        cfg = self.cfg
        if not ray.is_initialized():
            ray.init(
                num_cpus=max(2, os.cpu_count() or 2),
                include_dashboard=False,
                logging_level="ERROR",
                log_to_driver=False,
            )
        loaded = load_policy_model(cfg.model.spec, cfg.train.mxfp8)
        self.tokenizer = loaded.tokenizer
        self.trainer = Trainer(
            loaded.model,
            loaded.tokenizer,
            TrainConfig(
                lr=cfg.train.lr,
                grad_clip=cfg.train.grad_clip,
                micro_batch_tokens=cfg.train.micro_batch_tokens,
                bf16=cfg.train.bf16,
                grad_checkpointing=cfg.train.grad_checkpointing,
                temperature=cfg.rollout.temperature,
            ),
        )
        if cfg.model.engine_urls:  # remote servers: no local engine actor
            self.engine, self.sync_targets = None, remote_engines(cfg)
        else:
            self.engine = EngineActor.options(max_concurrency=1000).remote(
                cfg.model.spec, cfg.model.max_batch, cfg.train.mxfp8
            )
            self.sync_targets = [RayEngine(self.engine)]
        self.env_cfg = self._start_env(cfg)
        cfg_dict = self.env_cfg.model_dump(mode="json")
        engine = self.engine
        self.workers = start_workers(
            cfg.rollout.workers, cfg.rollout.worker_capacity, lambda: TaskRollout(engine, cfg_dict)
        )

    def _start_env(self, cfg: TrainRunConfig) -> TrainRunConfig:
        """The config the workers get: ``rollout.env_urls`` as given, or one local env server."""
        if cfg.rollout.env_urls:
            env_token(cfg)  # fail here, not in every worker
            return cfg
        from cheetah.sandbox.launch import LocalEnvServer

        r = cfg.rollout
        self.env_server = LocalEnvServer(
            self.dir / "env", backend=r.sandbox, capacity=r.workers * r.worker_capacity + 8
        ).start()
        self.log(f"env server {self.env_server.url} ({r.sandbox}), log {self.env_server.log_path}")
        rollout = r.model_copy(
            update={
                "env_urls": [self.env_server.url],
                "env_token_file": self.env_server.token_file,
            }
        )
        return cfg.model_copy(update={"rollout": rollout})

    def log(self, message: str) -> None:
        """One log line, stamped with the run's elapsed time (mm:ss)."""
        m, sec = divmod(int(time.monotonic() - self._t0), 60)
        self._emit(f"[{m:02d}:{sec:02d}] {message}")

    def close(self) -> None:
        """Stop what ``start`` started here (the env server; Ray stays up for the caller)."""
        if self.env_server is not None:
            self.env_server.stop()
            self.env_server = None

    # -- evaluation -----------------------------------------------------------------------
    async def evaluate(self, label: str) -> dict[str, Any] | None:
        """One held-out stage (greedy, one sample per task): recorded in the store as
        ``stage_<label>`` and returned. A task that fails to run counts as unsolved."""
        if not self.eval_tasks:
            return None
        handles = list(self.workers.values())
        specs = [
            RolloutSpec(10**9 + i, -1, t.id, 0, mode="eval") for i, t in enumerate(self.eval_tasks)
        ]
        progress = {"done": 0, "t": time.monotonic()}

        async def run(i: int, spec: RolloutSpec) -> Finished:
            try:
                return await handles[i % len(handles)].run.remote(spec)
            finally:
                progress["done"] += 1
                if time.monotonic() - progress["t"] > 10:  # a line every ~10 s, in logs too
                    progress["t"] = time.monotonic()
                    self.log(f"held-out {label}: {progress['done']}/{len(specs)} tasks run")

        results = await asyncio.gather(
            *(run(i, s) for i, s in enumerate(specs)), return_exceptions=True
        )
        graded = []
        for task, r in zip(self.eval_tasks, results, strict=True):
            if isinstance(r, BaseException) or r.error:
                why = r if isinstance(r, BaseException) else r.error
                self.log(f"held-out task {task.id} could not run ({label}): {why}")
                graded.append((task, None))
            else:
                graded.append((task, Trajectory.model_validate_json(r.payload)))
        stage = stage_record(label, graded)
        calls = [call_success_rate(t) for _, t in graded if t is not None]
        stage["call_success"] = statistics.fmean(calls) if calls else 0.0
        self.store.set_meta(f"stage_{label}", stage)
        lo, hi = stage["ci95"]
        self.log(
            f"held-out pass rate {label}: {stage['pass_rate']:.3f} "
            f"(95% CI {lo:.3f}-{hi:.3f}, {stage['tasks']} tasks, greedy), "
            f"tool calls without error {stage['call_success']:.3f}"
        )
        return stage

    # -- SFT warm start ----------------------------------------------------------------------
    async def sft(self) -> None:
        from cheetah.tasks.episode import run_episode
        from cheetah.tasks.oracle import OraclePolicy
        from cheetah.tasks.remote import fleet_factory

        steps = self.cfg.train.sft_steps
        if steps <= 0:
            return
        r = self.env_cfg.rollout
        tasks = [t for t in self.train_tasks if t.reference_patch]
        self.rng.shuffle(tasks)  # one pass of the SFT steps needs at most steps x batch demos
        tasks = tasks[: steps * max(1, self.cfg.train.sft_batch)]
        gate = asyncio.Semaphore(max(1, r.workers * r.worker_capacity))
        progress = {"done": 0, "t": time.monotonic()}

        async def demonstrate(task: Task, factory: Any) -> Sample | None:
            async with gate:
                ep = await run_episode(task, OraclePolicy(task), factory)
            progress["done"] += 1
            if time.monotonic() - progress["t"] > 10 or progress["done"] == len(tasks):
                progress["t"] = time.monotonic()
                self.log(f"sft: {progress['done']}/{len(tasks)} demonstrations recorded")
            if ep.error is not None or ep.trajectory is None:
                self.log(f"sft: task {task.id} could not run, skipped: {ep.error}")
                return None
            if ep.grade is None or not ep.grade.correct:  # never imitate a wrong fix
                self.log(f"sft: the oracle does not solve task {task.id}; skipped")
                return None
            return sample_from_trajectory(
                ep.trajectory,
                self.tokenizer,
                need_logprobs=False,
                max_len=self.cfg.train.max_seq_len,
            )

        async with fleet_factory(r.env_urls, env_token(self.env_cfg)) as factory:
            found = await asyncio.gather(*(demonstrate(t, factory) for t in tasks))
        samples = [s for s in found if s is not None]
        if not samples:
            self.log("sft: no training task has a reference patch; skipped")
            return
        cut = [s for s in samples if s.dropped_tokens]
        if cut:
            self.log(
                f"sft: {len(cut)} of {len(samples)} demonstrations are longer than "
                f"train.max_seq_len={self.cfg.train.max_seq_len}; "
                f"{sum(s.dropped_trained for s in cut)} trained tokens dropped"
            )
        self.rng.shuffle(samples)
        per = max(1, min(self.cfg.train.sft_batch, len(samples)))
        for i in range(steps):
            batch = [samples[(i * per + k) % len(samples)] for k in range(per)]
            t = self.cfg.train
            self.trainer.set_lr(lr_at(i, steps, t.sft_lr, t.warmup_frac, t.lr_decay))
            m = await asyncio.to_thread(self.trainer.sft_step, batch)
            self.log(f"sft step {i + 1}/{steps}: loss {m.loss:.4f} ({m.tokens} tokens)")
        await self.trainer.sync_to(self.sync_targets)

    # -- RL ---------------------------------------------------------------------------------
    def _resume_state(self, scheduler: RolloutScheduler) -> int:
        ckpts = sorted(
            (self.dir / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1])
        )
        step = 0
        if ckpts:  # the RL step from the cursor: the trainer's own count includes SFT steps
            step = int(self.trainer.load_checkpoint(ckpts[-1])["step"])
        self.store.untrain_after(step)
        rows = self.store.untrained()
        done = self.store.done_groups()
        next_group = max([r["group_id"] for r in rows] + list(done) + [-1]) + 1
        finished = [
            Finished(
                RolloutSpec(r["rollout_id"], r["group_id"], r["task_id"], r["sample"]),
                r["reward"],
                r["versions"],
                r["trajectory"],
            )
            for r in rows
        ]
        scheduler.restore(next_group, done, finished)
        self.log(f"resumed at step {step}: {len(finished)} finished rollouts back from the store")
        return step

    async def rl(self) -> None:
        cfg = self.cfg
        r = cfg.rollout
        total = cfg.train.steps * r.groups_per_step * r.group_size
        scheduler = RolloutScheduler(
            self.task_for_group,
            workers={w: r.worker_capacity for w in self.workers},
            group_size=r.group_size,
            max_in_flight=r.workers * r.worker_capacity,
            groups_per_step=r.groups_per_step,
            max_staleness=r.max_staleness,
            max_rollouts=total,
            dynamic_sampling=r.dynamic_sampling,
            max_resampled=r.max_resampled_groups,
        )
        step = self._resume_state(scheduler) if self.resume else 0
        if step:
            await self.trainer.sync_to(self.sync_targets)
        state = {"step": step}

        def on_result(f: Finished) -> None:
            if f.error:
                self.log(f"task {f.spec.task_id} could not run; its group is dropped: {f.error}")
                return
            self.store.add_rollout(
                f.spec.rollout_id,
                f.spec.group_id,
                f.spec.task_id,
                f.spec.sample,
                f.reward,
                f.versions,
                f.payload,
            )

        async def on_batch(batch: list[Group]) -> None:
            resampled = scheduler.stats.groups_resampled - state.get("resampled", 0)
            state["resampled"] = scheduler.stats.groups_resampled
            if scheduler.dropped:
                self.store.mark_trained(
                    [x.spec.rollout_id for g in scheduler.dropped for x in g.rollouts], -1
                )
                scheduler.dropped.clear()
            state["step"] += 1
            await self._train_step(state["step"], batch, resampled)

        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (
            TextColumn("RL step {task.completed}/{task.total}"),
            BarColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, disable=not self.progress) as bar:
            self._bar = (
                bar,
                bar.add_task(
                    "rl",
                    total=cfg.train.steps,
                    completed=step,
                    stats="waiting for the first groups",
                ),
            )
            await run_rollouts(scheduler, self.workers, on_batch, on_result=on_result)

    async def _train_step(self, step: int, batch: list[Group], resampled: int = 0) -> None:
        import torch

        from cheetah.rl.loss import group_advantages

        rewards, gids, payloads, ids = [], [], [], []
        for g in batch:
            for f in g.rollouts:
                rewards.append(f.reward)
                gids.append(g.group_id)
                payloads.append(f.payload)
                ids.append(f.spec.rollout_id)
        adv = group_advantages(torch.tensor(rewards), torch.tensor(gids))
        samples, skipped = [], 0
        for a, payload, rid in zip(adv.tolist(), payloads, ids, strict=True):
            try:
                samples.append(
                    sample_from_trajectory(
                        Trajectory.model_validate_json(payload),
                        self.tokenizer,
                        advantage=a,
                        rollout_id=rid,
                        max_len=self.cfg.train.max_seq_len,
                    )
                )
            except SampleError:
                skipped += 1
        metrics: dict[str, float] = {
            "reward_mean": statistics.fmean(rewards),
            "pass_rate": statistics.fmean(_passed(p) for p in payloads),
            "samples_skipped": skipped,
            "groups_resampled": resampled,
        }
        metrics.update(behaviour_metrics(payloads))
        metrics.update(
            truncation_metrics(samples, [Trajectory.model_validate_json(p) for p in payloads])
        )
        if samples and any(s.advantage != 0 for s in samples):
            t = self.cfg.train
            metrics["lr"] = lr_at(step - 1, t.steps, t.lr, t.warmup_frac, t.lr_decay)
            self.trainer.set_lr(metrics["lr"])
            m = await asyncio.to_thread(self.trainer.rl_step, samples)
            metrics.update({f"train_{k}": v for k, v in m.as_dict().items()})
            t0 = time.perf_counter()
            await self.trainer.sync_to(self.sync_targets)
            metrics["weight_sync_s"] = time.perf_counter() - t0
        else:
            metrics["train_skipped_no_signal"] = 1.0  # every group had equal rewards
        self.store.mark_trained(ids, step)
        self.store.log_metrics(step, metrics)
        stats = (
            f"reward {metrics['reward_mean']:.3f}  pass {metrics['pass_rate']:.3f}  "
            f"calls ok {metrics['call_success']:.3f}  loss {metrics.get('train_loss', 0.0):.4f}"
            f"  cut: {metrics['turns_cut_by_max_new_tokens']:.0f} turns by max_new_tokens, "
            f"{metrics['samples_cut_by_max_seq_len']:.0f} samples by max_seq_len"
        )
        if self._bar is not None:
            bar, task = self._bar
            bar.update(task, completed=step, stats=stats)
        self.log(f"step {step}: {stats}")
        if step % self.cfg.train.checkpoint_every == 0 or step == self.cfg.train.steps:
            self.trainer.save_checkpoint(self.dir / "checkpoints" / f"step-{step}", {"step": step})

    async def sft_only(self) -> Path:
        """``cheetah sft``: the warm start alone, saved as a checkpoint."""
        self.start()
        try:
            await self.sft()
        finally:
            self.close()
        return self.trainer.save_checkpoint(self.dir / "checkpoints" / "sft", {"step": 0})

    # -- the whole job ------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        self.start()
        try:
            return await self._run()
        finally:
            self.close()

    async def _run(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        names = ["base", "sft", "rl"] if self.cfg.train.sft_steps > 0 else ["base", "rl"]
        stages = [m for n in names[:-1] if (m := self.store.get_meta(f"stage_{n}"))]
        if not self.resume:
            stages = [await self.evaluate("base")]
            if self.cfg.train.sft_steps > 0:
                await self.sft()
                stages.append(await self.evaluate("sft"))
        await self.rl()
        stages.append(await self.evaluate("rl"))
        plot_curves(self.store, self.dir / "reward.png")
        stages = [s for s in stages if s is not None]
        summary = summarize(stages)
        summary.update(
            {
                "pass_rate_before": stages[0]["pass_rate"] if stages else float("nan"),
                "pass_rate_after": stages[-1]["pass_rate"] if stages else float("nan"),
                "rollouts": self.store.count(),
                "wall_s": time.perf_counter() - t0,
                "run_dir": str(self.dir),
            }
        )
        self.store.set_meta("summary", summary)
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=1))
        if summary["stages"]:
            self.log(table(summary))
        return summary


def behaviour_metrics(payloads: list[str]) -> dict[str, float]:
    """Tool calls per turn, reads and searches before the first edit, edits per task, tokens
    per solved task: the eval's per-trajectory metrics, averaged over one step."""
    from cheetah.tasks.metrics import mean_of, trajectory_metrics

    trajs = [Trajectory.model_validate_json(p) for p in payloads]
    rows = [trajectory_metrics(t) for t in trajs]
    solved = [r for r, t in zip(rows, trajs, strict=True) if (t.grade or {}).get("correct")]

    def mean(rs: list[dict], key: str) -> float:
        return mean_of(rs, key) or 0.0

    return {
        "calls_per_turn": mean(rows, "calls_per_turn"),
        "reads_before_edit": mean(rows, "explore_before_edit"),
        "edits_per_task": mean(rows, "edits"),
        "tokens_per_solved": mean(solved, "completion_tokens"),
        "call_success": statistics.fmean(call_success_rate(t) for t in trajs) if trajs else 0.0,
    }


def plot_curves(store: RunStore, path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name in ("reward_mean", "pass_rate", "call_success"):
        series = store.metric_series(name)
        if series:
            ax.plot([s for s, _ in series], [v for _, v in series], marker="o", label=name)
    ax.set_xlabel("step")
    ax.set_ylim(-0.05, 1.05)
    ax.legend()
    ax.set_title("training reward")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
