"""`cheetah train` end to end on the tiny model and the bundled easy tasks (slow: Ray, sandboxes,
real grading). The resume test kills the trainer mid-run and checks that no finished rollout is
lost or trained twice."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cheetah.rl.config import ConfigError, load_config
from tests.conftest import REPO_ROOT

BIN = Path(sys.executable).parent
# 100 SFT steps at a high learning rate teach the tiny model to write some clean tool
# calls, so groups get a reward difference (format shaping) and RL steps really train.
# Dynamic sampling is off so that the run's rollout count is exact.
SMALL = [
    "model.spec=tiny",
    "rollout.max_new_tokens=96",
    "rollout.max_turns=2",
    "rollout.group_size=2",
    "rollout.groups_per_step=2",
    "rollout.dynamic_sampling=false",
    "rollout.format_weight=0.2",  # shaping: reward differences even when nothing is solved
    "tasks.file=benchmark",  # the plumbing on the small bundled set
    "tasks.tier=easy",
    "train.sft_batch=4",
    "tasks.eval_limit=2",
    "train.sft_steps=100",
    "train.sft_lr=1e-2",
    "rollout.sandbox=local",
    "train.updates_per_batch=1",  # the reported KL is the last update's: 0 on the first step
    "tasks.also_eval=[]",  # the plumbing needs no fetched package
    "tasks.sft_also=[]",  # nor demonstrations of the curriculum
]


def train(out_dir, *extra, log: Path | None = None):
    """The job as a process; its output in a pipe for ``communicate``, or appended to ``log``
    when the test does not read it as it comes (a pipe nobody reads fills at 64 KiB and then
    blocks the job in its next print)."""
    sets = [a for s in [*SMALL, f"run.out_dir={out_dir}", *extra] for a in ("--set", s)]
    cmd = [BIN / "cheetah", "train", "--config", "quickstart", *sets]
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    if log is None:
        return subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
    with log.open("a") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def test_config_overrides_and_errors(tmp_path):
    cfg = load_config(Path("quickstart"), ["train.steps=7", "run.name=x"])
    assert cfg.train.steps == 7 and cfg.run.name == "x" and cfg.rollout.sandbox == "isolated"
    with pytest.raises(ConfigError, match=r"train\.stepz"):
        load_config(None, ["train.stepz=1"])
    with pytest.raises(ConfigError, match=r"section\.key=value"):
        load_config(None, ["steps=1"])
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_a_failed_start_leaves_nothing_behind(tmp_path, monkeypatch):
    """A typo is refused before the run directory exists, so the corrected command runs."""
    from cheetah.rl.job import TrainJob

    for typo, key in (("tasks.tier=lien", "tasks.tier"), ("model.spec=/no/model", "model.spec")):
        sets = [a for s in (typo, f"run.out_dir={tmp_path}") for a in ("--set", s)]
        r = subprocess.run(
            [BIN / "cheetah", "train", "--config", "quickstart", *sets],
            capture_output=True,
            text=True,
        )
        assert r.returncode == 2 and key in r.stderr, r.stderr
        assert "line" in r.stderr or key == "model.spec"  # the tiers the file has are named
        assert not (tmp_path / "quickstart").exists()
    # The real held-out repos not fetched: one error names the command that fetches them.
    monkeypatch.setenv("CHEETAH_REPOS_DIR", str(tmp_path / "no-repos"))
    with pytest.raises(ValueError, match=r"cheetah tasks fetch --only h11 tinydb xmltodict"):
        TrainJob(load_config(Path("quickstart"), [f"run.out_dir={tmp_path}"]))
    assert not (tmp_path / "quickstart").exists()
    sets = [f"run.out_dir={tmp_path}", "tasks.also_eval=[]"]
    job = TrainJob(load_config(Path("quickstart"), sets))
    assert (tmp_path / "quickstart" / "run.sqlite").is_file()
    job.close()  # closes the store it opened (start() was never called)
    with pytest.raises(FileExistsError, match="already holds a run"):
        TrainJob(load_config(Path("quickstart"), sets))


def test_more_held_out_tasks_come_from_other_task_files(tmp_path):
    """``[[tasks.also_eval]]``: held-out tasks of another file join every stage; clashing ids
    and a set that selects nothing are refused by name."""
    from cheetah.rl.job import TrainJob
    from cheetah.tasks.loaders import load_tasks

    extra = tmp_path / "extra.jsonl"
    with extra.open("w") as f:
        for t in load_tasks("curriculum")[:400]:
            if t.split == "heldout" and t.tier in ("named", "file"):
                t = t.model_copy(update={"id": "x-" + t.id})
                f.write(t.model_dump_json(exclude_none=True) + "\n")
    base = [f"run.out_dir={tmp_path}", "tasks.also_eval=[]", "tasks.tier=line"]

    def job(name: str, also: str) -> TrainJob:
        sets = [*base, f"run.name={name}", f"tasks.also_eval=[{also}]"]
        return TrainJob(load_config(Path("quickstart"), sets))

    j = job("a", f'{{file = "{extra}", tier = "named", limit = 3}}')
    added = [t for t in j.eval_tasks if t.id.startswith("x-")]
    assert len(added) == 3 and {t.tier for t in added} == {"named"}
    assert len(j.eval_tasks) == j.cfg.tasks.eval_limit + 3  # the file's own, then the 3
    j.close()
    with pytest.raises(ValueError, match=r"also_eval\[0\].*no tasks that match"):
        job("b", f'{{file = "{extra}", tier = "line"}}')
    with pytest.raises(ValueError, match=r"also_eval\[0\].*already evaluated"):
        job("c", '{file = "curriculum", tier = "line"}')


async def test_sft_also_demonstrations_take_the_place_of_as_many_of_the_tiers(
    tmp_path, monkeypatch
):
    """``[[tasks.sft_also]]``: the agent config's bug reports (behaviour tier, inverted
    operators) are demonstrated in SFT only, within sft_steps x sft_batch; its held-out bug
    reports are other functions'; a set that selects nothing is refused by name."""
    import contextlib
    import random

    import cheetah.rl.sft as sft
    import cheetah.tasks.remote_sessions as remote
    from cheetah.rl.job import TrainJob

    base = [f"run.out_dir={tmp_path}"]
    job = TrainJob(load_config(Path("agent"), base))
    also = job.sft_also_tasks
    assert len(also) == 32 and {t.tier for t in also} == {"behaviour"}
    assert all({"compare", "arith", "boolop"} & set(t.tags) for t in also)
    assert {t.tier for t in job.train_tasks} == {"line", "locate"}  # RL: the two tiers
    assert {t.id for t in also}.isdisjoint(t.id for t in job.eval_tasks)
    reports = [t for t in job.eval_tasks if t.tier == "behaviour"]
    assert len(reports) == 16 and {t.split for t in reports} == {"heldout"}
    chosen: list = []

    async def record(tasks, *args, **kwargs):
        chosen.extend(tasks)
        return []

    monkeypatch.setattr(sft, "collect_demonstrations", record)
    monkeypatch.setattr(remote, "fleet_sessions", lambda *a: contextlib.nullcontext())
    monkeypatch.setattr("cheetah.rl.task_rollout.env_token", lambda cfg: "")
    cfg = job.cfg
    await sft.sft_samples_for(
        cfg, cfg, job.train_tasks, None, None, random.Random(0), print, also=also
    )
    room = cfg.train.sft_steps * cfg.train.sft_batch
    assert len(chosen) == room and chosen[-32:] == also
    assert {t.tier for t in chosen[:-32]} == {"line", "locate"}
    job.close()
    bad = '{file = "curriculum", tier = "behaviour", tag = "no-such-tag", limit = 2}'
    with pytest.raises(ValueError, match=r"sft_also\[0\].*no tasks that match"):
        TrainJob(load_config(Path("agent"), [*base, "run.name=b", f"tasks.sft_also=[{bad}]"]))


