"""``cheetah moe upcycle``: a dense checkpoint turned into a mixture of experts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _moe_upcycle(args: argparse.Namespace) -> int:
    from cheetah.model.loading import ModelLoadError
    from cheetah.model.moe import UpcycleError, upcycle_checkpoint

    try:
        out = upcycle_checkpoint(args.model, args.out, args.experts, args.top_k, args.seed)
    except (ModelLoadError, UpcycleError) as e:
        print(f"cheetah moe upcycle: {e}", file=sys.stderr)
        return 2
    print(f"{args.experts} experts (top {args.top_k}) written to {out}")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    moe = sub.add_parser("moe", help="mixture-of-experts checkpoints")
    moe_sub = moe.add_subparsers(dest="moe_verb", metavar="ACTION", required=True)
    up = moe_sub.add_parser(
        "upcycle",
        help="turn a dense Llama-style checkpoint into a Mixtral MoE (HF format)",
        description="Copy each decoder MLP into --experts experts and add a router with small "
        "random weights: at step 0 the MoE computes what the dense model did. The output is a "
        "MixtralForCausalLM directory usable as --model / model.spec (train.mxfp8 trains it "
        "with MXFP8 GEMMs).",
    )
    up.add_argument("--model", default="default", help="default | tiny | an HF directory")
    up.add_argument("--experts", type=int, default=4, help="experts per layer")
    up.add_argument("--top-k", type=int, default=2, help="experts each token uses")
    up.add_argument("--seed", type=int, default=0, help="seed of the router weights")
    up.add_argument("--out", type=Path, required=True, help="directory to write")
    up.set_defaults(func=_moe_upcycle)
