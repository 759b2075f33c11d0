"""Trajectories out, as data other trainers take, and back in as SFT data.

``export_records`` reads a training run's rollouts (``<run>/run.sqlite``) and the
trajectories of ``cheetah eval`` reports (``<report>/report.json`` and the files it
lists) into one record per trajectory in the chat "messages" format::

    {"messages": [{"role": "system", "content": ...}, {"role": "user", ...}, ...],
     "task_id": ..., "reward": ..., "correct": ..., "source": "rollout" | "eval",
     "id": ..., "policy": ..., "stop_reason": ...}

``write_records`` writes them as JSON Lines, or as Parquet when the file ends in
``.parquet`` (pyarrow, from the ``ml`` extra); ``datasets.load_dataset("json" | "parquet",
data_files=FILE)`` reads either as is. ``sft_samples`` turns such a file back into SFT
samples, keeping only the trajectories the grader passed (rejection sampling), so the
runs of a stronger model through ``cheetah eval`` become the warm start of a small one
(``cheetah sft --data FILE``).

Deliberately left out: per-turn token ids and logprobs (engine-specific; a different
tokenizer could not use them), and streaming Parquet writes (a run's records fit in memory).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cheetah.harness.trajectory import Message, Trajectory
from cheetah.rl.data import Sample, sample_from_trajectory


class ExportError(ValueError):
    """A run or report that cannot be read, or a record that is not a chat record."""


def record_of(traj: Trajectory, source: str) -> dict[str, Any]:
    return {
        "messages": [{"role": m.role, "content": m.content} for m in traj.messages],
        "task_id": traj.task_id,
        "reward": traj.reward,
        "correct": traj.solved if traj.grade is not None else None,
        "source": source,
        "id": traj.id,
        "policy": traj.policy,
        "stop_reason": traj.stop_reason,
    }


def _run_trajectories(run_dir: Path) -> Iterator[Trajectory]:
    db = run_dir / "run.sqlite"
    if not db.is_file():
        raise ExportError(f"{run_dir} holds no training run (no run.sqlite)")
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT trajectory FROM rollouts WHERE trajectory IS NOT NULL ORDER BY rollout_id"
        ).fetchall()
    for (text,) in rows:
        yield Trajectory.model_validate_json(text)


def _eval_trajectories(report_dir: Path) -> Iterator[Trajectory]:
    report = report_dir / "report.json"
    if not report.is_file():
        raise ExportError(f"{report_dir} holds no eval report (no report.json)")
    for sample in json.loads(report.read_text(encoding="utf-8")).get("samples", []):
        if sample.get("trajectory"):
            yield Trajectory.load(sample["trajectory"])


def export_records(runs: list[Path], reports: list[Path]) -> Iterator[dict[str, Any]]:
    for run in runs:
        for traj in _run_trajectories(run):
            yield record_of(traj, "rollout")
    for report in reports:
        for traj in _eval_trajectories(report):
            yield record_of(traj, "eval")


SUFFIXES = (".jsonl", ".json", ".parquet")


def _parquet():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        from cheetah.install_hint import extra_hint

        raise ExportError(
            f"Parquet needs pyarrow, from the 'ml' extra ({extra_hint('ml')}); or write .jsonl"
        ) from None
    return pa, pq


def write_records(records: Iterator[dict[str, Any]], out: Path) -> int:
    """Write JSON Lines or Parquet (by ``out``'s suffix) through a temporary file: never
    half written."""
    if out.suffix not in SUFFIXES:
        raise ExportError(f"{out}: the file must end in .jsonl (JSON Lines) or .parquet")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    if out.suffix == ".parquet":
        pa, pq = _parquet()
        rows = list(records)
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        tmp.replace(out)
        return len(rows)
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")
            n += 1
    tmp.replace(out)
    return n


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number, record) from JSON Lines or Parquet; a JSON line that does not parse is
    yielded as the exception, so the caller names its line."""
    if path.suffix == ".parquet":
        _, pq = _parquet()
        try:
            table = pq.read_table(path)
        except Exception as e:  # pyarrow raises its own types for a file that is not Parquet
            raise ExportError(f"{path}: not a Parquet file ({e})") from None
        yield from enumerate(table.to_pylist(), 1)
        return
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                yield no, json.loads(line)
            except ValueError as e:
                yield no, e


def read_records(path: Path) -> list[dict[str, Any]]:
    """Chat records from a JSON Lines or Parquet file; ``ExportError`` naming the row that
    is not one."""
    if not path.is_file():
        raise ExportError(f"{path} does not exist")
    records = []
    for no, record in _rows(path):
        try:
            if isinstance(record, Exception):
                raise record
            [Message(**m) for m in record["messages"]]
        except (ValueError, KeyError, TypeError) as e:
            raise ExportError(f"{path}:{no}: not a chat record ({type(e).__name__}: {e})") from None
        records.append(record)
    return records


def sft_samples(
    records: list[dict[str, Any]], tokenizer: Any, max_len: int
) -> tuple[list[Sample], int]:
    """SFT samples of the records the grader passed (``correct`` true); and how many were
    left out (wrong, ungraded, or with no assistant message)."""
    samples, skipped = [], 0
    for r in records:
        messages = [Message(role=m["role"], content=m["content"]) for m in r["messages"]]
        if r.get("correct") is not True or not any(m.role == "assistant" for m in messages):
            skipped += 1
            continue
        query = next((m.content for m in messages if m.role == "user"), "")
        traj = Trajectory(query=query, task_id=r.get("task_id"), messages=messages)
        samples.append(
            sample_from_trajectory(traj, tokenizer, need_logprobs=False, max_len=max_len)
        )
    return samples, skipped
