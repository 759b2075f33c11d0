"""``cheetah export``: a run's rollouts and eval reports' trajectories as chat-format JSON Lines
or Parquet."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _export(args: argparse.Namespace) -> int:
    from cheetah.rl.export import ExportError, export_records, write_records

    if not args.run and not args.eval:
        print("cheetah export: give at least one --run or --eval directory", file=sys.stderr)
        return 2
    try:
        n = write_records(export_records(args.run or [], args.eval or []), args.out)
    except ExportError as e:
        print(f"cheetah export: {e}", file=sys.stderr)
        return 2
    print(f"{n} trajectories written to {args.out}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write trajectories as chat-format JSON Lines or Parquet (for other trainers, or "
        "cheetah sft)",
        description="One record per trajectory: messages (role, content), task_id, reward, "
        "correct, source (rollout or eval), id, policy, stop_reason. datasets.load_dataset"
        "('json' or 'parquet', data_files=FILE) reads the file; `cheetah sft --data FILE` trains on the "
        "correct ones.",
    )
    p.add_argument("--run", type=Path, action="append", help="a training run directory")
    p.add_argument("--eval", type=Path, action="append", help="a `cheetah eval` report directory")
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the file to write: .jsonl, or .parquet (needs pyarrow, in the ml extra)",
    )
    p.set_defaults(func=_export)
