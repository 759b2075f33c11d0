"""``cheetah``: one entry point, one module per verb. Parsing, choosing the pieces a verb
runs with (workspace, sessions, code search) and printing; the work lives in packages.

Each verb module has ``add_commands(sub)``, which adds its parser and sets ``func`` (the
handler, returning the exit code). The CLI is the top layer: it may import any package.
"""

from __future__ import annotations

import argparse
import os
import sys

# Every process of a run shares the machine's cores with the others (the engine, the trainer,
# rollout workers, sandboxed test runs). OpenMP threads that spin while they wait hold a core
# another process needs: a decode step of the engine took 3x as long beside one busy process
# (BENCHMARKS.md, "Threads that wait"). Passive waiting costs little on free cores. Set before
# torch loads (OpenMP reads it once) and inherited by child processes (Ray's local cluster,
# the env server); an OMP_WAIT_POLICY already set wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from cheetah import __version__
from cheetah.cli import (
    agent,
    dashboard,
    doctor,
    env,
    eval,
    export,
    moe,
    search,
    tasks,
    tools,
    train,
)

VERB_MODULES = (agent, tools, train, env, dashboard, moe, tasks, eval, export, search, doctor)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cheetah",
        description="Fast tool-using coding agents: run the agent, its tools, and its training.",
    )
    parser.add_argument("--version", action="version", version=f"cheetah {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for module in VERB_MODULES:
        module.add_commands(sub)
    try:  # the OpenAI-compatible server needs fastapi/uvicorn, which a slim install may lack
        from cheetah.cli import serve
    except ImportError:
        pass
    else:
        serve.add_commands(sub)
    return parser


# What the `ml` extra installs: a verb that needs one of these says so instead of a traceback.
ML_EXTRA = {
    "torch", "transformers", "numpy", "ray", "safetensors", "gguf", "matplotlib", "pyarrow",
    "tensorboardX", "wandb",
}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from cheetah.stop import Stopped, exit_within

    if argv is None:  # the process is the CLI's: a stop that hangs ends it (cheetah/stop.py)
        exit_within()

    try:
        return args.func(args)
    except Stopped as e:  # SIGTERM/SIGINT while sessions ran: they are closed (cheetah/stop.py)
        print(f"cheetah {args.verb}: {e}; its sessions are closed", file=sys.stderr)
        return e.exit_status
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in ML_EXTRA:
            raise
        from cheetah.install_hint import extra_hint

        print(
            f"cheetah {args.verb}: needs {e.name}, which is not installed; install the 'ml' "
            f"extra: {extra_hint('ml')} (or `make install` in the checkout)",
            file=sys.stderr,
        )
        return 2
