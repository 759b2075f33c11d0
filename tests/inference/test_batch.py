"""KVBatch: merging, dropping and trimming rows keeps every row's logits exact."""

from __future__ import annotations

import pytest
import torch

from cheetah.inference.batch import KVBatch


def _next_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1]


@pytest.mark.parametrize("in_place", [True, False])
def test_rows_of_different_lengths_merge_and_trim_without_changing_logits(tiny, in_place):
    model = tiny.model
    batch: KVBatch[str] = KVBatch(model, pad_id=2, in_place=in_place)
    a, b = [1, 520, 9531], [1, 9690, 198, 2683, 359, 253, 5356, 5646]
    with torch.inference_mode():
        logits = batch.prefill(["a"], [a])
        assert torch.allclose(logits[0], _next_logits(model, a), atol=1e-4)
        a = [*a, 7]
        batch.decode([7])
        logits = batch.prefill(["b"], [b])  # wider: "a" gets left padding
        assert batch.rows == ["a", "b"] and batch.width == len(b)
        assert torch.allclose(logits[0], _next_logits(model, b), atol=1e-4)
        logits = batch.decode([11, 13])
        a, b = [*a, 11], [*b, 13]
        assert torch.allclose(logits[0], _next_logits(model, a), atol=1e-4)
        assert torch.allclose(logits[1], _next_logits(model, b), atol=1e-4)
        batch.keep([0])  # "b" leaves; the padding it forced on "a" is trimmed
        assert batch.rows == ["a"] and batch.width == len(a)
        logits = batch.decode([17])
        assert torch.allclose(logits[0], _next_logits(model, [*a, 17]), atol=1e-4)
        batch.keep([])
        assert len(batch) == 0 and batch.width == 0


def test_decode_appends_into_spare_room_instead_of_copying_the_cache(tiny):
    batch: KVBatch[int] = KVBatch(tiny.model, pad_id=2)
    with torch.inference_mode():
        batch.prefill([0, 1], [[1, 2, 3], [4, 5]])
        batch.decode([6, 7])
        layer = batch._cache.layers[0]
        buffer = layer._kbuf.data_ptr()
        for step in range(5):
            batch.decode([8 + step, 9 + step])
        assert layer._kbuf.data_ptr() == buffer
        assert layer.keys.data_ptr() == buffer and layer.keys.shape[2] == 3 + 6


def test_a_row_with_a_cached_prefix_is_compacted_to_its_real_length(tiny):
    """In the group's cache a row is [prefix][gap][prompt]; in the batch it has no gap."""
    model = tiny.model
    batch: KVBatch[str] = KVBatch(model, pad_id=2)
    short_prefix, long_prefix = [1, 520], [1, 9690, 198, 2683, 359, 253]
    short_rest, long_rest = [9531, 198, 2683, 359, 253, 5356], [5646]
    with torch.inference_mode():
        batch.prefill(["p"], [long_prefix])
        prefix_long = batch.row_kv(0, 0, len(long_prefix))
        batch.keep([])
        batch.prefill(["q"], [short_prefix])
        prefix_short = batch.row_kv(0, 0, len(short_prefix))
        batch.keep([])
        logits = batch.prefill(["a", "b"], [short_rest, long_rest], [[prefix_short], [prefix_long]])
        a, b = short_prefix + short_rest, long_prefix + long_rest
        # the group's cache was len(long_prefix) + len(short_rest) wide; the batch is not
        assert batch.width == max(len(a), len(b)) < len(long_prefix) + len(short_rest)
        assert torch.allclose(logits[0], _next_logits(model, a), atol=1e-4)
        assert torch.allclose(logits[1], _next_logits(model, b), atol=1e-4)
        logits = batch.decode([7, 11])
        assert torch.allclose(logits[0], _next_logits(model, [*a, 7]), atol=1e-4)
        assert torch.allclose(logits[1], _next_logits(model, [*b, 11]), atol=1e-4)


