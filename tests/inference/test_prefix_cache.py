"""Prefix reuse: with the cache, outputs equal the no-cache engine's; hits, eviction, weights."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from cheetah.inference.batch import KVBatch
from cheetah.inference.local import LocalEngine
from cheetah.inference.prefix_cache import BLOCK, PrefixCache
from cheetah.inference.protocol import SamplingParams
from cheetah.model.loading import build_tiny

GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
SEEDED = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, seed=7, ignore_eos=True)


@pytest.fixture
def make_engine(tiny):
    engines = []

    def make(prefix_cache_tokens: int, model=None) -> LocalEngine:
        model = model if model is not None else copy.deepcopy(tiny.model)
        eng = LocalEngine(
            model, tiny.tokenizer, max_batch=8, prefix_cache_tokens=prefix_cache_tokens
        )
        engines.append(eng)
        return eng

    yield make
    for eng in engines:
        eng.close()


def _shared(tok) -> list[int]:
    """A 75-token prefix (not a multiple of BLOCK), like a system prompt."""
    ids = tok("You are a careful coding agent. Use the tools; answer briefly. " * 8)["input_ids"]
    return ids[:75]


def _queries(tok) -> list[list[int]]:
    texts = ["Fix the bug.", "Why is it slow?", "Add a test for parse().", "Rename foo to bar."]
    return [tok(t)["input_ids"] for t in texts]


async def _together(engine: LocalEngine, prompts, params) -> list:
    """Queue every request before the engine thread looks, so one step admits them all."""
    with engine._cond:  # reentrant: each ``_submit`` below takes it again on this thread
        tasks = [asyncio.create_task(engine.generate(p, params)) for p in prompts]
        while len(engine._waiting) < len(prompts):
            await asyncio.sleep(0)
    return await asyncio.gather(*tasks)


def _assert_same(outs, refs) -> None:
    for out, ref in zip(outs, refs, strict=True):
        assert out.token_ids == ref.token_ids
        assert out.logprobs == pytest.approx(ref.logprobs, abs=1e-4)


async def test_mixed_prefix_lengths_in_one_step_match_the_no_cache_engine(make_engine, tiny):
    tok = tiny.tokenizer
    shared, queries = _shared(tok), _queries(tok)
    cached, plain = make_engine(4096), make_engine(0)
    longer = shared + queries[0] + queries[1] * 3  # cached below, so it hits further
    await cached.generate([*shared, 13], GREEDY)
    await cached.generate(longer, GREEDY)
    before = cached.stats()
    prompts = [
        shared + queries[1],  # hits the shared blocks
        longer + queries[2],  # hits the longer prompt's blocks
        queries[3] * 9,  # misses
        shared[:40] + queries[2],  # hits fewer blocks
    ]
    for params in (GREEDY, SEEDED):
        _assert_same(
            await _together(cached, prompts, params), await _together(plain, prompts, params)
        )
    stats = cached.stats()
    reused = stats.prompt_tokens_reused - before.prompt_tokens_reused
    # the first pass hits 64 + 112 + 0 + 32 tokens; the second reuses what the first stored
    assert reused >= 64 + (len(longer) // BLOCK) * BLOCK + 32
    assert plain.stats().prompt_tokens_reused == 0 and plain.stats().prefix_cache_tokens == 0
    assert 0 < stats.prefix_hit_rate < 1


async def test_cached_requests_join_a_running_batch_exactly(make_engine, tiny):
    tok = tiny.tokenizer
    shared, queries = _shared(tok), _queries(tok)
    long = SamplingParams(temperature=0.0, max_tokens=150, ignore_eos=True)
    results = []
    for eng in (make_engine(4096), make_engine(0)):
        await eng.generate(shared + queries[0], GREEDY)  # warm the cache
        running = asyncio.create_task(eng.generate(queries[1] * 5, long))
        while eng.batch_size == 0:
            await asyncio.sleep(0.001)
        # greedy: the tiny model's next-token distribution is nearly flat, so a seeded draw can
        # land on a neighbouring token when the layouts' float rounding differs by 1e-6
        joined = await asyncio.gather(*[eng.generate(shared + q, GREEDY) for q in queries[1:]])
        results.append([*joined, await running])
    _assert_same(*results)


async def test_group_members_admitted_together_share_one_prefill(make_engine, tiny):
    tok = tiny.tokenizer
    prompt = _shared(tok) + _queries(tok)[0]
    cached, plain = make_engine(4096), make_engine(0)
    outs = await _together(cached, [prompt] * 4, SEEDED)
    _assert_same(outs, await _together(plain, [prompt] * 4, SEEDED))
    # one leader prefills it all; the three others find its blocks in the same step
    aligned = ((len(prompt) - 1) // BLOCK) * BLOCK
    assert cached.stats().prompt_tokens_reused == 3 * aligned


async def test_a_second_turn_reuses_the_first_turn_and_its_reply(make_engine, tiny):
    tok = tiny.tokenizer
    reply = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    turn1 = _shared(tok) + _queries(tok)[0]
    turn1 += [13] * ((-len(turn1) - reply.max_tokens) % BLOCK)  # prompt + reply fill blocks
    cached, plain = make_engine(4096), make_engine(0)
    first = await cached.generate(turn1, reply)
    _assert_same([first], [await plain.generate(turn1, reply)])
    turn2 = turn1 + first.token_ids + _queries(tok)[1]
    before = cached.stats().prompt_tokens_reused
    _assert_same([await cached.generate(turn2, GREEDY)], [await plain.generate(turn2, GREEDY)])
    # the KV of turn 1's prompt and reply but its last token (never fed back) was stored
    known = len(turn1) + len(first.token_ids) - 1
    assert (known // BLOCK) * BLOCK > (len(turn1) // BLOCK) * BLOCK, "premise: the reply counts"
    assert cached.stats().prompt_tokens_reused - before == (known // BLOCK) * BLOCK


async def test_a_tiny_budget_evicts_and_stays_exact(make_engine, tiny):
    tok = tiny.tokenizer
    shared, queries = _shared(tok), _queries(tok)
    cached, plain = make_engine(3 * BLOCK), make_engine(0)
    prompts = [q * 4 + shared for q in queries] + [shared + q for q in queries]
    for prompt in prompts:
        _assert_same(
            [await cached.generate(prompt, GREEDY)], [await plain.generate(prompt, GREEDY)]
        )
        assert cached.stats().prefix_cache_tokens <= 3 * BLOCK
    stats = cached.stats()
    assert stats.prefix_cache_evicted > 0 and stats.prompt_tokens_reused > 0


async def test_load_weights_invalidates_the_cache(make_engine, tiny):
    tok = tiny.tokenizer
    shared, queries = _shared(tok), _queries(tok)
    other = build_tiny(seed=99)
    cached = make_engine(4096)
    warm = await cached.generate(shared + queries[0], GREEDY)
    long = SamplingParams(temperature=0.0, max_tokens=300, ignore_eos=True)
    spanning = asyncio.create_task(cached.generate(shared + queries[1], long))
    while cached.batch_size == 0:
        await asyncio.sleep(0.001)
    await cached.load_weights(other.model.state_dict(), version=1)
    spanned = await spanning  # ran across the load: its KV mixes both weights, not stored
    assert spanned.policy_version == 0 and spanned.last_policy_version == 1
    assert cached.stats().prefix_cache_tokens == 0

    fresh = make_engine(4096, model=copy.deepcopy(other.model))
    prompts = [
        shared + queries[0] + warm.token_ids,
        shared + queries[1] + spanned.token_ids + queries[2],
        shared + queries[3],
    ]
    for prompt in prompts:
        _assert_same(
            [await cached.generate(prompt, GREEDY)], [await fresh.generate(prompt, GREEDY)]
        )
    assert cached.stats().prompt_tokens_reused > 0  # after the load, new KV is reused again


async def test_a_disabled_cache_stores_nothing(make_engine, tiny):
    plain = make_engine(0)
    prompt = _shared(tiny.tokenizer)
    for _ in range(2):
        out = await plain.generate(prompt, GREEDY)
        assert len(out.token_ids) == 12
    stats = plain.stats()
    assert stats.prompt_tokens == 2 * len(prompt)
    assert stats.prompt_tokens_reused == 0 and stats.prefix_cache_tokens == 0


def test_prefill_after_prefixes_of_different_lengths_gives_full_prefill_logits(tiny):
    model = tiny.model
    full = [[1, *range(100, 140)], [1, *range(200, 230)], [1, *range(300, 310)]]
    with torch.inference_mode():
        source: KVBatch[int] = KVBatch(model, pad_id=2)
        source.prefill([0, 1], [full[0], full[1]])
        prefixes = [[source.row_kv(0, 0, 32)], [source.row_kv(1, 0, 16), source.row_kv(1, 16, 24)]]
        batch: KVBatch[int] = KVBatch(model, pad_id=2)
        logits = batch.prefill([0, 1, 2], [full[0][32:], full[1][24:], full[2]], [*prefixes, []])
        for row, ids in enumerate(full):
            expected = model(torch.tensor([ids])).logits[0, -1]
            assert torch.allclose(logits[row], expected, atol=1e-4)
        decoded = batch.decode([5, 6, 7])
        for row, ids in enumerate(full):
            expected = model(torch.tensor([[*ids, 5 + row]])).logits[0, -1]
            assert torch.allclose(decoded[row], expected, atol=1e-4)


def test_lru_evicts_leaves_before_their_parents():
    cache = PrefixCache(capacity_tokens=4 * BLOCK)

    def kv(start: int, end: int) -> torch.Tensor:
        return torch.arange(start, end, dtype=torch.float32).view(1, 1, 1, -1, 1)

    a = list(range(3 * BLOCK))
    b = a[:BLOCK] + [7] * (2 * BLOCK)
    cache.insert(a, kv)
    cache.insert(b, kv)  # shares a's first block: 5 blocks wanted, 4 fit
    assert cache.tokens == 4 * BLOCK and cache.evicted_tokens == BLOCK
    assert cache.match(a, len(a)).length == 2 * BLOCK  # a's last block (a leaf) went
    assert cache.match(b, len(b)).length == 3 * BLOCK
    assert cache.match(b, len(b) - 1).length == 2 * BLOCK  # the limit is respected
    hit = cache.match(a, len(a))
    assert torch.equal(torch.cat(hit.kv(), dim=-2).flatten(), torch.arange(2.0 * BLOCK))
    cache.clear()
    assert cache.tokens == 0 and cache.match(a, len(a)).length == 0
