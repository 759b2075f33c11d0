"""``KVBatch``: the running rows of a ``LocalEngine`` in one left-padded KV cache.

Every row's tokens end at the same (rightmost) column; shorter rows are padded on the left
and masked out. That keeps the model's own forward usable as is: one new token per row per
decode step, a 2-D attention mask, and explicit ``position_ids`` (each row counts only its
real tokens, so padding never shifts RoPE positions). Rows are prefilled in a group of their
own; a group may start from cached prefix KV (``prefix_cache``, copied in; ``row_kv`` copies a
row's KV out), so in the group's cache a row is [its prefix][padding][the rest of its prompt].
Merging compacts each new row (its real columns gathered to the right end, the gap dropped)
into fresh buffers holding the running rows too, so the batch is exactly as wide as its
longest row: padding costs memory and attention in every later decode step. Copying the
whole batch costs about as much as a decode step, and in an agent's rollouts a row leaves and
comes back (its next turn) every few dozen tokens, so both are done in place where they can:
a finished row's slot is filled by the last row, and a row that is no wider than the batch is
merged into a free slot. Only a merge of a wider row, or a drop that leaves an eighth of the
columns as leading padding, copies the running rows into fresh buffers (layer by layer, so at
most one layer's old buffers are alive beside the new ones).

The cache is a transformers ``DynamicCache`` whose per-layer ``keys``/``values`` we edit
directly. Its layers are ``_SpareLayer``s: the stock layer re-concatenates the whole cache on
every decode step (a copy of every row's keys and values per layer per token, a visible
share of a CPU decode step); ours appends into spare capacity and hands
out views.
Left out: paged blocks, sharing KV memory between rows, and sliding-window layers.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

from cheetah.model.kv_cache import cache_keyword, cache_of

Row = TypeVar("Row")
SPARE_COLUMNS = 64  # room added whenever a layer's buffer must grow


class KVBatch(Generic[Row]):
    def __init__(self, model: Any, pad_id: int, in_place: bool = True) -> None:
        self.model = model
        self.in_place = in_place  # False: every drop and merge copies (bench/kv_in_place.py)
        self.pad_id = pad_id
        self.device = next(model.parameters()).device  # inputs follow the model
        self._cache_kw = cache_keyword(model)
        self.rows: list[Row] = []
        self._cache: Any = None
        self._mask: torch.Tensor | None = None  # [rows, columns], 1 = real token
        self._positions: torch.Tensor | None = None  # [rows], position id of the next token

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def width(self) -> int:
        """Cache columns (the longest row plus left padding)."""
        return 0 if self._mask is None else int(self._mask.shape[1])

    def prefill(
        self,
        rows: list[Row],
        prompts: list[list[int]],
        prefixes: list[list[torch.Tensor]] | None = None,
    ) -> torch.Tensor:
        """Run ``prompts`` as a group, add them as rows, return their next-token logits.

        ``prefixes[i]``, if given, is the KV of the tokens before ``prompts[i]``, in pieces
        (``[layers, 2, kv_heads, length, head_dim]`` each, from ``prefix_cache``): they are
        not run again, and ``prompts[i]`` continues at position ``sum of lengths``. The
        group's cache is [prefixes, left-padded to the longest][prompts, left-padded to the
        longest], so a row may have padding in the middle; the mask hides it and positions
        count real tokens only.
        """
        n, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, prompt in enumerate(prompts):
            ids[i, width - len(prompt) :] = torch.tensor(prompt)
            mask[i, width - len(prompt) :] = 1
        cache = self._new_cache()
        past = self._load_prefixes(cache, prefixes or [[]] * n, room=width + SPARE_COLUMNS)
        mask = torch.cat([past, mask], 1)
        ids, mask, past = ids.to(self.device), mask.to(self.device), past.to(self.device)
        positions = past.sum(-1, keepdim=True) + mask[:, past.shape[1] :].cumsum(-1) - 1
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions.clamp(min=0),
            use_cache=True,
            logits_to_keep=1,
            **{self._cache_kw: cache},
        )
        self._merge(rows, cache_of(out), mask)
        return out.logits[:, -1, :]

    def _load_prefixes(
        self, cache: Any, prefixes: list[list[torch.Tensor]], room: int
    ) -> torch.Tensor:
        """Copy the prefixes, left-padded, into the empty ``cache`` with ``room`` spare columns
        (so the prompts' KV is written in place); return their mask."""
        lengths = [sum(int(piece.shape[-2]) for piece in pieces) for pieces in prefixes]
        width = max(lengths)
        mask = torch.zeros((len(prefixes), width), dtype=torch.long)
        if width == 0:
            return mask
        first = next(pieces[0] for pieces in prefixes if pieces)
        layers, _, heads, _, dim = first.shape
        kv = first.new_zeros((layers, 2, len(prefixes), heads, width + room, dim))
        for i, (pieces, length) in enumerate(zip(prefixes, lengths, strict=True)):
            column = width - length
            mask[i, column:width] = 1
            for piece in pieces:  # all layers of a piece in one copy
                kv[:, :, i, :, column : column + piece.shape[-2]] = piece
                column += piece.shape[-2]
        for layer, (keys, values) in zip(cache.layers, kv, strict=True):
            layer.preload(keys, values, width)
        return mask

    def row_kv(self, row: int, start: int, end: int) -> torch.Tensor:
        """KV of a row's real tokens ``start:end`` as ``[layers, 2, kv_heads, end - start, dim]``."""
        assert self._mask is not None
        columns = self._mask[row].nonzero().squeeze(1)[start:end]
        assert len(columns) == end - start, "the row holds fewer tokens than asked for"
        return torch.stack(
            [
                torch.stack([layer.keys[row][:, columns], layer.values[row][:, columns]])
                for layer in self._cache.layers
            ]
        )

    @property
    def reusable(self) -> bool:
        """Whether every layer keeps all tokens (no sliding window), so ``row_kv`` is whole."""
        return all(type(layer) is _SpareLayer for layer in self._new_cache().layers)

    def decode(self, last_tokens: list[int]) -> torch.Tensor:
        """Feed each row its last sampled token; return next-token logits, one row each."""
        assert self._mask is not None and self._positions is not None
        ones = torch.ones((len(self.rows), 1), dtype=torch.long, device=self.device)
        mask = torch.cat([self._mask, ones], 1)
        out = self.model(
            input_ids=torch.tensor(last_tokens, dtype=torch.long, device=self.device)[:, None],
            attention_mask=mask,
            position_ids=self._positions[:, None],
            use_cache=True,
            **{self._cache_kw: self._cache},
        )
        self._cache, self._mask = cache_of(out), mask
        self._positions = self._positions + 1
        return out.logits[:, -1, :]

    def _new_cache(self) -> DynamicCache:
        cache = DynamicCache(config=self.model.config)
        cache.layers = [
            _SpareLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers
        ]
        return cache

    def keep(self, indices: list[int]) -> None:
        """Keep only these rows; ``rows`` gives their new order.

        In place where it can: a leaving row's slot is filled by a kept row from the end
        (one row copied per leaving row, not the whole batch) and the buffers keep their row
        capacity, so a row coming back (an agent's next turn) is merged in place too. Only
        when the kept rows leave at least an eighth of the columns as leading padding are
        they copied into fresh, narrower buffers (the padding costs attention in every
        later step)."""
        if len(indices) == len(self.rows):
            return
        if not indices:
            self.clear()
            return
        assert self._mask is not None and self._positions is not None
        n = len(indices)
        holes = sorted(set(range(n)) - set(indices))
        movers = [i for i in indices if i >= n]
        order = [*range(n)]
        for hole, src in zip(holes, movers, strict=True):
            order[hole] = src
        index = torch.tensor(order, dtype=torch.long, device=self.device)
        mask = self._mask[index]
        start = int((mask.sum(0) > 0).nonzero()[0])
        layers = self._cache.layers
        if (
            self.in_place
            and 8 * start < mask.shape[1]
            and all(isinstance(x, _SpareLayer) for x in layers)
        ):
            for layer in layers:
                layer.move_rows(holes, movers, n)
        else:
            width = mask.shape[1] - start
            for layer in layers:  # layer by layer: one layer's old buffer at a time
                keys = _buffer_like(layer.keys, n, width)
                values = _buffer_like(layer.values, n, width)
                keys[:, :, :width] = layer.keys[index, :, start:]
                values[:, :, :width] = layer.values[index, :, start:]
                _preload(layer, keys, values, width)
            mask = mask[:, start:]
        self._mask = mask
        self._positions = self._positions[index]
        self.rows = [self.rows[i] for i in order]

    def clear(self) -> None:
        self.rows, self._cache, self._mask, self._positions = [], None, None, None

    def _merge(self, rows: list[Row], cache: Any, mask: torch.Tensor) -> None:
        """Append a prefilled group's rows, compacted: each row's real tokens are moved to
        the right end (the group's cache may pad between a cached prefix and the prompt), so
        the batch is as wide as its longest row and no wider."""
        lengths = mask.sum(-1)
        new_width = int(lengths.max())
        # column j of a compacted row (right-aligned, length L) is the row's (j - width + L)-th
        # real column; columns left of it are padding (they read column 0, zeroed below)
        real = torch.sort(mask * torch.arange(1, mask.shape[1] + 1, device=mask.device), -1)[0]
        gather = (real[:, -new_width:] - 1).clamp(min=0)
        keep = (real[:, -new_width:] > 0).to(mask.dtype)
        old = len(self.rows)
        width = max(self.width, new_width)
        total = old + len(rows)
        targets = cache.layers if self._cache is None else self._cache.layers
        in_place = (
            self.in_place
            and self._cache is not None
            and new_width <= self.width
            and all(isinstance(x, _SpareLayer) and x.spare_rows() >= len(rows) for x in targets)
        )
        for into, new in zip(targets, cache.layers, strict=True):  # into is new for a first group
            if in_place:  # into the slots of rows that left: the running rows are not copied
                added = []
                for name in ("keys", "values"):
                    src = getattr(new, name)
                    buf = src.new_empty((len(rows), src.shape[1], width, src.shape[3]))
                    _write_compacted(buf, src, gather, keep)
                    added.append(buf)
                into.add_rows(added[0], added[1])
                continue
            merged = []
            for name in ("keys", "values"):
                src = getattr(new, name)
                buf = _buffer_like(src, total, width)
                if old:  # padding is masked out, but must not be NaN: zeros
                    buf[:old, :, : width - self.width] = 0
                    buf[:old, :, width - self.width : width] = getattr(into, name)
                _write_compacted(buf[old:, :, :width], src, gather, keep)
                merged.append(buf)
            _preload(into, merged[0], merged[1], width)
        compact = torch.zeros((len(rows), width), dtype=mask.dtype, device=mask.device)
        compact[:, width - new_width :] = keep
        if self._cache is None:
            self.rows, self._cache = list(rows), cache
            self._mask, self._positions = compact, lengths
            return
        assert self._mask is not None and self._positions is not None
        self._mask = torch.cat([_left_pad(self._mask, width), compact], 0)
        self._positions = torch.cat([self._positions, lengths])
        self.rows.extend(rows)


class _SpareLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``update`` writes into spare room of larger buffers.

    ``keys``/``values`` are views of ``[:rows, :, :length]`` of the buffers: spare columns
    for the tokens to come, spare rows for rows merged in later (``KVBatch.keep`` leaves the
    slots of rows that left). Whenever something else assigns them (``KVBatch`` merging into
    fresh buffers), they no longer start the buffer, and the next update copies them into a
    fresh one with ``SPARE_COLUMNS`` of room.
    """

    _kbuf: torch.Tensor | None = None
    _vbuf: torch.Tensor | None = None

    def preload(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        """Start from the first ``length`` columns of these buffers; the rest is spare room."""
        self.device, self.is_initialized = keys.device, True
        self._kbuf, self._vbuf = keys, values
        self.keys, self.values = keys[:, :, :length], values[:, :, :length]

    def _owns_views(self) -> bool:
        """Whether ``keys``/``values`` are still ``[:rows, :, :length]`` of the buffers."""
        k, v, kbuf, vbuf = self.keys, self.values, self._kbuf, self._vbuf
        return (
            kbuf is not None
            and vbuf is not None
            and k is not None
            and v is not None
            and kbuf.data_ptr() == k.data_ptr()
            and vbuf.data_ptr() == v.data_ptr()
            and kbuf.stride() == k.stride()
            and vbuf.stride() == v.stride()
            and k.shape[0] <= kbuf.shape[0]
            and k.shape[1] == kbuf.shape[1]
        )

    def spare_rows(self) -> int:
        """Rows that can be added in place (0 when the views do not own the buffers)."""
        if not self._owns_views():
            return 0
        assert self._kbuf is not None and self.keys is not None
        return int(self._kbuf.shape[0] - self.keys.shape[0])

    def move_rows(self, holes: list[int], movers: list[int], rows: int) -> None:
        """Copy row ``movers[i]`` into slot ``holes[i]`` and keep the first ``rows`` rows."""
        assert self.keys is not None and self.values is not None
        length = self.keys.shape[2]
        if not self._owns_views():
            self.preload(self.keys.clone(), self.values.clone(), length)
        assert self._kbuf is not None and self._vbuf is not None
        for hole, src in zip(holes, movers, strict=True):
            self._kbuf[hole, :, :length] = self._kbuf[src, :, :length]
            self._vbuf[hole, :, :length] = self._vbuf[src, :, :length]
        self.keys = self._kbuf[:rows, :, :length]
        self.values = self._vbuf[:rows, :, :length]

    def add_rows(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Write ``keys``/``values`` (as wide as the layer) into the next spare rows."""
        assert self.keys is not None and self._kbuf is not None and self._vbuf is not None
        rows, length = self.keys.shape[0], self.keys.shape[2]
        total = rows + keys.shape[0]
        self._kbuf[rows:total, :, :length] = keys
        self._vbuf[rows:total, :, :length] = values
        self.keys = self._kbuf[:total, :, :length]
        self.values = self._vbuf[:total, :, :length]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized or self.keys is None or self.keys.numel() == 0:
            return super().update(key_states, value_states, *args, **kwargs)
        rows, n, add = self.keys.shape[0], self.keys.shape[-2], key_states.shape[-2]
        if not self._owns_views() or n + add > self._kbuf.shape[-2]:  # type: ignore[union-attr]
            # spare rows are kept: the rows that left may come back for their next turn
            capacity = self._kbuf.shape[0] if self._owns_views() else rows  # type: ignore[union-attr]
            self._kbuf = _with_room(self.keys, capacity, n + add + SPARE_COLUMNS)
            self._vbuf = _with_room(self.values, capacity, n + add + SPARE_COLUMNS)
        assert self._kbuf is not None and self._vbuf is not None
        self._kbuf[:rows, :, n : n + add] = key_states
        self._vbuf[:rows, :, n : n + add] = value_states
        self.keys = self._kbuf[:rows, :, : n + add]
        self.values = self._vbuf[:rows, :, : n + add]
        return self.keys, self.values


def _write_compacted(
    dst: torch.Tensor, src: torch.Tensor, gather: torch.Tensor, keep: torch.Tensor
) -> None:
    """Write a prefilled group's KV ``src`` into ``dst`` (``[rows, heads, width, dim]``) with
    each row's real columns (``gather``, ``keep``) right-aligned and zeros to their left
    (padding is masked out, but must not be NaN)."""
    width, new_width = dst.shape[2], gather.shape[1]
    index = gather[:, None, :, None].expand(-1, src.shape[1], -1, src.shape[3])
    dst[:, :, : width - new_width] = 0
    dst[:, :, width - new_width :] = src.gather(2, index) * keep[:, None, :, None].to(src.dtype)


def _with_room(t: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
    buf = t.new_empty((rows, t.shape[1], columns, t.shape[3]))
    buf[: t.shape[0], :, : t.shape[2]] = t
    return buf


def _preload(layer: Any, keys: torch.Tensor, values: torch.Tensor, width: int) -> None:
    if isinstance(layer, _SpareLayer):
        layer.preload(keys, values, width)
    else:  # a layer type we do not manage (the module docstring leaves such models out)
        layer.keys, layer.values = keys[:, :, :width], values[:, :, :width]


def _buffer_like(t: torch.Tensor, rows: int, width: int) -> torch.Tensor:
    """An uninitialized KV buffer of ``rows`` rows, ``width`` columns and spare room."""
    return t.new_empty((rows, t.shape[1], width + SPARE_COLUMNS, t.shape[3]))


def _left_pad(mask: torch.Tensor, width: int) -> torch.Tensor:
    """Pad a ``[rows, columns]`` mask on the left with zeros to ``width`` columns."""
    missing = width - mask.shape[1]
    if missing == 0:
        return mask
    return torch.cat([mask.new_zeros((mask.shape[0], missing)), mask], 1)
