"""LocalEngine: continuous batching matches per-request generation; sampling, stops, weights."""

from __future__ import annotations

import asyncio
import time

import pytest
import torch

from cheetah.inference.local import LocalEngine, TokenEvent
from cheetah.inference.protocol import (
    Completion,
    ContextTooLong,
    Engine,
    InvalidRequest,
    SamplingParams,
)
from cheetah.inference.sampling import sample
from cheetah.model.loading import CheckpointError, build_tiny

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


def _prompts(tok):
    texts = ["Hello there, how", "The capital of France is", "def f(x):\n    return", "1 2 3"]
    return [tok(t)["input_ids"] for t in texts] + [[1, 520, 9531, 198] * 7]


def _hf_greedy(model, prompt, n):
    out = model.generate(
        torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False
    )
    return out[0, len(prompt) :].tolist()


def _teacher_forced_logprobs(model, prompt, ids, temperature=1.0):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
    lp = torch.log_softmax(logits / temperature, -1)
    return lp[torch.arange(len(ids)), torch.tensor(ids)].tolist()


def test_local_engine_satisfies_the_engine_protocol(engine):
    assert isinstance(engine, Engine)
    assert engine.policy_version == 0


async def test_concurrent_requests_batch_and_match_hf_generate_per_request(engine, tiny):
    prompts = _prompts(tiny.tokenizer)
    outs = await asyncio.gather(*[engine.generate(p, GREEDY) for p in prompts])
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == _hf_greedy(tiny.model, prompt, 8)
        assert out.prompt_token_ids == prompt
        assert out.finish_reason == "length"
        assert out.policy_version == 0
    # one request alone takes 8 steps; five in turn would take 40; together they take 8, plus
    # at most one step per request that reached the engine thread a step late
    assert engine.steps <= 8 + len(prompts) - 1


async def test_requests_arriving_mid_batch_join_at_the_next_step(engine, tiny):
    prompts = _prompts(tiny.tokenizer)
    lengths = [300, 30, 20, 12, 6]  # the first outlives the arrival of all the others
    tasks = []
    for i, (prompt, n) in enumerate(zip(prompts, lengths, strict=True)):
        params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
        tasks.append(asyncio.create_task(engine.generate(prompt, params)))
        while engine.batch_size < i + 1:  # this one is in the running batch; send the next
            await asyncio.sleep(0.0005)
    outs = await asyncio.gather(*tasks)
    for prompt, out, n in zip(prompts, outs, lengths, strict=True):
        assert out.token_ids == _hf_greedy(tiny.model, prompt, n)  # left padding changed nothing
    assert engine.steps <= lengths[0], "the later requests rode along in the first one's steps"
    assert engine.batch_size == 0


async def test_logprobs_are_those_of_the_sampling_distribution(engine, tiny):
    prompt = _prompts(tiny.tokenizer)[1]
    greedy = await engine.generate(prompt, GREEDY)
    expected = _teacher_forced_logprobs(tiny.model, prompt, greedy.token_ids)
    assert greedy.logprobs == pytest.approx(expected, abs=1e-4)

    hot = await engine.generate(prompt, SamplingParams(temperature=0.7, max_tokens=8, seed=3))
    expected = _teacher_forced_logprobs(tiny.model, prompt, hot.token_ids, temperature=0.7)
    assert hot.logprobs == pytest.approx(expected, abs=1e-4)

    only = await engine.generate(prompt, SamplingParams(temperature=1.0, top_k=1, max_tokens=5))
    assert only.logprobs == pytest.approx([0.0] * 5, abs=1e-6)
    assert only.token_ids == greedy.token_ids[:5]


def test_top_k_and_top_p_restrict_and_renormalize():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    drawn = set()
    for _ in range(200):
        ids, lps, _ = sample(logits, [SamplingParams(top_p=0.7)], [gen])
        drawn.add(ids[0])
        # the nucleus is {0, 1}: renormalized to 0.5/0.8 and 0.3/0.8
        expected = {0: 0.5 / 0.8, 1: 0.3 / 0.8}[ids[0]]
        assert lps[0] == pytest.approx(torch.log(torch.tensor(expected)).item(), abs=1e-5)
    assert drawn == {0, 1}
    drawn = {sample(logits, [SamplingParams(top_k=3)], [gen])[0][0] for _ in range(300)}
    assert drawn == {0, 1, 2}
    ids, lps, tops = sample(logits, [SamplingParams(temperature=0, top_logprobs=2)], [gen])
    assert ids == [0] and [t for t, _ in tops[0]] == [0, 1]


