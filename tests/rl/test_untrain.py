"""A demonstration's deliberate mistake is not trained on: ``untrain_turns`` zeroes the loss
mask of chosen assistant messages and only theirs."""

from cheetah.harness.trajectory import Message, Trajectory
from cheetah.model.loading import default_tokenizer
from cheetah.rl.data import sample_from_trajectory, untrain_turns


def test_untrain_turns_masks_only_the_chosen_assistant_messages():
    tok = default_tokenizer()
    said = ["first reply", "second reply", "third reply"]
    messages = [Message(role="system", content="sys"), Message(role="user", content="q")]
    for i, text in enumerate(said):
        messages.append(Message(role="assistant", content=text))
        if i < 2:
            messages.append(Message(role="user", content=f"result {i}"))
    traj = Trajectory(query="q", policy="p", messages=messages)

    def trained(sample) -> str:
        ids = [i for i, m in zip(sample.input_ids, sample.loss_mask, strict=True) if m]
        return tok.decode(ids)

    full = sample_from_trajectory(traj, tok, need_logprobs=False)
    assert all(text in trained(full) for text in said)
    sample = untrain_turns(sample_from_trajectory(traj, tok, need_logprobs=False), frozenset({1}))
    text = trained(sample)
    assert "first reply" in text and "third reply" in text and "second reply" not in text
    assert sample.input_ids == full.input_ids  # the model still reads the message
    assert sample.trained_tokens < full.trained_tokens
    assert untrain_turns(full, frozenset()) is full
