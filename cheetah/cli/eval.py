"""``cheetah eval``: run an agent on tasks, grade it, and write the report.

Parsing and printing only; the work lives in ``cheetah.tasks.evaluate``. Runs through the
env fleet by default (the servers of ``--env-url``, or one isolated server it starts).

It fails loudly. Bad input exits 2 before any work: a task file that cannot be used, a
filter that matches nothing (an unknown ``--tier`` lists the tiers there are), a model that
cannot be built or a ``--token-file`` that cannot be read, repos the tasks name that are not
fetched (under ``--repos``). A run in which every sample errored (a wrong token, a server
that is down, a setup that never works) exits 1 with the first error's cause on stderr;
the report is still written. Samples that fail their checks, or that a limit stopped, are
results: exit 0. Deliberately left out: stopping early once the first samples errored (each
errored sample is quick; the report lists them all).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from pydantic import ValidationError

from cheetah.cli.flags import LIMIT_FLAGS, add_flags, flag_name, from_flags
from cheetah.cli.task_common import (
    bad_session_args,
    fetched_options,
    load_task_file,
    progress_for,
    session_options,
    task_filters,
    use_fetched_dirs,
    with_sessions,
)
from cheetah.harness.loop import AgentLimits
from cheetah.search.code_search import EmbeddingCodeSearch

EXIT_ALL_ERRORED = 1  # every sample errored: nothing was measured


def _fail(message: str) -> int:
    print(f"cheetah eval: {message}", file=sys.stderr)
    return 2


def _eval(args: argparse.Namespace) -> int:
    from cheetah.harness.policy import PolicyError
    from cheetah.harness.policy_spec import close_policy

    tasks = load_task_file(args.tasks, args, "eval")
    if tasks is None or bad_session_args(args, "eval") or not use_fetched_dirs(args, "eval"):
        return 2
    if not tasks:
        return _fail("no task matches the filters")
    if (missing := _unfetched(tasks)) is not None:
        return _fail(missing)
    try:
        config = _config(args)
    except ValueError as e:
        return _fail(str(e))
    try:
        shared, make_policy = _policies(args)
    except PolicyError as e:
        return _fail(str(e))
    try:
        report = _run(args, tasks, config, make_policy)
    finally:
        close_policy(shared)
    return _report(args, report)


def _unfetched(tasks) -> str | None:
    """What the tasks name that ``tasks fetch`` has not laid out (under ``--repos``), or None."""
    from cheetah.tasks.fetched import unfetched

    missing = unfetched({t.snapshot.package for t in tasks if t.snapshot.package})
    if missing is None:
        return None
    return f"{missing}; or point --repos at the folder `cheetah tasks fetch --out` filled"


def _config(args: argparse.Namespace):
    """The ``EvalConfig`` of the flags; ``ValueError`` naming the flag that is wrong."""
    from cheetah.tasks.evaluate import EvalConfig
    from cheetah.tasks.grader import GraderConfig

    limits = from_flags(AgentLimits, args, LIMIT_FLAGS)
    try:
        return EvalConfig(
            samples=args.samples,
            concurrency=args.concurrency,
            limits=limits,
            grader=GraderConfig(check_timeout_s=args.check_timeout),
            without_tools=args.without_tool or [],
        )
    except ValidationError as e:
        first = e.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "config"
        flag = "--without-tool" if field == "without_tools" else flag_name(field)
        raise ValueError(f"{flag}: {first['msg']}") from None


def _policies(args: argparse.Namespace):
    """(the policy shared by all samples or None, the factory giving each task's policy);
    a bad ``--model`` or ``--token-file`` fails here (``PolicyError``), before any work."""
    from cheetah.harness.policy_spec import policy_from_spec
    from cheetah.tasks.oracle import OraclePolicy

    def build():
        return policy_from_spec(
            args.model,
            model_name=args.model_name,
            temperature=args.temperature,
            max_tokens=args.max_new_tokens,
            token_file=args.token_file,
        )

    if args.model == "oracle":
        return None, OraclePolicy
    shared = build()
    if args.model.startswith("scripted:"):
        # A scripted policy keeps its place in the script, so each sample needs its own;
        # model-backed policies are stateless per call and may be costly to build: share one.
        return shared, lambda task: build()
    return shared, lambda task: shared


def _run(args: argparse.Namespace, tasks, config, make_policy):
    from rich.console import Console

    from cheetah.tasks.evaluate import run_eval

    console = Console(stderr=True)
    progress, bar = progress_for(console, len(tasks) * args.samples, "eval")

    def done(res) -> None:
        mark = "error" if res.error and not res.correct else ("pass" if res.correct else "fail")
        progress.update(bar, advance=1, last=f"{res.task_id}#{res.sample}: {mark}")

    with progress:
        return asyncio.run(
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


def _report(args: argparse.Namespace, report) -> int:
    """Write and print the report; the exit status (``EXIT_ALL_ERRORED`` when nothing ran)."""
    from cheetah.tasks.report import write_report

    report.tasks_file = str(args.tasks)
    paths = write_report(report, args.out)
    s = report.summary
    at_k = f"pass@{args.samples} {s[f'pass@{args.samples}']:.3f}  " if args.samples > 1 else ""
    conv = "-" if s["conventions"] is None else f"{s['conventions']:.3f}"
    print(
        f"pass@1 {s['pass@1']:.3f}  {at_k}conventions {conv}  errors {s['errors']}  "
        f"limits {s['stopped_by_limit']}  ({report.wall_s:.1f} s)"
    )
    for kind, path in paths.items():
        if path is None:
            print(f"{kind}: skipped (install matplotlib for the plot)")
        else:
            print(f"{kind}: {path}")
    errored = [r for r in report.samples if r.error]
    if not errored:
        return 0
    first = errored[0]
    cause = f"{first.task_id}#{first.sample}: {first.error}"
    if len(errored) == len(report.samples):
        print(
            f"cheetah eval: every sample errored ({len(errored)}), so nothing was measured; "
            f"the first: {cause}",
            file=sys.stderr,
        )
        return EXIT_ALL_ERRORED
    print(
        f"cheetah eval: {len(errored)} of {len(report.samples)} samples errored (see "
        f"{paths['markdown']}); the first: {cause}",
        file=sys.stderr,
    )
    return 0


def add_eval_command(subparsers) -> argparse.ArgumentParser:
    """``cheetah eval --tasks FILE --model MODEL --samples K --concurrency N --out DIR``."""
    from cheetah.harness.policy_spec import MODEL_HELP

    e = subparsers.add_parser(
        "eval",
        help="run an agent on tasks, grade it, and report pass@k and tool use",
        description="Run the agent K times on each task, grade each run with the hidden checks "
        "and write report.json, report.md and report.png (pass@1, pass@k, conventions, tool "
        "calls, parallelism, exploration before the first edit, edits, tokens, wall time, "
        "how the runs stopped) plus every trajectory under DIR/trajectories. Agents, setup "
        "commands and checks run in sessions on env servers through the fleet client "
        "(failover when a server dies); with no --env-url, one isolated server is started "
        "for the run.",
        epilog="Exit status: 0 the run was measured (samples that fail or hit a limit "
        "included); 1 every sample errored (the first error's cause is printed); 2 bad input.",
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
    e.add_argument(
        "--token-file",
        type=Path,
        help="file holding the bearer token of an OpenAI-compatible --model server (cheetah "
        "serve --token-file); default: $CHEETAH_API_TOKEN, then $OPENAI_API_KEY",
    )
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
    fetched_options(e)
    task_filters(e)
    e.set_defaults(func=_eval)
    return e


def add_commands(sub: argparse._SubParsersAction) -> None:
    add_eval_command(sub)
