"""The inference engine as a Ray actor, and the ``Engine`` protocol over its handle.

``EngineActor`` hosts a ``LocalEngine`` in its own process (the trainer and the rollout
workers are other processes); ``RayEngine`` is what a rollout worker holds: ``generate`` and
``load_weights`` become actor calls. Weights travel as a state dict through Ray's object store.
Left out: several engine replicas behind one handle (the caller picks one per rollout).
"""

from __future__ import annotations

from typing import Any

import ray


@ray.remote
class EngineActor:
    """The inference engine in its own process; the trainer reaches it through Ray."""

    def __init__(
        self,
        spec: str,
        mxfp8: bool = False,
        device: str = "cpu",
        threads: int | None = None,
        **engine_args: Any,
    ) -> None:
        """``engine_args`` go to ``LocalEngine`` (``max_batch``, ``max_batch_tokens``, ...).
        ``threads``: torch's CPU threads here (Ray starts an actor that asks for no CPUs with
        ``OMP_NUM_THREADS=1``: one core for the run's critical path)."""
        import torch

        from cheetah.inference.local import LocalEngine  # torch only in the actor's process
        from cheetah.model.loading import load_policy

        if threads:
            torch.set_num_threads(threads)

        loaded = load_policy(spec, mxfp8)
        loaded.model.to(device)
        self.engine = LocalEngine.from_loaded(loaded, **engine_args)

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
