"""Every SFT demonstration of every shipped config fits the config's limits: each oracle reply
fits ``rollout.max_new_tokens`` (or it would be cut mid-call) and each whole conversation fits
``train.max_seq_len`` (or its later turns, the edit among them, would not be trained on).

Every demonstration's replies are measured (cheap: the oracle's messages); whole
conversations, which need the episode run for the tool results, are measured for the
task with the longest replies of each repo, and must fit with a 25% margin.
"""

import asyncio
import tempfile
from pathlib import Path

import pytest

from cheetah.bundled import CONFIGS as CONFIGS_DIR
from cheetah.model.chat import tokenize_chat
from cheetah.model.loading import tokenizer_for
from cheetah.rl.config import load_config
from cheetah.sandbox.config import SandboxConfig
from cheetah.tasks.checkout import materialize
from cheetah.tasks.episode import run_episode
from cheetah.tasks.loaders import load_tasks, select_tasks
from cheetah.tasks.oracle import OraclePolicy, oracle_demonstration, reads_first, recovers
from cheetah.tasks.session import local_sessions

CONFIGS = sorted(CONFIGS_DIR.glob("*.toml"))


def _shape(task, cfg) -> dict[str, bool]:
    """The demonstration options SFT draws for ``task`` (``rl/sft.py``)."""
    t = cfg.train
    return {
        "run_tests": t.sft_run_tests,
        "read_first": reads_first(task, t.sft_read_share),
        "recover": recovers(task, t.sft_recover_share),
    }


def _replies(task, tokenizer, cfg) -> list[int]:
    with tempfile.TemporaryDirectory() as tmp:
        root = materialize(task.snapshot, Path(tmp) / "repo")
        messages = oracle_demonstration(task, root, **_shape(task, cfg)).messages
    return [len(tokenizer(m, add_special_tokens=False)["input_ids"]) for m in messages]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
async def test_sft_demonstrations_fit_the_limits(path: Path, tmp_path):
    cfg = load_config(path)
    if cfg.train.sft_steps <= 0:
        pytest.skip("no SFT in this config")
    if cfg.model.spec not in ("default", "tiny"):
        pytest.skip(f"model {cfg.model.spec} is given by path; its tokenizer is not shipped")
    tokenizer = tokenizer_for(cfg.model.spec)
    tasks = select_tasks(
        load_tasks(cfg.tasks.file), tier=cfg.tasks.tier, split=cfg.tasks.train_split
    )
    for extra in cfg.tasks.sft_also:  # demonstrated in SFT only: the same limits hold
        tasks += select_tasks(
            load_tasks(extra.file), tier=extra.tier, split=extra.split, tag=extra.tag
        )
    demos = [t for t in tasks if t.reference_patch]
    assert demos, f"{path.name}: no SFT demonstrations"
    replies = {t.id: _replies(t, tokenizer, cfg) for t in demos}
    turns = {tid: len(r) for tid, r in replies.items() if len(r) > cfg.rollout.max_turns}
    assert not turns, f"{path.name}: demonstrations over max_turns={cfg.rollout.max_turns}: {turns}"
    cut = {tid: max(r) for tid, r in replies.items() if max(r) > cfg.rollout.max_new_tokens}
    assert not cut, f"{path.name}: replies over max_new_tokens={cfg.rollout.max_new_tokens}: {cut}"

    longest: dict[str, object] = {}  # per repo, the task whose replies are longest
    for t in demos:
        repo = t.snapshot.dir
        if repo not in longest or sum(replies[t.id]) > sum(replies[longest[repo].id]):
            longest[repo] = t
    sessions = local_sessions("local", config=SandboxConfig(base_dir=tmp_path))

    async def tokens(task) -> tuple[str, int]:
        ep = await run_episode(task, OraclePolicy(task, **_shape(task, cfg)), sessions)
        assert ep.error is None and ep.grade is not None and ep.grade.correct, task.id
        return task.id, len(tokenize_chat(ep.trajectory.messages, tokenizer).token_ids)

    sizes = await asyncio.gather(*(tokens(t) for t in longest.values()))
    over = [(tid, n) for tid, n in sizes if n * 1.25 > cfg.train.max_seq_len]
    assert not over, f"{path.name}: conversations near max_seq_len={cfg.train.max_seq_len}: {over}"
