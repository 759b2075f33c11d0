"""``cheetah train|sft``: the main job (SFT warm start, RL, held-out evals) from a TOML config."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from cheetah import bundled


def _train(args: argparse.Namespace) -> int:
    from cheetah.rl.config import ConfigError, load_config

    try:
        sets = list(args.set or [])
        if getattr(args, "data", None):
            sets.append(f'train.sft_data="{args.data}"')
        cfg = load_config(args.config, sets)
    except ConfigError as e:
        print(f"cheetah {args.verb}: {e}", file=sys.stderr)
        return 2
    from cheetah.rl.job import TrainJob

    try:
        job = TrainJob(cfg, resume=getattr(args, "resume", False))
    except (FileExistsError, ValueError) as e:
        print(f"cheetah {args.verb}: {e}", file=sys.stderr)
        return 2
    if args.verb == "sft":
        print(f"sft checkpoint: {asyncio.run(job.sft_only())}")
        return 0
    from cheetah.stop import Stopped, abandoned

    try:
        summary = asyncio.run(job.run())  # the driver has printed the stage table
    except Stopped as e:
        import ray

        ray.shutdown()  # its workers, raylet and agents: nothing of the run outlives it
        print(
            f"cheetah {args.verb}: {e}; run directory {job.dir} "
            "(`cheetah train ... --resume` continues from its newest checkpoint)",
            file=sys.stderr,
        )
        if left := abandoned():  # a trainer step in flight: end without waiting for it
            print(f"cheetah {args.verb}: left in flight: {', '.join(left)}", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(e.exit_status)  # finalizing beside torch's thread aborts (cheetah/stop.py)
        return e.exit_status
    print(f"summary: {summary['run_dir']}/summary.json (wall {summary['wall_s']:.0f} s)")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    for verb, text in (
        ("train", "RL training: rollouts on Ray, GRPO-style trainer, checkpoints (the main job)"),
        ("sft", "warm start: supervised steps on oracle trajectories, saved as a checkpoint"),
    ):
        p = sub.add_parser(verb, help=text, description=text)
        p.add_argument(
            "--config",
            type=Path,
            help="TOML config file, or a bundled one by name: "
            + ", ".join(bundled.names(bundled.CONFIGS, ".toml")),
        )
        p.add_argument(
            "--set",
            action="append",
            metavar="SECTION.KEY=VALUE",
            help="override one setting, e.g. --set train.steps=2 (repeatable)",
        )
        if verb == "sft":
            p.add_argument(
                "--data",
                type=Path,
                help="train on the correct trajectories of this `cheetah export` file instead "
                "of oracle demonstrations (same as --set train.sft_data=FILE)",
            )
        if verb == "train":
            p.add_argument(
                "--resume",
                action="store_true",
                help="continue the run in the run directory from its newest checkpoint",
            )
        p.set_defaults(func=_train)
