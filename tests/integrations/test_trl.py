"""TRL's GRPOTrainer on cheetah's tasks (the ``trl`` extra): rollouts, masks, a real step."""

from __future__ import annotations

import pytest

from cheetah.model.loading import build_tiny
from cheetah.tasks.session import local_sessions
from tests.tasks.conftest import bug_task, build_repo

trl = pytest.importorskip("trl", reason="the trl extra is not installed: pip install -e '.[trl]'")

from cheetah.integrations.trl_grpo import CheetahRollouts, task_dataset  # noqa: E402

FIX = (
    '<tool name="edit_file"><path>calc/ops.py</path><old_str>return a - b</old_str>'
    "<new_str>return a + b</new_str></tool>"
)


@pytest.fixture
def tiny():
    return build_tiny()


@pytest.fixture
def calc_repo(tmp_path):
    return build_repo(tmp_path / "calc_repo")


@pytest.mark.slow  # with the extra, which make test-slow installs
def test_rollouts_run_multi_turn_episodes_and_mask_the_tool_results(calc_repo, tiny):
    task = bug_task(calc_repo)
    prompt_eos = sum(
        1
        for t in tiny.tokenizer.apply_chat_template(
            [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        if t == tiny.tokenizer.eos_token_id
    )
    rollouts = CheetahRollouts([task], lambda: local_sessions("local"), tiny.tokenizer)
    turns = [FIX, "Fixed the operator."]

    def scripted(_trainer, ids):  # turn k of an episode: k EOS tokens after the prompt's own
        k = sum(1 for t in ids if t == tiny.tokenizer.eos_token_id) - prompt_eos
        out = tiny.tokenizer.encode(turns[min(k, 1)], add_special_tokens=False)
        return [*out, tiny.tokenizer.eos_token_id], 0

    rollouts._generate = scripted
    try:
        out = rollouts([task.id, task.id], trainer=None)
    finally:
        rollouts.close()
    assert out["episode_reward"] == [pytest.approx(1.0), pytest.approx(1.0)]
    assert rollouts.reward(episode_reward=out["episode_reward"]) == out["episode_reward"]
    ids, mask = out["completion_ids"][0], out["env_mask"][0]
    assert len(ids) == len(mask) and mask[0] == 1 and mask[-1] == 1 and 0 in mask
    results = tiny.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 0])
    assert "calc/ops.py" in results  # the tool's result, between the turns, not trained
    trained = tiny.tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m == 1])
    assert "edit_file" in trained and "Fixed the operator." in trained
    with pytest.raises(KeyError, match="no task id"):
        CheetahRollouts([task], lambda: local_sessions("local"), tiny.tokenizer)(["x"], None)


@pytest.mark.slow
def test_one_grpo_step_on_cheetah_tasks(calc_repo, tiny, tmp_path):
    from trl import GRPOConfig, GRPOTrainer

    tasks = [bug_task(calc_repo), bug_task(calc_repo, id="calc-add-2")]
    rollouts = CheetahRollouts(
        tasks, lambda: local_sessions("local"), tiny.tokenizer, max_new_tokens=16
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=4,
        num_generations=2,
        max_steps=1,
        report_to="none",
        logging_steps=1,
        save_strategy="no",
    )
    trainer = GRPOTrainer(
        model=tiny.model,
        processing_class=tiny.tokenizer,
        reward_funcs=rollouts.reward,
        args=args,
        train_dataset=task_dataset(tasks),
        rollout_func=rollouts,
    )
    try:
        trainer.train()
    finally:
        rollouts.close()
    logged = {k for entry in trainer.state.log_history for k in entry}
    assert trainer.state.global_step == 1 and ("loss" in logged or "train_loss" in logged)
    assert any("reward" in k for k in logged)
    assert not rollouts.sessions.env.sessions  # every episode's session was closed
