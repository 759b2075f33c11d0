"""``cheetah export``: a run's rollouts and eval reports' trajectories as chat-format JSON Lines
or Parquet; or, with ``--gguf``, a checkpoint as a GGUF file (``model/gguf_export.py``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _export_gguf(args: argparse.Namespace) -> int:
    from cheetah.model.gguf_export import GgufExportError, export_gguf
    from cheetah.model.loading import ModelLoadError, default_gguf_path, load_model

    if args.run or args.eval:
        print("cheetah export: --gguf writes a model; leave out --run and --eval", file=sys.stderr)
        return 2
    if args.out.suffix != ".gguf":
        print(f"cheetah export: --out {args.out} should end in .gguf", file=sys.stderr)
        return 2
    try:
        loaded = load_model(args.gguf)
        print(f"writing {loaded.name} as {args.gguf_type} GGUF to {args.out}", flush=True)
        export_gguf(
            loaded.model,
            loaded.tokenizer,
            args.out,
            args.gguf_type,
            name=loaded.name,
            reference=default_gguf_path(),
        )
    except (ModelLoadError, GgufExportError) as e:
        print(f"cheetah export: {e}", file=sys.stderr)
        return 2
    print(
        f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB (llama.cpp, ollama and cheetah load it)"
    )
    return 0


def _export(args: argparse.Namespace) -> int:
    from cheetah.rl.export import ExportError, export_records, write_records

    if args.gguf:
        return _export_gguf(args)
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
        "cheetah sft), or a checkpoint as GGUF (--gguf)",
        description="One record per trajectory: messages (role, content), task_id, reward, "
        "correct, source (rollout or eval), id, policy, stop_reason. datasets.load_dataset"
        "('json' or 'parquet', data_files=FILE) reads the file; `cheetah sft --data FILE` trains on the "
        "correct ones. With --gguf CHECKPOINT, writes that model (a run's checkpoints/... "
        "directory, `default`, `tiny`) as a GGUF file for llama.cpp instead.",
    )
    p.add_argument("--run", type=Path, action="append", help="a training run directory")
    p.add_argument("--eval", type=Path, action="append", help="a `cheetah eval` report directory")
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="the file to write: .jsonl, or .parquet (needs pyarrow, in the ml extra); "
        ".gguf with --gguf",
    )
    p.add_argument("--gguf", metavar="CHECKPOINT", help="a model to write as GGUF (Llama family)")
    p.add_argument(
        "--gguf-type",
        choices=["f32", "f16", "q8_0"],
        default="f16",
        help="how matrices are stored: f32 (exact), f16 (default), q8_0 (8-bit blocks)",
    )
    p.set_defaults(func=_export)
