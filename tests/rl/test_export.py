"""Export: a run's rollouts and an eval report's trajectories as chat-format JSON Lines, read
back as SFT samples of the correct ones only."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cheetah.harness.trajectory import Message, Trajectory
from cheetah.model.loading import default_tokenizer
from cheetah.rl.config import load_config
from cheetah.rl.export import ExportError, export_records, read_records, sft_samples, write_records
from cheetah.rl.store import RunStore

BIN = Path(sys.executable).parent


def traj(task: str, correct: bool | None, reply: str) -> Trajectory:
    t = Trajectory(
        query=f"fix {task}",
        task_id=task,
        policy="p",
        stop_reason="finished",
        messages=[
            Message(role="system", content="You are an agent."),
            Message(role="user", content=f"fix {task}"),
            Message(role="assistant", content=reply),
        ],
    )
    if correct is not None:
        t.grade, t.reward = {"correct": correct}, float(correct)
    return t


@pytest.fixture
def sources(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    store = RunStore(run / "run.sqlite")
    store.add_rollout(0, 0, "a", 0, 1.0, [1], traj("a", True, "Done.").model_dump_json())
    store.add_rollout(1, 0, "a", 1, 0.0, [1], traj("a", False, "Oops.").model_dump_json())
    report = tmp_path / "report"
    path = traj("b", True, "Fixed b.").save(report / "trajectories" / "b.0.json")
    (report / "report.json").write_text(json.dumps({"samples": [{"trajectory": str(path)}]}))
    return run, report


def test_export_round_trips_and_sft_keeps_only_correct_trajectories(sources, tmp_path):
    run, report = sources
    out = tmp_path / "out" / "data.jsonl"
    assert write_records(export_records([run], [report]), out) == 3
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["task_id"], r["source"], r["correct"]) for r in lines] == [
        ("a", "rollout", True),
        ("a", "rollout", False),
        ("b", "eval", True),
    ]
    assert lines[0]["messages"][2] == {"role": "assistant", "content": "Done."}
    assert set(lines[0]) >= {"messages", "task_id", "reward", "correct", "id", "stop_reason"}
    tok = default_tokenizer()
    samples, skipped = sft_samples(read_records(out), tok, max_len=512)
    assert (len(samples), skipped) == (2, 1)
    trained = [tok.decode([t for t, m in zip(s.input_ids, s.loss_mask, strict=True) if m])
               for s in samples]  # fmt: skip
    assert "Done." in trained[0] and "Fixed b." in trained[1] and "Oops" not in "".join(trained)


@pytest.mark.parametrize("suffix,builder", [(".jsonl", "json"), (".parquet", "parquet")])
def test_datasets_load_the_export_and_sft_reads_it_back(sources, tmp_path, suffix, builder):
    datasets = pytest.importorskip("datasets")  # the dev extra installs it
    out = tmp_path / f"data{suffix}"
    assert write_records(export_records(*[[p] for p in sources]), out) == 3
    ds = datasets.load_dataset(
        builder, data_files=str(out), split="train", cache_dir=tmp_path / "c"
    )
    assert ds.num_rows == 3 and ds[2]["task_id"] == "b" and ds[2]["source"] == "eval"
    assert ds[0]["messages"][2] == {"role": "assistant", "content": "Done."}
    assert [r["correct"] for r in ds] == [True, False, True]
    samples, skipped = sft_samples(read_records(out), default_tokenizer(), max_len=512)
    assert (len(samples), skipped) == (2, 1)


def test_bad_inputs_are_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": 3}\n')
    with pytest.raises(ExportError, match=r"bad\.jsonl:2: not a chat record"):
        read_records(bad)
    with pytest.raises(ExportError, match=r"no run\.sqlite"):
        list(export_records([tmp_path], []))
    with pytest.raises(ExportError, match=r"must end in \.jsonl .* or \.parquet"):
        write_records(iter([]), tmp_path / "x.csv")
    (tmp_path / "fake.parquet").write_text("not parquet")
    with pytest.raises(ExportError, match="not a Parquet file"):
        read_records(tmp_path / "fake.parquet")
    cfg = load_config(None, [f'train.sft_data="{bad}"', f"run.out_dir={tmp_path}"])
    from cheetah.rl.job import TrainJob

    with pytest.raises(ValueError, match="not a chat record"):  # before anything starts
        TrainJob(cfg)


def test_cli_export(sources, tmp_path):
    run, report = sources
    out = tmp_path / "d.jsonl"
    r = subprocess.run(
        [BIN / "cheetah", "export", "--run", run, "--eval", report, "--out", out],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0 and "3 trajectories written" in r.stdout, r.stderr
    r = subprocess.run([BIN / "cheetah", "export", "--out", out], capture_output=True, text=True)
    assert r.returncode == 2 and "at least one --run or --eval" in r.stderr
