"""Every SFT demonstration of every shipped config fits the config's limits: each oracle reply
fits ``rollout.max_new_tokens`` (or it would be cut mid-call) and each whole conversation fits
``train.max_seq_len`` (or its later turns, the edit among them, would not be trained on)."""

from pathlib import Path

import pytest

from cheetah.model.chat import tokenize_chat
from cheetah.rl.config import load_config
from cheetah.rl.train import tokenizer_for
from cheetah.tasks.episode import run_episode
from cheetah.tasks.loaders import load_tasks, select_tasks
from cheetah.tasks.oracle import OraclePolicy
from cheetah.tasks.session import LocalSessionFactory
from tests.conftest import REPO_ROOT

CONFIGS = sorted((REPO_ROOT / "configs").glob("*.toml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
async def test_sft_demonstrations_fit_the_limits(path: Path, tmp_path):
    cfg = load_config(path)
    if cfg.train.sft_steps <= 0:
        pytest.skip("no SFT in this config")
    if cfg.model.spec not in ("default", "tiny"):
        pytest.skip(f"model {cfg.model.spec} is given by path; its tokenizer is not shipped")
    tokenizer = tokenizer_for(cfg.model.spec)
    tasks_file = cfg.tasks.file if cfg.tasks.file.is_absolute() else REPO_ROOT / cfg.tasks.file
    tasks = select_tasks(load_tasks(tasks_file), tier=cfg.tasks.tier, split=cfg.tasks.train_split)
    demos = [t for t in tasks if t.reference_patch]
    assert demos, f"{path.name}: no SFT demonstrations"
    factory = LocalSessionFactory(tmp_path)
    too_long = []
    for task in demos:
        ep = await run_episode(task, OraclePolicy(task), factory)
        assert ep.error is None and ep.grade is not None and ep.grade.correct, task.id
        chat = tokenize_chat(ep.trajectory.messages, tokenizer)
        replies = [
            len(tokenizer(m.content, add_special_tokens=False)["input_ids"])
            for m in ep.trajectory.messages
            if m.role == "assistant"
        ]
        if len(chat.token_ids) > cfg.train.max_seq_len or max(replies) > cfg.rollout.max_new_tokens:
            too_long.append((task.id, len(chat.token_ids), max(replies)))
    assert not too_long, (
        f"{path.name}: (task, tokens, longest reply) over max_seq_len={cfg.train.max_seq_len} "
        f"or max_new_tokens={cfg.rollout.max_new_tokens}: {too_long}"
    )
