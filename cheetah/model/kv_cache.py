"""Helpers for driving a transformers model's KV cache by hand, shared by the engine's
batch (``inference/batch.py``) and the trainer's shared-prefix forward (``rl/trainer.py``).

transformers 5 renamed the forward's ``past_key_values`` argument (and output field) to
``cache``; these accept models of either era.
"""

from __future__ import annotations

import inspect
from typing import Any

from transformers.cache_utils import DynamicCache, DynamicLayer


def cache_keyword(module: Any) -> str:
    """The name of ``module.forward``'s cache argument: ``cache`` or ``past_key_values``."""
    params = inspect.signature(module.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def cache_of(output: Any) -> Any:
    """The cache a forward returned, under either name."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def cache_with(config: Any, layers: list[DynamicLayer]) -> DynamicCache:
    """A ``DynamicCache`` for ``config`` whose per-layer storage is ``layers``."""
    cache = DynamicCache(config=config)
    cache.layers = layers
    return cache


def num_cache_layers(config: Any) -> int:
    return len(DynamicCache(config=config).layers)