async def test_a_seed_fixes_the_sample_whatever_else_is_in_the_batch(engine, tiny):
    prompts = _prompts(tiny.tokenizer)
    params = SamplingParams(temperature=1.0, max_tokens=10, seed=42, ignore_eos=True)
    alone = await engine.generate(prompts[0], params)
    crowd = await asyncio.gather(
        engine.generate(prompts[0], params),
        *[engine.generate(p, SamplingParams(max_tokens=10)) for p in prompts[1:]],
    )
    assert crowd[0].token_ids == alone.token_ids


async def test_stop_strings_stop_ids_and_max_tokens(engine, tiny):
    tok = tiny.tokenizer
    prompt = _prompts(tok)[0]
    full = await engine.generate(prompt, SamplingParams(temperature=0, max_tokens=12, stop=()))
    word = tok.decode(full.token_ids[4:5])
    assert word.strip(), "premise: the fifth token has visible text"
    cut = await engine.generate(prompt, SamplingParams(temperature=0, max_tokens=12, stop=(word,)))
    assert cut.finish_reason == "stop"
    assert word not in cut.text and full.text.startswith(cut.text)
    assert cut.token_ids == full.token_ids[: len(cut.token_ids)]
    assert len(cut.token_ids) <= 5

    by_id = SamplingParams(temperature=0, max_tokens=12, stop_token_ids=(full.token_ids[2],))
    out = await engine.generate(prompt, by_id)
    assert out.token_ids == full.token_ids[:3] and out.finish_reason == "stop"

    eos = tok.eos_token_id
    assert full.finish_reason == "length" and eos not in full.token_ids


async def test_streaming_yields_each_token_then_the_completion(engine, tiny):
    prompt = _prompts(tiny.tokenizer)[2]
    events = [e async for e in engine.stream(prompt, GREEDY)]
    tokens, final = events[:-1], events[-1]
    assert all(isinstance(e, TokenEvent) for e in tokens) and isinstance(final, Completion)
    assert [e.token_id for e in tokens] == final.token_ids
    assert "".join(e.text for e in tokens) == final.text
    assert [e.logprob for e in tokens] == final.logprobs


async def test_bad_requests_are_refused_before_reaching_the_batch(engine):
    with pytest.raises(ContextTooLong, match="context"):  # an InvalidRequest, typed
        await engine.generate([1] * engine.max_context, GREEDY)
    with pytest.raises(InvalidRequest, match="empty"):
        await engine.generate([], GREEDY)
    with pytest.raises(InvalidRequest, match="token ids"):
        await engine.generate([10**9], GREEDY)
    for bad in (
        SamplingParams(temperature=-1),
        SamplingParams(top_p=0),
        SamplingParams(top_k=-2),
        SamplingParams(max_tokens=0),
        SamplingParams(stop=("",)),
    ):
        with pytest.raises(InvalidRequest):
            await engine.generate([1, 2], bad)
    out = await engine.generate([1, 2], GREEDY)  # still serving
    assert len(out.token_ids) == 8


async def test_generation_stops_at_the_end_of_the_context(engine):
    prompt = [1] * (engine.max_context - 3)
    out = await engine.generate(
        prompt, SamplingParams(temperature=0, max_tokens=50, ignore_eos=True)
    )
    assert len(out.token_ids) == 3 and out.finish_reason == "length"


