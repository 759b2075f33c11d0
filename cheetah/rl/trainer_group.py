"""``TrainerGroup``: ``train.world_size`` trainer ranks as Ray actors, one model sharded over
them (``rl/sharding.py``), driven like one ``Trainer``.

Each ``TrainerRank`` joins a torch process group (gloo on CPU, NCCL on GPUs: one GPU per rank
through Ray's placement), loads the policy, shards it and builds its ``Trainer``. The driver
calls the group as it calls a ``Trainer`` (``rl_step``, ``sft_step``, ``set_lr``, ``set_reference``,
``sync_to``, ``save_checkpoint``, ``load_checkpoint``, ``save_for_engines``); each call goes to
every rank at once, since every rank takes part in each step's collectives. A step's samples
are split by ``sharding.split_for_rank``; the metrics come back all-reduced, from rank 0.
Weight sync gathers the full state once, on rank 0, and hands engine actors its object
reference (the state never passes through the driver); HTTP engines get it through the
driver.

Why Ray actors with a process group rather than Ray Train's ``TorchTrainer`` or torchrun: an
RL driver calls the trainer step by step, between rollouts, and these are long-lived workers
it can call; ``TorchTrainer`` runs one training function to its end, and torchrun starts
processes outside the Ray cluster that then schedules rollouts and engines (veRL and
OpenRLHF build their trainer groups this way too). The rendezvous is torch's own
(``MASTER_ADDR``/``MASTER_PORT``: rank 0's node and a port free there, asked of rank 0 once
Ray has placed it). Deliberately left out: restarting a dead
rank in place (a run resumes from its last checkpoint), pipeline or tensor parallel groups.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import ray

from cheetah.core.ports import free_port
from cheetah.inference.ray_engine import RayEngine
from cheetah.rl.config import TrainConfig, TrainRunConfig
from cheetah.rl.data import Sample
from cheetah.rl.sharding import split_for_rank
from cheetah.rl.trainer import StepMetrics


@ray.remote
class TrainerRank:
    """One rank: its process group membership, its shard of the model, its ``Trainer``."""

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's answer: where the others meet it (this node's address, a port free here)."""
        return ray.util.get_node_ip_address(), free_port("")

    def join(
        self,
        rank: int,
        world: int,
        master: tuple[str, int],
        spec: str,
        mxfp8: bool,
        device: str,
        cfg: dict,
        temperature: float,
    ) -> None:
        import torch
        import torch.distributed as dist

        from cheetah.model.loading import load_policy
        from cheetah.rl.sharding import shard_model
        from cheetah.rl.trainer import Trainer

        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master[0], str(master[1])
        cuda = device.startswith("cuda")
        if cuda:
            torch.cuda.set_device(0)  # Ray gives each rank one GPU, seen as device 0
            device = "cuda"
        else:  # the ranks share the cores instead of each using all of them
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
        self.rank, self.world = rank, world
        loaded = load_policy(spec, mxfp8)
        loaded.model.to(device)
        shard_model(loaded.model)
        self.trainer = Trainer(
            loaded.model, loaded.tokenizer, TrainConfig.model_validate(cfg), temperature=temperature
        )

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.trainer, method)(*args)

    def step(self, objective: str, samples: list[Sample]) -> StepMetrics:
        mine = split_for_rank(samples, self.rank, self.world)
        return self.trainer.rl_step(mine) if objective == "rl" else self.trainer.sft_step(mine)

    def set_version(self, version: int) -> None:
        self.trainer.version = version

    def precision(self) -> Any:
        """The ``Choice`` this rank's trainer computes in (``model/precision.py``)."""
        return self.trainer.precision

    def counters(self) -> tuple[int, int]:
        return self.trainer.step_count, self.trainer.version

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


