"""EnginePolicy: chat messages in, a Generation with the engine's own ids and logprobs out."""

from __future__ import annotations

import pytest

from cheetah.harness.engine_policy import EnginePolicy
from cheetah.harness.policy import Policy, PolicyError
from cheetah.harness.trajectory import Message
from cheetah.inference.local import LocalEngine
from cheetah.inference.protocol import SamplingParams
from cheetah.model.chat import prompt_token_ids, tokenize_chat
from cheetah.model.loading import build_tiny


@pytest.fixture(scope="module")
def tiny():
    return build_tiny()


@pytest.fixture
def policy(tiny):
    engine = LocalEngine.from_loaded(tiny)
    sampling = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)
    yield EnginePolicy(engine, tiny.tokenizer, sampling, name="tiny")
    engine.close()


async def test_generation_carries_ids_logprobs_prompt_and_version(policy, tiny):
    assert isinstance(policy, Policy)
    messages = [Message(role="system", content="agent"), Message(role="user", content="hi")]
    gen = await policy.generate(messages)
    assert gen.prompt_token_ids == prompt_token_ids(messages, tiny.tokenizer)
    assert gen.prompt_tokens == len(gen.prompt_token_ids)
    assert len(gen.token_ids) == len(gen.logprobs) == gen.completion_tokens == 6
    assert gen.text == tiny.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
    assert gen.policy_version == 0 and gen.finish_reason == "length"
    assert gen.max_new_tokens == 6  # the cap that cut it, for the loop's stop detail


async def test_second_turn_reuses_the_first_turns_ids_and_training_sees_them(policy, tiny):
    messages = [Message(role="user", content="hi")]
    first = await policy.generate(messages)
    messages += [
        Message(role="assistant", content=first.text, token_ids=first.token_ids),
        Message(role="user", content="<tool_result>ok</tool_result>"),
    ]
    second = await policy.generate(messages)
    n = len(first.prompt_token_ids)
    assert second.prompt_token_ids[: n + len(first.token_ids)] == (
        first.prompt_token_ids + first.token_ids
    )
    chat = tokenize_chat(
        [*messages, Message(role="assistant", content=second.text, token_ids=second.token_ids)],
        tiny.tokenizer,
    )
    trained = [t for t, m in zip(chat.token_ids, chat.loss_mask, strict=True) if m]
    assert trained == first.token_ids + second.token_ids


async def test_a_prompt_past_the_context_is_a_policy_error(policy):
    with pytest.raises(PolicyError, match="context"):
        await policy.generate([Message(role="user", content="word " * 3000)])


async def test_streaming_hands_out_each_piece_and_records_the_same_generation(policy):
    messages = [Message(role="user", content="hi")]
    plain = await policy.generate(messages)
    pieces: list[str] = []
    streamed = await policy.generate_streaming(messages, pieces.append)
    assert "".join(pieces) == streamed.text == plain.text
    assert (streamed.token_ids, streamed.prompt_token_ids, streamed.finish_reason) == (
        plain.token_ids,
        plain.prompt_token_ids,
        plain.finish_reason,
    )
    assert streamed.logprobs == pytest.approx(plain.logprobs, abs=1e-5)
