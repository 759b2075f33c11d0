"""What one trainer step runs: samples grouped into micro-batches, padded, and the forward
that returns logits only where a token is trained, running a shared prefix once.

``micro_batches`` groups samples (longest first) under a token budget; ``shared_prefix_len``
is how many leading tokens a micro-batch's rows share before any trained prediction;
``SelectedLogits`` is the forward (the decoder over every position, the LM head only at
trained positions) and ``_forward_shared_prefix`` its shared-prefix path: the prefix runs
once at batch 1 and the rows continue from its KV cache, with gradients flowing back
through that cache, so the result is the plain forward's. ``trainer.py`` owns the step
(loss, optimizer, weights and checkpoints) around it. Left out: packing
several samples into one row.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

from cheetah.model.kv_cache import cache_keyword, cache_with, num_cache_layers
from cheetah.rl.data import Sample


class SelectedLogits(torch.nn.Module):
    """The model's logits at the positions whose next token is trained, only: the decoder
    over every position, the LM head (a [hidden, vocab] matmul, 49k columns for SmolLM2)
    only where ``sel`` is set, about a tenth of an agent conversation. With ``prefix`` > 0
    the first ``prefix`` tokens (none of them predicts a trained token) run once for all
    rows (``_forward_shared_prefix``). One module, so that a sharded model gathers the
    embeddings and the head (tied or not) around this whole computation."""

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention: torch.Tensor, sel: torch.Tensor, prefix: int
    ) -> torch.Tensor:
        decoder = self.model.get_decoder()
        if prefix > 0:
            hidden = _forward_shared_prefix(decoder, input_ids, attention, prefix)
            hidden = hidden[:, :-1][sel[:, prefix:]]
        else:
            hidden = decoder(input_ids=input_ids, attention_mask=attention).last_hidden_state
            hidden = hidden[:, :-1][sel]
        return self.model.get_output_embeddings()(hidden)


def micro_batches(
    samples: list[Sample], max_tokens: int, share_prefix: bool = False
) -> list[list[Sample]]:
    """Group samples (longest first) so that the tokens a micro-batch runs stay under
    ``max_tokens`` (a sample longer than that runs alone).

    Padded to its longest sample, a micro-batch runs longest x count tokens; with
    ``share_prefix`` its shared prefix (``shared_prefix_len``) runs once, so it costs
    prefix + count x (longest - prefix), and more samples that start alike fit in one.
    """
    order = sorted(samples, key=lambda s: len(s.input_ids), reverse=True)
    out: list[list[Sample]] = []
    prefix = 0  # what the last group shares (its first sample's alone: its own cap)
    for s in order:
        if out:
            group = out[-1]
            longest = len(group[0].input_ids)
            shared = _shareable(group[0], s, prefix) if share_prefix else 0
            if shared + (len(group) + 1) * (longest - shared) <= max_tokens:
                group.append(s)
                prefix = shared
                continue
        out.append([s])
        prefix = _shareable(s, s, len(s.input_ids))
    return out


def shared_prefix_len(batch: list[Sample]) -> int:
    """How many leading tokens the decoder can run once for all of ``batch``: the longest
    common prefix, cut so that no position in it predicts a trained token (those need their
    own hidden state) and every sample keeps at least one token after it."""
    first = batch[0]
    n = len(first.input_ids)
    for s in batch:
        n = _shareable(first, s, n)
    return n


def _shareable(first: Sample, s: Sample, limit: int) -> int:
    """The prefix (at most ``limit`` tokens) that ``s`` shares with ``first``, cut before
    ``s``'s first trained prediction and its last token."""
    n = 0
    ids, ref, mask = s.input_ids, first.input_ids, s.loss_mask
    while n < limit and n + 1 < len(ids) and ids[n] == ref[n] and not mask[n + 1]:
        n += 1
    return n


def pad_batch(batch: list[Sample], pad_id: int) -> dict[str, torch.Tensor]:
    n = max(len(s.input_ids) for s in batch)

    def padded(rows, value, dtype):
        return torch.tensor([r + [value] * (n - len(r)) for r in rows], dtype=dtype)

    return {
        "input_ids": padded([s.input_ids for s in batch], pad_id, torch.long),
        "attention": padded([[1] * len(s.input_ids) for s in batch], 0, torch.long),
        "mask": padded([s.loss_mask for s in batch], 0, torch.float32),
        "behaviour": padded([s.behaviour_logprobs for s in batch], 0.0, torch.float32),
        "advantage": torch.tensor([s.advantage for s in batch], dtype=torch.float32),
    }


def _forward_shared_prefix(
    decoder: Any, ids: torch.Tensor, attention: torch.Tensor, prefix: int
) -> torch.Tensor:
    """The decoder's last hidden states at positions ``prefix`` onwards of every row of
    ``ids`` (right-padded, ``attention`` its [rows, columns] mask), running the first
    ``prefix`` tokens, the same in every row, once.

    The prefix runs at batch 1 into ``_PrefixKV`` layers; their keys and values, expanded
    (views) to the batch, serve the suffixes through ``_SharedPrefixKV`` layers, at
    positions continuing from the prefix. Autograd sees one graph: the gradients of the
    expanded views sum over the rows into the prefix pass, so this is the plain forward
    reordered, not an approximation. Neither layer type appends to what it holds, so the
    backward replay of a checkpointed layer computes what its forward did; that is why we
    may keep the cache under activation checkpointing, where HF drops it by default (its
    worry is a replay that appends a second time).
    """
    rows, n = ids.shape
    kw = cache_keyword(decoder)
    positions = torch.arange(n, device=ids.device)[None]
    with _cache_kept_under_checkpointing(decoder):
        held = cache_with(
            decoder.config, [_PrefixKV() for _ in range(num_cache_layers(decoder.config))]
        )
        decoder(input_ids=ids[:1, :prefix], position_ids=positions[:, :prefix], **{kw: held})
        shared = cache_with(
            decoder.config, [_SharedPrefixKV(x.keys, x.values, rows) for x in held.layers]
        )
        out = decoder(
            input_ids=ids[:, prefix:],
            attention_mask=attention,
            position_ids=positions[:, prefix:].expand(rows, -1),
            **{kw: shared},
        )
    return out.last_hidden_state


class _PrefixKV(DynamicLayer):
    """Holds the keys and values of one prefix pass (replaced, not appended, on a replay)."""

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys, self.values, self.is_initialized = key_states, value_states, True
        return key_states, value_states


class _SharedPrefixKV(DynamicLayer):
    """A prefix's keys and values seen by ``rows`` suffixes; each update returns them joined
    with the suffixes' own and keeps nothing."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, rows: int) -> None:
        super().__init__()
        self.keys, self.values = keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1)
        self.is_initialized, self.device = True, keys.device

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([self.keys, key_states], -2), torch.cat([self.values, value_states], -2)


@contextmanager
def _cache_kept_under_checkpointing(decoder: Any) -> Iterator[None]:
    """Let checkpointed layers keep the cache they are given (see ``_forward_shared_prefix``).
    The choice is made in each layer's forward, so restoring afterwards is safe."""
    layers = [m for m in decoder.modules() if hasattr(m, "_can_checkpoint_with_cache")]
    saved = [vars(m).get("_can_checkpoint_with_cache") for m in layers]
    for m in layers:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m, value in zip(layers, saved, strict=True):
            if value is None:
                del m._can_checkpoint_with_cache
            else:
                m._can_checkpoint_with_cache = value