def test_trainer_loss_and_grader_settings_come_from_the_config(tmp_path):
    from cheetah.model.loading import build_tiny
    from cheetah.rl.loss import DEFAULT_LOSS
    from cheetah.rl.trainer import Trainer
    from cheetah.tasks.grader import GraderConfig

    toml = tmp_path / "c.toml"
    toml.write_text("[train.loss]\nclip_high = 0.4\n[grader]\ncheck_timeout_s = 9\n")
    cfg = load_config(toml, ["train.loss.is_cap=3", "train.weight_decay=0.01"])
    assert (cfg.train.loss.clip_high, cfg.train.loss.is_cap) == (0.4, 3.0)
    assert cfg.train.loss.clip_low == DEFAULT_LOSS.clip_low  # defaulted once, in LossConfig
    assert (
        cfg.grader.check_timeout_s == 9 and cfg.grader.lint_penalty == GraderConfig().lint_penalty
    )
    tiny = build_tiny()
    trainer = Trainer(tiny.model, tiny.tokenizer, cfg.train, temperature=cfg.rollout.temperature)
    assert trainer.cfg.loss.clip_high == 0.4 and trainer.opt.defaults["weight_decay"] == 0.01
    with pytest.raises(ConfigError, match=r"train\.loss\.clip_hi"):
        load_config(None, ["train.loss.clip_hi=1"])
    with pytest.raises(ConfigError, match="grader"):
        load_config(None, ["grader.timeout=1"])
    with pytest.raises(ConfigError, match="is a value, not a table"):
        load_config(None, ["train.steps=2", "train.steps.x=1"])


