"""Chat tokenization: template fidelity, loss masks, and verbatim engine token ids."""

from __future__ import annotations

import copy

import pytest

from cheetah.harness.trajectory import Message
from cheetah.model.chat import prompt_token_ids, tokenize_chat
from cheetah.model.loading import default_tokenizer


@pytest.fixture(scope="module")
def tok():
    return default_tokenizer()


CHAT = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the bug in app.py"},
    {"role": "assistant", "content": '<tool name="read_file"><path>app.py</path></tool>'},
    {"role": "user", "content": '<tool_result name="read_file" index="1">x = 1\n</tool_result>'},
]


def _reference(tok, messages, add_generation_prompt):
    out = tok.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=add_generation_prompt
    )
    return list(out if isinstance(out, list) else out["input_ids"])


@pytest.mark.parametrize("gen", [False, True])
@pytest.mark.parametrize("messages", [CHAT, CHAT[1:], CHAT[:3]])
def test_token_ids_match_the_models_chat_template(tok, messages, gen):
    ids = tokenize_chat(messages, tok, add_generation_prompt=gen).token_ids
    assert ids == _reference(tok, messages, gen)


def test_loss_mask_covers_exactly_the_assistant_reply_and_its_end_token(tok):
    out = tokenize_chat(CHAT, tok)
    assert len(out.loss_mask) == len(out.token_ids)
    trained = [t for t, m in zip(out.token_ids, out.loss_mask, strict=True) if m]
    assert tok.decode(trained) == CHAT[2]["content"] + "<|im_end|>"
    # the mask is one contiguous run, preceded by the assistant header
    first = out.loss_mask.index(1)
    assert tok.decode(out.token_ids[:first]).endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert sum(out.loss_mask) == len(trained) == out.loss_mask[first:].index(0)


def test_prompt_ends_with_the_generation_header(tok):
    ids = prompt_token_ids(CHAT[:2], tok)
    assert tok.decode(ids).endswith("<|im_start|>assistant\n")
    assert tokenize_chat(CHAT[:2], tok, add_generation_prompt=True).loss_mask == [0] * len(ids)


def test_default_system_prompt_comes_from_the_template_and_is_not_trained(tok):
    out = tokenize_chat(CHAT[1:3], tok)
    assert tok.decode(out.token_ids).startswith("<|im_start|>system\nYou are a helpful AI")
    assert out.token_ids == _reference(tok, CHAT[1:3], False)


def test_engine_token_ids_are_used_verbatim_so_retokenization_drift_cannot_reach_training(tok):
    # The engine sampled "Hel" + "lo" + " world": valid ids whose text re-encodes differently.
    engine_ids = [i for piece in ("Hel", "lo", " world") for i in tok.encode(piece)]
    engine_ids.append(tok.eos_token_id)
    text = tok.decode(engine_ids, skip_special_tokens=True)
    assert text == "Hello world"
    assert tok.encode(text) != engine_ids[:-1], "premise: decode/encode drifts"

    messages = [
        Message(role="user", content="greet"),
        Message(role="assistant", content=text, token_ids=engine_ids),
    ]
    out = tokenize_chat(messages, tok)
    trained = [t for t, m in zip(out.token_ids, out.loss_mask, strict=True) if m]
    assert trained == engine_ids  # exactly the sampled ids, end token included once
    assert out.token_ids.count(tok.eos_token_id) == 3  # system, user, assistant
    retokenized = tokenize_chat([{"role": m.role, "content": m.content} for m in messages], tok)
    assert retokenized.token_ids != out.token_ids


def test_next_turn_prompt_extends_the_previous_prompt_and_sampled_ids_exactly(tok):
    first = prompt_token_ids(CHAT[:2], tok)
    sampled = tok.encode("Let me ") + tok.encode("look") + [tok.eos_token_id]
    history = [*CHAT[:2], {"role": "assistant", "content": "Let me look", "token_ids": sampled}]
    second = prompt_token_ids([*history, CHAT[3]], tok)
    assert second[: len(first) + len(sampled)] == first + sampled


def test_truncated_reply_gets_an_untrained_end_token(tok):
    sampled = tok.encode("I will rea")  # cut by max_tokens: no end token sampled
    messages = [CHAT[1], {"role": "assistant", "content": "I will rea", "token_ids": sampled}]
    out = tokenize_chat(messages, tok)
    trained = [t for t, m in zip(out.token_ids, out.loss_mask, strict=True) if m]
    assert trained == sampled
    assert tok.decode(out.token_ids).endswith("I will rea<|im_end|>\n")


def test_token_ids_on_user_messages_are_ignored(tok):
    messages = [{"role": "user", "content": "hi", "token_ids": [5, 6, 7]}]
    assert tokenize_chat(messages, tok).token_ids == _reference(tok, messages, False)


def test_a_template_that_rejects_the_conversation_raises_a_typed_error(tok):
    from cheetah.model.chat import ChatTemplateError

    strict = copy.copy(tok)
    strict.chat_template = "{{ raise_exception('roles must alternate') }}"
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        tokenize_chat([{"role": "user", "content": "hi"}], strict)
    assert "<|im_start|>" in tok.chat_template  # the shared tokenizer is untouched
