"""``cheetah eval``: run an agent on tasks, grade it, and write the report.

Parsing and printing only; the work lives in ``cheetah.tasks.evaluate``. Runs through the
env fleet by default (the servers of ``--env-url``, or one isolated server it starts).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from pydantic import ValidationError

from cheetah.cli.flags import LIMIT_FLAGS, add_flags, from_flags
from cheetah.cli.task_common import (
    bad_session_args,
    load_task_file,
    progress_for,
    session_options,
    task_filters,
    with_sessions,
)
from cheetah.harness.loop import AgentLimits
from cheetah.search.code_search import EmbeddingCodeSearch


def _eval(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cheetah.harness.policy import PolicyError
    from cheetah.harness.policy_spec import close_policy, policy_from_spec
    from cheetah.tasks.evaluate import EvalConfig, run_eval
    from cheetah.tasks.grader import GraderConfig
    from cheetah.tasks.oracle import OraclePolicy
    from cheetah.tasks.report import write_report

    tasks = load_task_file(args.tasks, args, "eval")
    if tasks is None or bad_session_args(args, "eval"):
        return 2
    if not tasks:
        print("cheetah eval: no task matches the filters", file=sys.stderr)
        return 2

    def build():
        return policy_from_spec(
            args.model,
            model_name=args.model_name,
            temperature=args.temperature,
            max_tokens=args.max_new_tokens,
        )

    shared = None
    if args.model != "oracle":
        try:
            shared = build()  # fail fast on a bad --model
        except PolicyError as e:
            print(f"cheetah eval: {e}", file=sys.stderr)
            return 2

    def make_policy(task):
        if args.model == "oracle":
            return OraclePolicy(task)
        # A scripted policy keeps its place in the script, so each sample needs its own;
        # model-backed policies are stateless per call and may be costly to build: share one.
        return build() if args.model.startswith("scripted:") else shared

    try:
        limits = from_flags(AgentLimits, args, LIMIT_FLAGS)
    except ValueError as e:
        print(f"cheetah eval: {e}", file=sys.stderr)
        return 2
    try:
        config = EvalConfig(
            samples=args.samples,
            concurrency=args.concurrency,
            limits=limits,
            grader=GraderConfig(check_timeout_s=args.check_timeout),
            without_tools=args.without_tool or [],
        )
    except ValidationError as e:
        print(f"cheetah eval: --without-tool: {e.errors()[0]['msg']}", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    progress, bar = progress_for(console, len(tasks) * args.samples, "eval")

    def done(res) -> None:
        mark = "error" if res.error and not res.correct else ("pass" if res.correct else "fail")
        progress.update(bar, advance=1, last=f"{res.task_id}#{res.sample}: {mark}")

    try:
        with progress:
            report = asyncio.run(
                with_sessions(
                    args,
                    lambda sessions: run_eval(
                        tasks,
                        make_policy,
                        sessions,
                        config,
                        model=args.model,
                        out_dir=args.out,
                        on_sample=done,
                    ),
                    EmbeddingCodeSearch(),
                )
            )
    finally:
        close_policy(shared)
    report.tasks_file = str(args.tasks)
    paths = write_report(report, args.out)
    s = report.summary
    at_k = f"pass@{args.samples} {s[f'pass@{args.samples}']:.3f}  " if args.samples > 1 else ""
    conv = "-" if s["conventions"] is None else f"{s['conventions']:.3f}"
    print(
        f"pass@1 {s['pass@1']:.3f}  {at_k}conventions {conv}  errors {s['errors']}  "
        f"({report.wall_s:.1f} s)"
    )
    for kind, path in paths.items():
        if path is None:
            print(f"{kind}: skipped (install matplotlib for the plot)")
        else:
            print(f"{kind}: {path}")
    return 0


def add_eval_command(subparsers) -> argparse.ArgumentParser:
    """``cheetah eval --tasks FILE --model MODEL --samples K --concurrency N --out DIR``."""
    from cheetah.harness.policy_spec import MODEL_HELP

    e = subparsers.add_parser(
        "eval",
        help="run an agent on tasks, grade it, and report pass@k and tool use",
        description="Run the agent K times on each task, grade each run with the hidden checks "
        "and write report.json, report.md and report.png (pass@1, pass@k, conventions, tool "
        "calls, parallelism, exploration before the first edit, edits, tokens, wall time) "
        "plus every trajectory under DIR/trajectories. Agents, setup commands and checks run "
        "in sessions on env servers through the fleet client (failover when a server dies); "
        "with no --env-url, one isolated server is started for the run.",
    )
    e.add_argument(
        "--tasks",
        type=Path,
        required=True,
        help="task file (JSONL), or a bundled set: benchmark (55 tasks), curriculum (2,114)",
    )
    e.add_argument(
        "--model",
        required=True,
        help=MODEL_HELP + "; or 'oracle' (applies each task's reference patch: checks the "
        "pipeline, pass@1 should be 1.0)",
    )
    e.add_argument("--samples", type=int, default=1, help="samples per task (k of pass@k)")
    e.add_argument("--concurrency", type=int, default=2, help="samples running at once")
    e.add_argument("--out", type=Path, required=True, help="report directory")
    e.add_argument("--model-name", help="model name to send to the server (default: its first)")
    e.add_argument("--temperature", type=float, default=0.0)
    e.add_argument("--max-new-tokens", type=int, default=2048, help="tokens per assistant message")
    add_flags(e, AgentLimits, LIMIT_FLAGS)
    e.add_argument("--check-timeout", type=float, default=120.0, help="seconds per check run")
    e.add_argument(
        "--without-tool",
        action="append",
        metavar="NAME",
        help="take this tool away from the agent (repeatable; an ablation, e.g. "
        "codebase_search): the system prompt leaves it out and a call to it is an unknown tool",
    )
    session_options(e, "fleet")
    task_filters(e)
    e.set_defaults(func=_eval)
    return e


def add_commands(sub: argparse._SubParsersAction) -> None:
    add_eval_command(sub)