def test_the_old_bf16_switch_is_refused_with_the_key_that_replaced_it(tmp_path):
    toml = tmp_path / "old.toml"
    toml.write_text("[train]\nbf16 = true\n")
    with pytest.raises(ConfigError, match=r'train\.precision = "auto".*precision = "auto"'):
        load_config(toml)
    with pytest.raises(ConfigError, match=r'bf16 = false is now precision = "fp32"'):
        load_config(None, ["train.bf16=false"])
    assert load_config(Path("quickstart")).train.precision == "auto"


@pytest.mark.parametrize(
    ("flags", "ratio", "dtype"),
    [({"avx2"}, 38.0, "fp32"), ({"avx2", "amx_bf16"}, 0.25, "bf16")],
    ids=["avx2-only", "amx"],
)
def test_the_quickstart_trainer_computes_in_what_the_cpu_does_fast(
    monkeypatch, flags, ratio, dtype
):
    """On a CPU without fast bf16 (issue 45: 38x slower there) the quickstart's trainer runs
    its linears in fp32, autocast off; with AMX, in bf16."""
    import torch

    from cheetah.model import precision
    from cheetah.model.loading import build_tiny
    from cheetah.rl.data import Sample
    from cheetah.rl.trainer import Trainer

    cpu = precision.CpuFeatures("test CPU", "x86_64", frozenset(flags), cpuinfo=True)
    monkeypatch.setattr(precision, "cpu_features", lambda: cpu)
    monkeypatch.setattr(precision, "measure_bf16_ratio", lambda n=256: ratio)
    cfg = load_config(Path("quickstart"))
    tiny = build_tiny()
    trainer = Trainer(tiny.model, tiny.tokenizer, cfg.train)
    assert trainer.precision.dtype == dtype and trainer.autocast == (dtype == "bf16")
    seen = []
    linear = next(m for m in tiny.model.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(
        lambda m, i, out: seen.append((torch.is_autocast_enabled("cpu"), out.dtype))
    )
    trainer.logprobs(Sample([5, 6, 7, 8], [0, 0, 1, 1], [0.0, 0.0, -1.0, -1.0]))
    expected = (dtype == "bf16", torch.bfloat16 if dtype == "bf16" else torch.float32)
    assert seen and all(s == expected for s in seen), seen


def test_a_slow_step_names_cheetah_doctor_once(tmp_path):
    from cheetah.rl.job import SLOW_STEP_S, TrainJob

    lines: list[str] = []
    sets = [f"run.out_dir={tmp_path}", "tasks.also_eval=[]", "tasks.sft_also=[]"]
    job = TrainJob(load_config(Path("quickstart"), sets), log=lines.append)
    try:
        for seconds in (SLOW_STEP_S / 2, SLOW_STEP_S + 1, SLOW_STEP_S * 3):
            job._note_slow(seconds)
    finally:
        job.close()
    assert len(lines) == 1 and "slow step (121 s): run `cheetah doctor`" in lines[0], lines


@pytest.mark.slow
@pytest.mark.timeout(7800)  # three training runs: ~5 min here, a busy CI machine takes longer
@pytest.mark.parametrize("world", [1, 2], ids=["one-process", "sharded-2-ranks"])
def test_train_runs_end_to_end_and_resumes_after_a_kill(tmp_path, world):
    run = [
        "train.steps=4",
        "train.checkpoint_every=1",
        f"train.world_size={world}",
        "train.eval_every=2",  # a learning-curve point in the middle
        "rollout.turn_cost=0.01",
        "train.loss.kl_coef=0.05",  # the reference comes back from checkpoints/sft on resume
    ]
    log = tmp_path / "train.log"
    proc = train(tmp_path, *run, log=log)
    db_path = tmp_path / "quickstart" / "run.sqlite"
    # ~4.5 min to the first RL checkpoint on an idle 2-core machine (100 SFT steps, two
    # held-out evaluations); CI machines are shared and slower, so it waits up to an hour
    # (the resumed run below has its own hour, both within the test's timeout).
    deadline, ready = time.monotonic() + 3600, False
    while not ready and time.monotonic() < deadline and proc.poll() is None:
        ckpts = list((tmp_path / "quickstart" / "checkpoints").glob("step-*"))
        ready = bool(ckpts) and not any(p.name.endswith(".tmp") for p in ckpts)
        time.sleep(1)  # kill once a checkpoint exists and rollouts flow
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    said = log.read_text()[-3000:]
    assert ready, f"no RL checkpoint before the kill; the job said:\n{said}"
    with sqlite3.connect(db_path) as db:
        before = dict(db.execute("SELECT rollout_id, reward FROM rollouts").fetchall())
    assert before, f"no finished rollout in the store at the kill; the job said:\n{said}"

    proc = train(tmp_path, *run, log=log)
    proc.kill()  # a second run without --resume must refuse the existing run dir
    proc.wait()
    resumed = subprocess.run(
        [
            BIN / "cheetah",
            "train",
            "--config",
            "quickstart",
            "--resume",
            *[a for s in [*SMALL, f"run.out_dir={tmp_path}", *run] for a in ("--set", s)],
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=3600,
        env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
    )
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    assert "resumed at step" in resumed.stdout
    sft = tmp_path / "quickstart" / "checkpoints" / "sft"
    assert f"KL penalty 0.05 to the reference policy {sft}" in resumed.stdout
    with sqlite3.connect(db_path) as db:
        after = dict(db.execute("SELECT rollout_id, reward FROM rollouts").fetchall())
        steps = [r[0] for r in db.execute("SELECT DISTINCT step FROM metrics ORDER BY step")]
        untrained = db.execute(
            "SELECT COUNT(*) FROM rollouts WHERE trained_step IS NULL"
        ).fetchone()
        optimizer_steps = db.execute(
            "SELECT step, value FROM metrics WHERE name = 'train_grad_norm'"
        ).fetchall()
        truncation = db.execute(
            "SELECT COUNT(*) FROM metrics WHERE name = 'turns_cut_by_max_new_tokens'"
        ).fetchone()
        curve = db.execute("SELECT step FROM metrics WHERE name = 'heldout_pass_rate'").fetchall()
        shaped = dict(db.execute("SELECT step, value FROM metrics WHERE name = 'reward_mean'"))
        graded = dict(db.execute("SELECT step, value FROM metrics WHERE name = 'task_reward_mean'"))
        kl = dict(db.execute("SELECT step, value FROM metrics WHERE name = 'train_reference_kl'"))
    assert all(after[k] == v for k, v in before.items())  # nothing finished was lost or redone
    assert steps == [1, 2, 3, 4] and untrained == (0,)
    # The policy really changed: optimizer steps with a gradient happened (shaping gives
    # groups a reward difference even when no task is solved), and truncation was counted.
    assert optimizer_steps and all(v > 0 for _, v in optimizer_steps), optimizer_steps
    # the KL to the SFT policy: 0 before RL has moved the weights, then above 0; a step
    # whose groups all had equal rewards trains nothing and records no train_* metric
    trained = sorted({s for s, _ in optimizer_steps})
    assert sorted(kl) == trained and kl[trained[0]] < 1e-6, (kl, trained)
    assert len(trained) == 1 or kl[trained[-1]] > 0, kl
    assert truncation == (4,)
    assert curve == [(2,)]  # train.eval_every=2 of 4 steps: the middle point, in the store
    # the task reward is logged apart from the shaped one (format reward up to 0.2, and the
    # turn cost of solved rollouts: tests/rl/test_reward.py), every step
    assert set(graded) == set(shaped) == {1, 2, 3, 4}
    assert all(graded[k] - 0.01 * 2 - 1e-9 <= shaped[k] <= graded[k] + 0.2 + 1e-9 for k in graded)
    summary = json.loads((tmp_path / "quickstart" / "summary.json").read_text())
    assert summary["rollouts"] == len(after) == 16
    assert [s["name"] for s in summary["stages"]] == ["base", "sft", "rl"]
    assert all(s["tasks"] == 2 for s in summary["stages"]) and 0 <= summary["mcnemar_p"] <= 1
    behaviour = summary["stages"][-1]["behaviour"]
    assert {"calls_per_turn", "turns_per_task", "explore_before_edit"} <= set(behaviour)
    rl_vs_sft = next(
        c for c in summary["comparisons"] if (c["before"], c["after"]) == ("sft", "rl")
    )
    assert 0 <= rl_vs_sft["mcnemar_p"] <= 1 and 0 <= rl_vs_sft["turns_p"] <= 1
    assert [p["step"] for p in summary["learning_curve"]] == [0, 2, 4]
    precision = summary["precision"]  # what the trainer computed in, and why
    assert precision["requested"] == "auto" and precision["chosen"] in ("fp32", "bf16")
    assert precision["reason"]
    timing = {p["phase"]: p["seconds"] for p in summary["time_breakdown"]["phases"]}
    for phase in ("startup", "stage:base", "sft:steps", "stage:curve", "rl:trainer_steps"):
        assert timing[phase] > 0, (phase, timing)  # both processes' phases, added up
    assert sum(timing.values()) == pytest.approx(summary["time_breakdown"]["wall_s"], rel=0.01)
    assert (tmp_path / "quickstart" / "learning.png").is_file()
    assert (tmp_path / "quickstart" / "reward.png").is_file()
    assert (tmp_path / "quickstart" / "checkpoints" / "step-4" / "model.safetensors").is_file()
    assert (tmp_path / "quickstart" / "checkpoints" / "sft" / "model.safetensors").is_file()
    sharded = (tmp_path / "quickstart" / "checkpoints" / "step-4" / "optimizer").is_dir()
    assert sharded == (world > 1)  # the optimizer state was written shard by shard


@pytest.mark.slow
@pytest.mark.timeout(4200)  # whole training runs: a busy CI machine takes minutes
def test_train_rolls_out_on_remote_servers_and_syncs_through_checkpoints(tmp_path):
    """Engine and env servers both outside the job: `cheetah serve` and `cheetah env serve`."""
    import httpx

    from cheetah.core.ports import free_port
    from cheetah.sandbox.launch import EnvServerProcess

    port = free_port()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    token_file = tmp_path / "serve-token"
    token_file.write_text("s" * 32)  # weight sync needs the token, even on loopback
    argv = [BIN / "cheetah", "serve", "--model", "tiny", "--port", str(port)]
    server = subprocess.Popen(
        [*argv, "--token-file", str(token_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env_server = EnvServerProcess(tmp_path / "env", backend="local").start(timeout_s=180)
    try:
        deadline, up = time.monotonic() + 300, False
        while not up and time.monotonic() < deadline:
            try:
                up = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                time.sleep(0.5)
        assert up, "cheetah serve did not answer /health within 5 minutes"
        staging = tmp_path / "staging"
        proc = train(
            tmp_path,
            "train.steps=1",
            f'model.engine_urls=["http://127.0.0.1:{port}/v1"]',
            f'model.engine_token_file="{token_file}"',
            f'model.staging_dir="{staging}"',
            f'rollout.env_urls=["{env_server.url}"]',
            f'rollout.env_token_file="{env_server.token_file}"',
            'train.loggers=["tensorboard"]',
        )
        out, _ = proc.communicate(timeout=3600)
        assert proc.returncode == 0, out[-3000:]
        assert (staging / "v1").is_dir()  # the SFT weights went to the server as a checkpoint
        from tests.rl.test_loggers import read_events

        tags = {v.tag for e in read_events(tmp_path / "quickstart" / "tensorboard")
                for v in e.summary.value}  # fmt: skip
        assert {"train/reward_mean", "stage/base/pass_rate", "stage/rl/pass_rate"} <= tags
        with sqlite3.connect(tmp_path / "quickstart" / "run.sqlite") as db:
            trajs = [json.loads(t) for (t,) in db.execute("SELECT trajectory FROM rollouts")]
        assert len(trajs) == 4
        assert all(turn["policy_version"] == 1 for t in trajs for turn in t["turns"])
        stats = httpx.get(
            f"{env_server.url}/stats", headers={"Authorization": f"Bearer {env_server.token}"}
        ).json()
        # every rollout, held-out eval and SFT trajectory ran in a session on that server
        assert stats["sessions_created"] >= len(trajs) + 2 and stats["sessions"] == 0
        assert "env server" not in out  # the job started no env server of its own
    finally:
        server.kill()
        server.wait()
        env_server.stop()


@pytest.mark.slow
@pytest.mark.timeout(2400)  # whole training runs: a busy CI machine takes minutes
def test_train_an_upcycled_moe_in_mxfp8(tmp_path):
    """The README's MoE path end to end: upcycle, then `cheetah train` with train.mxfp8."""
    from cheetah.model.moe import upcycle_checkpoint

    moe = upcycle_checkpoint("tiny", tmp_path / "moe", num_experts=4, top_k=2)
    proc = train(
        tmp_path, "train.steps=1", "train.sft_steps=0", f'model.spec="{moe}"', "train.mxfp8=true"
    )
    out, _ = proc.communicate(timeout=1800)
    assert proc.returncode == 0, out[-3000:]
    summary = json.loads((tmp_path / "quickstart" / "summary.json").read_text())
    assert summary["rollouts"] == 4
    ckpt = tmp_path / "quickstart" / "checkpoints" / "step-1"
    config = json.loads((ckpt / "config.json").read_text())
    assert config["model_type"] == "mixtral" and config["num_local_experts"] == 4
