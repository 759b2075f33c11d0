"""Metric loggers besides the run store: TensorBoard and Weights & Biases.

``train.loggers = ["tensorboard", "wandb"]`` (default: none) sends what the run store gets
to the tools RL users already read: every per-step metric (reward, pass rate, loss,
behaviour, truncation, timings) under its own name at its RL step, each held-out stage's
pass rate, interval and behaviour (``stage/<name>/...``), and at the end the stage table
as text plus the McNemar p-values.

- ``tensorboard``: event files in ``<run>/tensorboard`` written with tensorboardX (one
  small package; the files are TensorBoard's own format: ``tensorboard --logdir runs``).
- ``wandb``: a W&B run in ``<run>/wandb``, offline unless ``WANDB_MODE`` says otherwise,
  so it needs no network or account; ``wandb sync <run>/wandb/offline-run-*`` uploads it
  later. The run's resolved config is the W&B config.

Deliberately left out: logging trajectories or histograms (the dashboard shows
trajectories; ``cheetah export`` is the way to take them elsewhere).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Literal, Protocol

LoggerName = Literal["tensorboard", "wandb"]


class MetricLogger(Protocol):
    def log_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def log_stage(self, stage: dict[str, Any]) -> None: ...

    def log_summary(self, summary: dict[str, Any], table: str) -> None: ...

    def close(self) -> None: ...


def _stage_scalars(stage: dict[str, Any]) -> dict[str, float]:
    """A held-out stage's numbers, flat: pass rate, its interval, tasks, behaviour."""
    name = stage["name"]
    out = {f"stage/{name}/pass_rate": stage["pass_rate"], f"stage/{name}/tasks": stage["tasks"]}
    lo, hi = stage.get("ci95", (math.nan, math.nan))
    out |= {f"stage/{name}/ci95_low": lo, f"stage/{name}/ci95_high": hi}
    for key, value in (stage.get("behaviour") or {}).items():
        if isinstance(value, int | float):
            out[f"stage/{name}/{key}"] = float(value)
    if isinstance(stage.get("call_success"), int | float):
        out[f"stage/{name}/call_success"] = float(stage["call_success"])
    return out


class TensorBoardLogger:
    def __init__(self, run_dir: Path) -> None:
        SummaryWriter = _require("tensorboard").SummaryWriter
        self.dir = run_dir / "tensorboard"
        self.writer = SummaryWriter(logdir=str(self.dir))
        self._stages = 0

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(f"train/{key}", float(value), step)
        self.writer.flush()

    def log_stage(self, stage: dict[str, Any]) -> None:
        for key, value in _stage_scalars(stage).items():
            self.writer.add_scalar(key, float(value), self._stages)
        self._stages += 1
        self.writer.flush()

    def log_summary(self, summary: dict[str, Any], table: str) -> None:
        self.writer.add_text("summary/stages", f"```\n{table}\n```", 0)
        p = summary.get("mcnemar_p")
        if isinstance(p, int | float):
            self.writer.add_scalar("summary/mcnemar_p_final_vs_base", float(p), 0)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, run_dir: Path, config: dict[str, Any], name: str) -> None:
        wandb = _require("wandb")
        os.environ.setdefault("WANDB_SILENT", "true")
        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "cheetah"),
            name=name,
            dir=str(run_dir),
            config=config,
            mode=os.environ.get("WANDB_MODE", "offline"),  # type: ignore[arg-type]
            reinit="finish_previous",
        )

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log({f"train/{k}": float(v) for k, v in metrics.items()} | {"step": step})

    def log_stage(self, stage: dict[str, Any]) -> None:
        self.run.log(_stage_scalars(stage))

    def log_summary(self, summary: dict[str, Any], table: str) -> None:
        rows = [[s["name"], s["tasks"], s["pass_rate"]] for s in summary.get("stages", [])]
        self.run.log({"summary/stages": self.wandb.Table(["stage", "tasks", "pass_rate"], rows)})
        if isinstance(summary.get("mcnemar_p"), int | float):
            self.run.summary["mcnemar_p_final_vs_base"] = summary["mcnemar_p"]
        self.run.summary["stage_table"] = table

    def close(self) -> None:
        self.run.finish()


_MODULES: dict[str, str] = {"tensorboard": "tensorboardX", "wandb": "wandb"}


def _require(name: LoggerName) -> Any:
    """The module behind logger ``name``; ``ValueError`` naming the package when missing."""
    import importlib

    module = _MODULES[name]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ValueError(
            f"train.loggers has {name!r} but {module} is not installed "
            f"(pip install {module}; `make install` does it)"
        ) from None


def check_available(names: list[LoggerName]) -> None:
    """Every chosen logger's package imports (checked before a run starts, not after its
    first hour); ``ValueError`` naming the package otherwise."""
    for n in dict.fromkeys(names):
        _require(n)


def make_loggers(
    names: list[LoggerName], run_dir: Path, config: dict[str, Any], name: str
) -> list[MetricLogger]:
    out: list[MetricLogger] = []
    for n in dict.fromkeys(names):
        out.append(
            TensorBoardLogger(run_dir) if n == "tensorboard" else WandbLogger(run_dir, config, name)
        )
    return out
