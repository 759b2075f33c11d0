"""`cheetah train`: the main job, read top to bottom.

1. Resolve the config, open the run directory (``config.json``, ``run.sqlite``).
2. Start Ray locally (or join the cluster of ``RAY_ADDRESS``: ``docs/multi-node.md``); the
   trainer (one process, or ``train.world_size`` sharded ranks: ``rl/trainer_group.py``);
   one engine actor (``inference/ray_engine.py``), or none when
   ``model.engine_urls`` names OpenAI-compatible servers (cheetah serve, vLLM, SGLang)
   that reload checkpoint directories; rollout workers that run the harness against
   the env fleet (the servers of ``rollout.env_urls``, or one env server started for
   the run) and grade the result there (``rl/task_rollout.py``).
3. Optionally warm up with SFT on oracle trajectories (the reference patch applied
   through the tools, ``rl/sft.py``), so a small model learns the tool format before RL;
   saved as ``checkpoints/sft``.
4. Held-out stages (``rl/stages.py``): the same tasks, greedy, one sample each, for the
   base model, after SFT (step 3 comes after the base stage), and after RL (step 6).
5. RL: the scheduler keeps rollouts in flight; every batch of complete groups
   becomes samples (group-relative advantages, the engine's own token ids and
   logprobs), one optimizer step, a weight sync to the engine, metrics into the
   store, a checkpoint every ``checkpoint_every`` steps. Rollouts keep running while
   the trainer steps.
   With ``train.eval_every``, the held-out tasks are also evaluated every few RL steps
   (the learning curve: pass rate and turns per task against rollouts trained on).
6. The last stage; the reward-curve and learning-curve plots and ``summary.json``: where the
   wall time went (``time_breakdown``, ``rl/timing.py``), the dtype the trainer computed in
   and why (``precision``: ``train.precision`` resolved for the device at start, in the log
   too; a step slower than ``SLOW_STEP_S`` names ``cheetah doctor`` once), every
   stage's pass rate with its Wilson interval, per tier and behaviour, exact McNemar
   tests between stages (``mcnemar_p``: the last against the base model) and Wilcoxon
   tests of turns per task and calls per turn (``turns_p``, ``calls_p``).

``--resume`` continues from the newest checkpoint (an RL step's, else the SFT one; held-out
stages already recorded are not run again): weights, optimizer and version come back,
rollouts finished but not trained come back from the store, samples that never finished
run again, and nothing is trained twice.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import ray

from cheetah.inference.ray_engine import EngineActor, RayEngine
from cheetah.model.loading import ModelLoadError, check_spec
from cheetah.progress import Pace
from cheetah.rl.config import TrainRunConfig
from cheetah.rl.curves import plot_curves, plot_learning_curve
from cheetah.rl.export import read_records
from cheetah.rl.loggers import MetricLogger, check_available, make_loggers
from cheetah.rl.ray_rollouts import run_rollouts, start_workers
from cheetah.rl.scheduler import Finished, Group, RolloutScheduler
from cheetah.rl.stages import curve_metrics, learning_curve, run_stage, summarize, table
from cheetah.rl.store import DROPPED, RunStore
from cheetah.rl.task_rollout import TaskRollout, env_token, remote_engines
from cheetah.rl.timing import PhaseClock, breakdown
from cheetah.rl.timing import table as time_table
from cheetah.stop import StopOnSignal, Stopped, abandonable, stop_on_signal

# A trainer step slower than this says where to look once: on a CPU without fast bf16 a forced
# bf16 step took hours (issue 45); `cheetah doctor` prints what this machine does fast.
SLOW_STEP_S = 120.0


class TrainJob:
    def __init__(
        self, cfg: TrainRunConfig, resume: bool = False, log=print, progress: bool = True
    ) -> None:
        from cheetah.tasks.fetched import unfetched
        from cheetah.tasks.loaders import load_tasks, select_tasks, spread

        self.cfg, self.resume, self._emit, self.progress = cfg, resume, log, progress
        self._t0 = time.monotonic()
        self._bar = None
        self._told_slow = False
        self.dir = cfg.run_dir
        store_path = self.dir / "run.sqlite"
        if store_path.exists() and not resume:
            raise FileExistsError(
                f"{self.dir} already holds a run; pass --resume to continue it or set run.name"
            )
        # Everything that can be checked is checked before anything is written: a failed
        # start leaves no run directory behind for the corrected command to trip on.
        all_tasks = load_tasks(cfg.tasks.file)
        tiers = cfg.tasks.tiers()
        self.train_tasks = select_tasks(all_tasks, tier=tiers, split=cfg.tasks.train_split)
        self.eval_tasks = spread(
            select_tasks(all_tasks, tier=tiers, split=cfg.tasks.eval_split), cfg.tasks.eval_limit
        )
        for split, found in (
            (cfg.tasks.train_split, self.train_tasks),
            (cfg.tasks.eval_split, self.eval_tasks),
        ):
            if not found:
                known = sorted({t.tier for t in all_tasks if t.tier})
                raise ValueError(
                    f"tasks.tier: {cfg.tasks.file} has no tasks of tier {cfg.tasks.tier!r} in "
                    f"split {split!r} (its tiers: {', '.join(known) or 'none'})"
                )
        self.sampled: dict[str, int] = {}  # held-out task id -> samples for pass@k
        for i, extra in enumerate(cfg.tasks.also_eval):
            where = f"tasks.also_eval[{i}]"
            chosen = spread(
                select_tasks(
                    load_tasks(extra.file), tier=extra.tier, split=extra.split, tag=extra.tag
                ),
                extra.limit,
            )
            if not chosen:
                raise ValueError(f"{where}: {extra.file} has no tasks that match it")
            clash = {t.id for t in chosen} & {t.id for t in self.eval_tasks}
            if clash:
                raise ValueError(f"{where}: task ids already evaluated: {sorted(clash)[:3]}")
            self.eval_tasks += chosen
            self.sampled.update({t.id: extra.samples for t in chosen if extra.samples})
        self.sft_also_tasks: list = []
        for i, extra in enumerate(cfg.tasks.sft_also):
            chosen = select_tasks(
                load_tasks(extra.file), tier=extra.tier, split=extra.split, tag=extra.tag
            )
            chosen = [t for t in chosen if t.reference_patch]
            if not chosen:
                raise ValueError(f"tasks.sft_also[{i}]: {extra.file} has no tasks that match it")
            random.Random(cfg.run.seed + i).shuffle(chosen)
            self.sft_also_tasks += chosen[: extra.limit]
        needed = {
            t.snapshot.package for t in self.train_tasks + self.eval_tasks + self.sft_also_tasks
        }
        if problem := unfetched({p for p in needed if p}):
            raise ValueError(f"tasks: {problem}")
        if not cfg.model.engine_urls:
            try:
                check_spec(cfg.model.spec)
            except ModelLoadError as e:
                raise ValueError(f"model.spec: {e}") from None
        check_available(cfg.train.loggers)
        self.sft_records = read_records(cfg.train.sft_data) if cfg.train.sft_data else None
        self.order: list[str] = []
        self.rng = random.Random(cfg.run.seed)
        self.env_server: Any = None
        self.loggers: list[MetricLogger] = []
        self.dir.mkdir(parents=True, exist_ok=True)
        cfg.save(self.dir / "config.json")
        self.store = RunStore(store_path)
        self.clock = PhaseClock(self.store)

    def task_for_group(self, gid: int) -> str:
        while len(self.order) <= gid:  # a fresh shuffle per pass over the tasks
            ids = [t.id for t in self.train_tasks]
            self.rng.shuffle(ids)
            self.order.extend(ids)
        return self.order[gid]

    # -- setup ----------------------------------------------------------------------------
    def start(self, stop: StopOnSignal | None = None) -> None:
        """Start Ray, the trainer, the engine, the env server and the rollout workers; ``stop``
        takes SIGTERM back from Ray's handler as soon as Ray is up (a signal during the rest
        of the start is acted on once it returns)."""
        from cheetah.rl.trainer_group import build_trainer  # torch: loaded when the job starts

        cfg = self.cfg
        self.loggers = make_loggers(
            cfg.train.loggers, self.dir, cfg.model_dump(mode="json"), cfg.run.name
        )
        if not ray.is_initialized():
            # Ray runs workers at nice 15 by default, which put the engine, the run's critical
            # path, behind every other process on a shared machine (the run's own sandboxes
            # included); an explicit RAY_worker_niceness still wins.
            os.environ.setdefault("RAY_worker_niceness", "0")
            # RAY_ADDRESS set (docs/multi-node.md): join that cluster, whose nodes declared
            # their own CPUs and GPUs; else a new local one sized to this machine (never a
            # cluster some other `ray start` left running here).
            joined = bool(os.environ.get("RAY_ADDRESS"))
            local = {} if joined else {"address": "local", "num_cpus": max(2, os.cpu_count() or 2)}
            ray.init(
                **local,
                include_dashboard=False,
                logging_level="ERROR",
                log_to_driver=False,
            )
        if stop is not None:
            stop.install()  # ray.init replaced the SIGTERM handler with its own sys.exit
        self.trainer, self.tokenizer = build_trainer(cfg)
        p = self.trainer.precision
        self.log(f"trainer precision: {p.dtype} ({cfg.train.precision}: {p.reason})")
        if p.warning:
            self.log(f"warning: {p.warning}")
        if cfg.train.world_size > 1:
            self.log(f"trainer: {cfg.train.world_size} ranks, the model sharded (FSDP2)")
        if cfg.model.engine_urls:  # remote servers: no local engine actor
            self.engine, self.sync_targets = None, remote_engines(cfg)
        else:
            self.engine = EngineActor.options(max_concurrency=1000).remote(
                cfg.model.spec,
                cfg.train.mxfp8,
                cfg.model.device,
                cfg.model.engine_threads or os.cpu_count(),
                max_batch=cfg.model.max_batch,
                max_batch_tokens=cfg.model.max_batch_tokens,
                **({} if cfg.model.prefix_cache_tokens is None
                   else {"prefix_cache_tokens": cfg.model.prefix_cache_tokens}),
            )  # fmt: skip
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
        from cheetah.sandbox.launch import EnvServerProcess

        r = cfg.rollout
        self.env_server = EnvServerProcess(
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
        """Stop what ``start`` started here (the env server, trainer ranks; Ray stays up for
        the caller)."""
        close_ranks = getattr(getattr(self, "trainer", None), "close", None)
        if close_ranks is not None:  # a TrainerGroup's ranks
            close_ranks()
        if self.env_server is not None:
            self.env_server.stop()
            self.env_server = None
        for logger in self.loggers:
            logger.close()
        self.loggers = []
        self.store.close()

    # -- evaluation -----------------------------------------------------------------------
    async def evaluate(self, label: str) -> dict[str, Any] | None:
        """One held-out stage (``rl/stages.run_stage``), recorded as ``stage_<label>``."""
        if not self.eval_tasks:
            return None
        phase = "stage:curve" if label.startswith("rl-") else f"stage:{label}"
        with self.clock.phase(phase):
            workers = list(self.workers.values())
            stage = await run_stage(label, self.eval_tasks, workers, self.log, self.sampled)
        self.store.set_meta(f"stage_{label}", stage)
        for logger in self.loggers:
            logger.log_stage(stage)
        return stage

    # -- SFT warm start ----------------------------------------------------------------------
    async def sft(self) -> None:
        """The warm start: oracle demonstrations of training tasks, or the correct
        trajectories of ``train.sft_data`` (``rl/sft.py``), then ``sft_steps`` optimizer
        steps of ``sft_batch`` of them, then a weight sync."""
        from cheetah.rl.sft import sft_samples_for

        steps = self.cfg.train.sft_steps
        if steps <= 0:
            return
        with self.clock.phase("sft:demonstrations"):
            samples = await sft_samples_for(
                self.cfg,
                self.env_cfg,
                self.train_tasks,
                self.sft_records,
                self.tokenizer,
                self.rng,
                self.log,
                also=self.sft_also_tasks,
            )
        if not samples:
            self.log("sft: no demonstration to train on; skipped")
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
            self.trainer.set_lr(self.cfg.train.sft_lr_of(i))
            with self.clock.phase("sft:steps"):
                m = await abandonable(self.trainer.sft_step, batch)
            self.log(f"sft step {i + 1}/{steps}: loss {m.loss:.4f} ({m.tokens} tokens)")
            self._note_slow(m.step_s)
        with self.clock.phase("sft:weight_sync"):
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
        finished = self.store.untrained()
        done = self.store.done_groups()
        next_group = max([f.spec.group_id for f in finished] + list(done) + [-1]) + 1
        scheduler.restore(next_group, done, finished, self.store.dropped_groups())
        self.log(f"resumed at step {step}: {len(finished)} finished rollouts back from the store")
        return step

    def _load_reference(self) -> None:
        """The KL penalty's reference: the policy RL starts from, which is the SFT checkpoint
        when this run has one (also on ``--resume`` from a later RL step), else the model the
        run started with."""
        sft = self.dir / "checkpoints" / "sft"
        spec = str(sft) if sft.exists() else self.cfg.model.spec
        self.trainer.set_reference(spec, self.cfg.train.mxfp8)
        self.log(f"KL penalty {self.cfg.train.loss.kl_coef:g} to the reference policy {spec}")

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
        if cfg.train.loss.kl_coef > 0:
            with self.clock.phase("startup"):
                self._load_reference()
        step = self._resume_state(scheduler) if self.resume else 0
        if step:
            await self.trainer.sync_to(self.sync_targets)
        state: dict[str, Any] = {"step": step, "idle_from": time.perf_counter(), "since": []}
        pace = Pace(30.0)  # a step can take minutes: a line between steps, for logs

        def on_result(f: Finished) -> None:
            if f.error:
                self.log(f"task {f.spec.task_id} could not run; its group is dropped: {f.error}")
                return
            since = state["since"]
            since.append(f.reward)
            if pace.due():
                self.log(
                    f"rollouts for RL step {state['step'] + 1}: {len(since)} finished, mean"
                    f" reward {sum(since) / len(since):.3f}; groups resampled in the run:"
                    f" {scheduler.stats.groups_resampled}"
                )
            self.store.add_rollout(
                f.spec.rollout_id,
                f.spec.group_id,
                f.spec.task_id,
                f.spec.sample,
                f.reward,
                f.versions,
                f.trajectory,
            )

        async def on_batch(batch: list[Group]) -> None:
            self.clock.add("rl:waiting_for_rollouts", time.perf_counter() - state["idle_from"])
            resampled = scheduler.stats.groups_resampled - state.get("resampled", 0)
            state["resampled"] = scheduler.stats.groups_resampled
            for g in scheduler.dropped:  # never to be trained: why, for a resume's budget
                ids = [x.spec.rollout_id for x in g.rollouts]
                self.store.mark_trained(ids, DROPPED[g.dropped_as or "stale"])
            scheduler.dropped.clear()
            state["step"] += 1
            state["since"] = []
            await self._train_step(state["step"], batch, resampled)
            state["idle_from"] = time.perf_counter()

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
        if (done := state["step"]) < cfg.train.steps:  # dropped groups are not replaced
            self.log(f"RL ended after {done} of {cfg.train.steps} steps ({scheduler.stats.lost()})")
            if done % cfg.train.checkpoint_every:  # keep the last step's weights
                self._save_step(done)

    async def _train_step(self, step: int, batch: list[Group], resampled: int = 0) -> None:
        from cheetah.rl.step_batch import build_step_batch

        b = build_step_batch(batch, self.tokenizer, self.cfg.train.max_seq_len, resampled)
        metrics, samples, ids = b.metrics, b.samples, b.rollout_ids
        if b.has_signal:
            metrics["lr"] = self.cfg.train.rl_lr_of(step - 1)
            self.trainer.set_lr(metrics["lr"])
            with self.clock.phase("rl:trainer_steps"):
                m = await abandonable(self.trainer.rl_step, samples)
            metrics.update({f"train_{k}": v for k, v in m.as_dict().items()})
            self._note_slow(m.step_s)
            t0 = time.perf_counter()
            with self.clock.phase("rl:weight_sync"):
                await self.trainer.sync_to(self.sync_targets)
            metrics["weight_sync_s"] = time.perf_counter() - t0
        else:
            metrics["train_skipped_no_signal"] = 1.0  # every group had equal rewards
        self.store.mark_trained(ids, step)
        t = self.cfg.train
        if t.eval_every and step % t.eval_every == 0 and step < t.steps:  # the learning curve
            stage = await self.evaluate(f"rl-{step}")
            if stage is not None:
                metrics.update(curve_metrics(stage))
        self.store.log_metrics(step, metrics)
        for logger in self.loggers:
            logger.log_metrics(step, metrics)
        stats = (
            f"reward {metrics['reward_mean']:.3f}  pass {metrics['pass_rate']:.3f}  "
            f"calls ok {metrics.get('call_success', 0.0):.3f}  loss {metrics.get('train_loss', 0.0):.4f}"
            f"  cut: {metrics['turns_cut_by_max_new_tokens']:.0f} turns by max_new_tokens "
            f"({metrics['rollouts_ended_by_max_new_tokens']:.0f} rollouts ended there), "
            f"{metrics['samples_cut_by_max_seq_len']:.0f} samples by max_seq_len, "
            f"flagged: {metrics.get('grade_flagged', 0):.0f} rollouts reaching for the test runner"
        )
        if self._bar is not None:
            bar, task = self._bar
            bar.update(task, completed=step, stats=stats)
        self.log(f"step {step}: {stats}")
        if step % self.cfg.train.checkpoint_every == 0 or step == self.cfg.train.steps:
            self._save_step(step)

    def _note_slow(self, step_s: float) -> None:
        if step_s > SLOW_STEP_S and not self._told_slow:
            self._told_slow = True
            self.log(
                f"slow step ({step_s:.0f} s): run `cheetah doctor` to see what this machine "
                "does fast"
            )

    def _save_step(self, step: int) -> None:
        self.trainer.save_checkpoint(self.dir / "checkpoints" / f"step-{step}", {"step": step})

    async def sft_only(self) -> Path:
        """``cheetah sft``: the warm start alone, saved as a checkpoint."""
        self.start()
        try:
            await self.sft()
        finally:
            self.close()
        return self.trainer.save_checkpoint(self.dir / "checkpoints" / "sft", {"step": 0})

    async def _stage(self, label: str) -> dict[str, Any] | None:
        """A held-out stage; on ``--resume``, the one the store already holds if any."""
        held = self.store.get_meta(f"stage_{label}") if self.resume else None
        return held or await self.evaluate(label)

    async def _warm_start(self) -> None:
        """SFT, saved as ``checkpoints/sft``. On ``--resume`` that checkpoint comes back
        instead (unless an RL checkpoint exists: ``_resume_state`` loads the newest)."""
        checkpoint = self.dir / "checkpoints" / "sft"
        if self.resume and checkpoint.exists():
            if not any((self.dir / "checkpoints").glob("step-*")):
                self.trainer.load_checkpoint(checkpoint)
                await self.trainer.sync_to(self.sync_targets)
                self.log(f"resumed the SFT warm start from {checkpoint}")
            return
        await self.sft()
        self.trainer.save_checkpoint(checkpoint, {"step": 0})

    def _curve_stages(self) -> dict[int, dict[str, Any]]:
        """The held-out stages run during RL (``train.eval_every``), by step."""
        every, steps = self.cfg.train.eval_every, self.cfg.train.steps
        if not every:
            return {}
        found = {k: self.store.get_meta(f"stage_rl-{k}") for k in range(every, steps, every)}
        return {k: s for k, s in found.items() if s is not None}

    # -- the whole job ------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        """The whole job; ``Stopped`` when SIGTERM or SIGINT ended it (``cheetah/stop.py``), with
        everything it started closed."""
        try:
            async with stop_on_signal() as stop:
                with self.clock.phase("startup"):
                    self.start(stop)
                return await self._run()
        except Stopped as stopped:
            self.log(f"{stopped}: closing the run (`--resume` continues from its checkpoint)")
            raise
        finally:
            self.close()

    async def _run(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        stages = [await self._stage("base")]
        if self.cfg.train.sft_steps > 0:
            await self._warm_start()
            stages.append(await self._stage("sft"))
        await self.rl()
        stages.append(await self.evaluate("rl"))
        plot_curves(self.store, self.dir / "reward.png")
        stages = [s for s in stages if s is not None]
        summary = summarize(stages)
        r = self.cfg.rollout
        curve = learning_curve(
            stages, self._curve_stages(), self.cfg.train.steps, r.groups_per_step * r.group_size
        )
        plot_learning_curve(curve, self.dir / "learning.png")
        summary.update(
            {
                "learning_curve": curve,
                "pass_rate_before": stages[0]["pass_rate"] if stages else float("nan"),
                "pass_rate_after": stages[-1]["pass_rate"] if stages else float("nan"),
                "rollouts": self.store.count(),
                "wall_s": time.perf_counter() - t0,
                "run_dir": str(self.dir),
                "time_breakdown": breakdown(self.clock.seconds, self.clock.wall_s()),
                "precision": {
                    "requested": self.cfg.train.precision,
                    "chosen": self.trainer.precision.dtype,
                    "reason": self.trainer.precision.reason,
                    "warning": self.trainer.precision.warning,
                },
            }
        )
        self.store.set_meta("summary", summary)
        (self.dir / "summary.json").write_text(json.dumps(summary, indent=1))
        if summary["stages"]:
            self.log(table(summary))
            self.log(time_table(summary["time_breakdown"]))
            for logger in self.loggers:
                logger.log_summary(summary, table(summary))
        return summary