class TrainerGroup:
    """``world_size`` ranks behind ``Trainer``'s methods (the ones the RL job calls)."""

    def __init__(
        self,
        world_size: int,
        spec: str,
        cfg: TrainConfig,
        *,
        mxfp8: bool = False,
        device: str = "cpu",
        temperature: float = 1.0,
    ) -> None:
        if world_size < 2:
            raise ValueError("a TrainerGroup has 2 ranks or more (1: use Trainer)")
        self.world_size = world_size
        gpus = 1 if device.startswith("cuda") else 0
        self.ranks = [
            TrainerRank.options(num_cpus=0, num_gpus=gpus).remote() for _ in range(world_size)
        ]
        master = ray.get(self.ranks[0].rendezvous.remote())  # wherever Ray placed rank 0
        # the trainer's own settings (a run's TrainSection adds the job's: steps, loggers ...)
        settings = cfg.model_dump(mode="json", include=set(TrainConfig.model_fields))
        ray.get(
            [
                r.join.remote(i, world_size, master, spec, mxfp8, device, settings, temperature)
                for i, r in enumerate(self.ranks)
            ]
        )  # every rank is up (or this raised its error)
        self.precision = ray.get(self.ranks[0].precision.remote())  # each rank resolved its own
        self.step_count = 0
        self.version = 0

    def _all(self, name: str, *args: Any) -> list[Any]:
        return ray.get([getattr(r, name).remote(*args) for r in self.ranks])

    # -- the Trainer interface ---------------------------------------------------------
    def set_lr(self, lr: float) -> None:
        self._all("call", "set_lr", lr)

    def set_reference(self, spec: str, mxfp8: bool = False) -> None:
        self._all("call", "set_reference", spec, mxfp8)

    def rl_step(self, samples: list[Sample]) -> StepMetrics:
        return self._step("rl", samples)

    def sft_step(self, samples: list[Sample]) -> StepMetrics:
        return self._step("sft", samples)

    def _step(self, objective: str, samples: list[Sample]) -> StepMetrics:
        metrics = self._all("step", objective, samples)[0]
        metrics.samples = len(samples)  # rank 0 counted its share
        self.step_count += 1
        return metrics

    def logprobs(self, sample: Sample, temperature: float | None = None) -> list[float]:
        return self._all("call", "logprobs", sample, temperature)[0]

    def engine_state(self) -> dict:
        return self._all("call", "engine_state")[0]

    async def sync_to(self, engines: Any) -> float:
        """Gather the weights once (on rank 0) and load them into every engine."""
        t0 = time.perf_counter()
        self.version += 1
        refs = [r.call.remote("engine_state") for r in self.ranks]
        await asyncio.gather(*refs[1:])  # the other ranks' part of the gather (result: {})
        state = None
        for engine in engines:
            # Engine actors get rank 0's object reference (Ray resolves it in the actor; the
            # state never comes here); a RayEngine passes it on to its actor the same way.
            if isinstance(engine, RayEngine):
                await engine.load_weights(refs[0], self.version)
            elif hasattr(engine.load_weights, "remote"):
                await engine.load_weights.remote(refs[0], self.version)
            else:
                state = state if state is not None else await refs[0]
                await engine.load_weights(state, self.version)
        return time.perf_counter() - t0

    def save_for_engines(self, directory: Path) -> float:
        return self._all("call", "save_for_engines", Path(directory))[0]

    def save_checkpoint(self, directory: Path, cursor: dict[str, Any]) -> Path:
        self._all("set_version", self.version)
        return self._all("call", "save_checkpoint", Path(directory), cursor)[0]

    def load_checkpoint(self, directory: Path) -> dict[str, Any]:
        cursor = self._all("call", "load_checkpoint", Path(directory))[0]
        self.step_count, self.version = ray.get(self.ranks[0].counters.remote())
        return cursor

    def close(self) -> None:
        for r in self.ranks:
            ray.kill(r)
        self.ranks = []


def build_trainer(cfg: TrainRunConfig) -> tuple[Any, Any]:
    """A run's trainer and tokenizer: a ``Trainer`` in this process (``world_size`` 1), or a
    ``TrainerGroup`` (this process then loads the tokenizer only)."""
    from cheetah.model.loading import load_policy, tokenizer_for
    from cheetah.rl.trainer import Trainer

    t = cfg.train
    if t.world_size > 1:
        group = TrainerGroup(
            t.world_size,
            cfg.model.spec,
            t,
            mxfp8=t.mxfp8,
            device=cfg.model.device,
            temperature=cfg.rollout.temperature,
        )
        return group, tokenizer_for(cfg.model.spec)
    loaded = load_policy(cfg.model.spec, t.mxfp8)
    loaded.model.to(cfg.model.device)
    trainer = Trainer(loaded.model, loaded.tokenizer, t, temperature=cfg.rollout.temperature)
    return trainer, loaded.tokenizer
