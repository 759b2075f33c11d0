"""Sharding the trainer's model with PyTorch's own FSDP2 (``fully_shard``) for data parallel
training: each rank holds a slice of every parameter, gradient and optimizer state, gathers
a layer's weights just before it runs, and gets its share of a step's samples
(``split_for_rank``). ``Trainer`` makes the step the same as one process's: the token mean is
over the whole batch and gradients are summed over ranks (``trainer._run``).

Units: one per decoder layer (gathered for its forward, freed after, gathered again for its
backward), and the root: ``batching.SelectedLogits`` around the model, the module the trainer's
step calls, which holds the embeddings, the final norm and the LM head (tied weights stay one
parameter in one unit). The model gets the wrapper as ``model.selected_logits``, where the
``Trainer`` looks for it.

State in and out (torch's ``torch.distributed.checkpoint`` helpers): ``full_state`` gathers
the whole model once (rank 0 keeps it on CPU: what engines load and what a checkpoint's HF
safetensors hold); ``load_full_state`` puts such a state back into the shards; the optimizer
state stays sharded on disk (DCP, one file per rank, in ``<checkpoint>/optimizer``), so no
rank ever holds all of it. Ranks must see one filesystem for checkpoints.

The process-group queries the trainer asks (``world_size``, ``rank``, sums and maxima over
ranks, ``barrier``) live here too; each answers for one process when no group is set up.

Deliberately left out: bf16 mixed-precision policies (autocast does the bf16 compute),
resuming a sharded optimizer at another world size (DCP can reshard; not tested), tensor
parallelism. ``tests/rl/test_sharding.py`` runs two gloo ranks on CPU against one process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import torch

T = TypeVar("T")
OPTIMIZER_DIR = "optimizer"


def shard_model(model: Any) -> Any:
    """Apply ``fully_shard`` to ``model`` (a HF causal LM) in place; returns it. Needs an
    initialized process group (gloo on CPU, nccl on GPUs)."""
    from torch.distributed.fsdp import fully_shard

    from cheetah.rl.batching import SelectedLogits

    for layer in model.get_decoder().layers:
        fully_shard(layer)
    root = SelectedLogits(model)
    fully_shard(root)
    object.__setattr__(model, "selected_logits", root)  # not a submodule: no cycle
    return model


def split_for_rank(items: list[T], rank: int, world: int) -> list[T]:
    """Rank ``rank``'s share of ``items`` (every ``world``-th, so shares differ by at most one;
    each rank must get at least one)."""
    if len(items) < world:
        raise ValueError(f"{len(items)} samples cannot feed {world} ranks (one each at least)")
    return items[rank::world]


def world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def sum_over_ranks(value):
    """``value`` (a float or a tensor) summed over the ranks; itself in one process."""
    if world_size() == 1:
        return value
    import torch.distributed as dist

    t = value.clone() if torch.is_tensor(value) else torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t)
    return t if torch.is_tensor(value) else float(t.item())


def max_over_ranks(value: float) -> float:
    if world_size() == 1:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def full_state(model: Any) -> dict[str, torch.Tensor]:
    """The whole model's weights on CPU at rank 0 (``{}`` elsewhere); every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=options)


def load_full_state(model: Any, state: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """Copy a whole state (every rank passes it) into the shards; (missing, unexpected)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    options = StateDictOptions(full_state_dict=True, strict=False)
    keys = set_model_state_dict(model, state, options=options)
    return list(keys.missing_keys), list(keys.unexpected_keys)


def save_optimizer(model: Any, opt: torch.optim.Optimizer, directory: Path) -> None:
    """Each rank writes its shard of the optimizer state under ``directory/optimizer``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state = {"optimizer": get_optimizer_state_dict(model, opt)}
    dcp.save(state, checkpoint_id=Path(directory) / OPTIMIZER_DIR)


def load_optimizer(model: Any, opt: torch.optim.Optimizer, directory: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    state = {"optimizer": get_optimizer_state_dict(model, opt)}  # the layout to fill
    dcp.load(state, checkpoint_id=Path(directory) / OPTIMIZER_DIR)
    set_optimizer_state_dict(model, opt, state["optimizer"])