async def test_load_weights_between_steps_without_restart(engine, tiny):
    prompts = _prompts(tiny.tokenizer)
    other = build_tiny(seed=99)
    before = await engine.generate(prompts[1], GREEDY)
    long = asyncio.create_task(
        engine.generate(prompts[0], SamplingParams(temperature=0, max_tokens=900, ignore_eos=True))
    )
    while engine.batch_size == 0:
        await asyncio.sleep(0.001)
    await engine.load_weights(other.model.state_dict(), version=1)
    after = await engine.generate(prompts[1], GREEDY)
    spanning = await long
    assert engine.policy_version == 1
    assert spanning.policy_version == 0 and spanning.last_policy_version == 1
    assert after.policy_version == 1
    assert after.token_ids == _hf_greedy(other.model, prompts[1], 8) != before.token_ids

    broken = dict(other.model.state_dict())
    broken["model.norm.weight"] = torch.zeros(5)
    with pytest.raises(CheckpointError):
        await engine.load_weights(broken, version=2)
    assert engine.policy_version == 1
    assert (await engine.generate(prompts[1], GREEDY)).token_ids == after.token_ids


async def test_a_cancelled_request_leaves_the_batch(engine, tiny):
    prompt = _prompts(tiny.tokenizer)[0]
    task = asyncio.create_task(
        engine.generate(prompt, SamplingParams(max_tokens=1500, ignore_eos=True))
    )
    while engine.batch_size == 0:
        await asyncio.sleep(0.001)
    at_cancel = engine.steps
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Counted in engine steps, not seconds: the row leaves within a few steps, where a missed
    # cancel runs on for over a thousand. The 60 s are only a hang guard.
    await _until_empty(engine, 60)
    assert engine.steps - at_cancel < 500


async def test_a_closed_engine_refuses_work(tiny):
    eng = LocalEngine.from_loaded(tiny)
    await eng.generate([1, 2, 3], GREEDY)
    eng.close()
    with pytest.raises(Exception, match="closed"):
        await eng.generate([1, 2, 3], GREEDY)


async def test_a_single_token_request_finishes_at_prefill(engine):
    out = await engine.generate([1, 2, 3], SamplingParams(temperature=0, max_tokens=1))
    assert len(out.token_ids) == 1 and out.finish_reason in ("length", "stop")
    # the completion is sent a moment before the row is dropped (30 s: a hang guard)
    await _until_empty(engine, 30)


async def _until_empty(engine, limit_s: float) -> None:
    """Poll until the engine's batch is empty; the limit is a hang guard, not a timing assert."""
    deadline = time.monotonic() + limit_s
    while engine.batch_size:
        assert time.monotonic() < deadline, f"rows still in the batch after {limit_s:g} s"
        await asyncio.sleep(0.01)


@pytest.mark.slow
async def test_default_model_batched_greedy_matches_hf_and_answers():
    from cheetah.model.chat import prompt_token_ids
    from cheetah.model.loading import load_model

    loaded = load_model("default")
    eng = LocalEngine.from_loaded(loaded)
    tok = loaded.tokenizer
    questions = ["What is the capital of France?", "Name a prime number.", "Say hi."]
    prompts = [prompt_token_ids([{"role": "user", "content": q}], tok) for q in questions]
    try:
        outs = await asyncio.gather(
            *[eng.generate(p, SamplingParams(temperature=0, max_tokens=16)) for p in prompts]
        )
    finally:
        eng.close()
    assert "Paris" in outs[0].text
    for prompt, out in zip(prompts, outs, strict=True):
        n = len(out.token_ids)
        assert out.token_ids[:-1] == _hf_greedy(loaded.model, prompt, n)[:-1]
        if out.finish_reason == "stop":
            assert out.token_ids[-1] == tok.eos_token_id


async def test_the_batch_token_budget_queues_requests_and_changes_no_output(tiny):
    """Rows x (longest prompt + max_tokens) stays within max_batch_tokens; the rest wait."""
    import copy

    prompts = _prompts(tiny.tokenizer)
    budget = 2 * (len(prompts[-1]) + GREEDY.max_tokens)  # two of the longest at a time
    eng = LocalEngine(
        copy.deepcopy(tiny.model), tiny.tokenizer, max_batch=8, max_batch_tokens=budget
    )
    seen = []
    step = eng._decode

    def watched() -> None:
        seen.append(len(eng._batch) * eng._batch.width)
        step()

    eng._decode = watched
    try:
        outs = await asyncio.gather(*[eng.generate(p, GREEDY) for p in prompts])
    finally:
        eng.close()
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == _hf_greedy(tiny.model, prompt, 8)
    assert seen and max(seen) <= budget
    assert eng.steps > 8, "not everything fit at once: some requests waited"
