"""Metric loggers: what a run sends to TensorBoard is read back from the event file; W&B
writes an offline run without network."""

import struct
import sys

import pytest

from cheetah.rl.loggers import TensorBoardLogger, WandbLogger, check_available, make_loggers

STAGE = {
    "name": "base",
    "tasks": 4,
    "solved": 1,
    "pass_rate": 0.25,
    "ci95": [0.05, 0.7],
    "behaviour": {"parse_rate": 0.5, "label": "text is skipped"},
    "call_success": 0.75,
}
SUMMARY = {"stages": [STAGE], "mcnemar_p": 0.03}


def read_events(directory):
    """Every event of the TFRecord files under ``directory`` (length, crc, data, crc)."""
    from tensorboardX.proto.event_pb2 import Event

    events = []
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        at = 0
        while at < len(data):
            (n,) = struct.unpack_from("<Q", data, at)
            at += 12
            events.append(Event.FromString(data[at : at + n]))
            at += n + 4
    return events


def test_tensorboard_events_hold_the_metrics_stages_and_summary(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    logger.log_metrics(1, {"reward_mean": 0.5, "pass_rate": 0.25})
    logger.log_metrics(2, {"reward_mean": 0.75, "pass_rate": 0.5})
    logger.log_stage(STAGE)
    logger.log_summary(SUMMARY, "stage  tasks  solved\nbase   4      1")
    logger.close()
    scalars = {
        (v.tag, e.step): v.simple_value
        for e in read_events(tmp_path / "tensorboard")
        for v in e.summary.value
        if v.HasField("simple_value")
    }
    assert scalars[("train/reward_mean", 2)] == 0.75 and scalars[("train/pass_rate", 1)] == 0.25
    assert scalars[("stage/base/pass_rate", 0)] == 0.25
    assert scalars[("stage/base/parse_rate", 0)] == 0.5
    assert scalars[("stage/base/ci95_high", 0)] == pytest.approx(0.7)
    assert scalars[("summary/mcnemar_p_final_vs_base", 0)] == pytest.approx(0.03)
    texts = [v for e in read_events(tmp_path / "tensorboard") for v in e.summary.value]
    assert any(v.tag.startswith("summary/stages") for v in texts)


def test_wandb_runs_offline_into_the_run_directory(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    logger = WandbLogger(tmp_path, {"train": {"lr": 1e-5}}, "t")
    logger.log_metrics(1, {"reward_mean": 0.5})
    logger.log_stage(STAGE)
    logger.log_summary(SUMMARY, "table")
    logger.close()
    [run] = list((tmp_path / "wandb").glob("offline-run-*"))
    assert list(run.glob("run-*.wandb")), list(run.iterdir())


def test_a_missing_logger_package_is_named_before_the_run(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)
    with pytest.raises(ValueError, match="pip install tensorboardX"):
        check_available(["tensorboard"])
    assert make_loggers([], tmp_path, {}, "x") == []