def test_rows_leave_and_come_back_in_place_with_exact_logits(tiny):
    """A leaving row's slot is filled by the last row and a row no wider than the batch is
    merged into a free slot, without copying the running rows; every row's logits stay those
    of the model run on its tokens alone, and a wider row still gets fresh buffers."""
    model = tiny.model
    batch: KVBatch[str] = KVBatch(model, pad_id=2)
    seqs = {
        "a": [1, 520, 9531, 198],
        "b": [1, 9690, 198, 2683, 359, 253, 5356, 5646],
        "c": [1, 2683, 359],
        "d": [1, 253, 5356, 5646, 198, 520],
    }
    with torch.inference_mode():
        batch.prefill(list(seqs), list(seqs.values()))
        held = batch._cache.layers[0]._kbuf  # held: a freed buffer's address could come back
        buffer = held.data_ptr()
        batch.keep([1, 2, 3])  # "a" leaves: "d" moves into its slot, "b" keeps the width
        assert sorted(batch.rows) == ["b", "c", "d"] and batch.rows[0] == "d"
        assert batch.width == len(seqs["b"])
        e = [1, 9531, 198, 2683, 359]
        batch.prefill(["e"], [e])  # narrower than the batch: into the free slot
        seqs["e"] = e
        layer = batch._cache.layers[0]
        assert layer._kbuf.data_ptr() == buffer and layer.keys.data_ptr() == buffer
        for step in range(3):
            tokens = [11 + step + i for i in range(len(batch))]
            logits = batch.decode(tokens)
            for row, (name, token) in enumerate(zip(batch.rows, tokens, strict=True)):
                seqs[name] = [*seqs[name], token]
                want = _next_logits(model, seqs[name])
                assert torch.allclose(logits[row], want, atol=1e-4), (name, step)
        assert batch._cache.layers[0]._kbuf.data_ptr() == buffer
        batch.keep([batch.rows.index("e"), batch.rows.index("c")])  # rows gives the new order
        assert sorted(batch.rows) == ["c", "e"]
        f = [1, *range(600, 620)]  # wider than the batch: fresh buffers
        batch.prefill(["f"], [f])
        seqs["f"] = f
        assert batch._cache.layers[0]._kbuf.data_ptr() != held.data_ptr()
        assert batch.width == len(f)
        tokens = [7 + i for i in range(len(batch))]
        logits = batch.decode(tokens)
        for row, (name, token) in enumerate(zip(batch.rows, tokens, strict=True)):
            want = _next_logits(model, [*seqs[name], token])
            assert torch.allclose(logits[row], want, atol=1e-4), name


def test_a_random_schedule_of_joins_decodes_and_leaves_matches_the_model(tiny):
    """Rows join (prefixes of random widths), decode and leave in a random order, in place
    and by copying: at every step each row's logits are those of the model on its tokens."""
    import random

    model, rng = tiny.model, random.Random(0)
    batches = {mode: KVBatch(model, pad_id=2, in_place=mode) for mode in (True, False)}
    seqs: dict[bool, dict[int, list[int]]] = {True: {}, False: {}}
    name = 0
    with torch.inference_mode():
        for _ in range(80):
            action = rng.random()
            if action < 0.3 and len(batches[True]) < 6:
                group = rng.randint(1, 3)
                prompts = [
                    [1, *rng.choices(range(3, 900), k=rng.randint(1, 30))] for _ in range(group)
                ]
                names = list(range(name, name + group))
                for mode, batch in batches.items():
                    batch.prefill(names, prompts)
                    seqs[mode].update({n: list(p) for n, p in zip(names, prompts, strict=True)})
                name += group
            elif action < 0.5 and len(batches[True]):
                leave = set(rng.sample(batches[True].rows, rng.randint(1, len(batches[True]))))
                for batch in batches.values():
                    batch.keep([i for i, r in enumerate(batch.rows) if r not in leave])
            elif len(batches[True]):
                token = {r: rng.randint(3, 900) for r in batches[True].rows}
                for mode, batch in batches.items():
                    logits = batch.decode([token[r] for r in batch.rows])
                    for row, r in enumerate(batch.rows):
                        seqs[mode][r].append(token[r])
                        want = _next_logits(model, seqs[mode][r])
                        assert torch.allclose(logits[row], want, atol=1e-4), (mode, r)
        assert sorted(batches[True].rows) == sorted(batches[False].rows)
