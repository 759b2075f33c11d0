"""``cheetah tasks validate|generate|curriculum`` (and ``fetch|import|export`` from
``cli/task_io.py``): parsing and printing; the work lives in ``cheetah.tasks``. All three run
the repos' tests in sandbox sessions unless told ``--sandbox local`` (trusted repos only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from cheetah.cli.task_common import (
    bad_session_args,
    load_task_file,
    progress_for,
    session_options,
    task_filters,
    with_sessions,
)
from cheetah.cli.task_io import add_io_verbs
from cheetah.progress import Pace


def _validate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cheetah.tasks.grader import GraderConfig
    from cheetah.tasks.validate import validate_tasks

    tasks = load_task_file(args.file, args, "tasks validate")
    if tasks is None or bad_session_args(args, "tasks validate"):
        return 2
    if args.test_command:  # for tasks that name none; a task's own command wins
        tasks = [t if t.test_command else t.model_copy(update={"test_command": args.test_command})
                 for t in tasks]  # fmt: skip
    console = Console(stderr=True)
    progress, bar = progress_for(console, len(tasks), "validating")

    def done(v) -> None:
        progress.update(bar, advance=1, last=f"{v.task_id}: {'ok' if v.ok else 'FAILED'}")
        if not v.ok:
            progress.console.print(f"[red]{v.task_id}[/red]:")
            for p in v.problems:
                progress.console.print(f"  - {p}")

    config = GraderConfig(check_timeout_s=args.check_timeout)
    with progress:
        results = asyncio.run(
            with_sessions(
                args,
                lambda sessions: validate_tasks(
                    tasks, sessions, config, concurrency=args.concurrency, on_done=done
                ),
            )
        )
    bad = [v for v in results if not v.ok]
    print(f"{len(results) - len(bad)}/{len(results)} tasks valid", file=sys.stdout)
    return 1 if bad else 0


def _generate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cheetah.tasks.generate import GenerateConfig, GenerateError, generate_tasks
    from cheetah.tasks.loaders import dump_tasks

    console = Console(stderr=True)
    config = GenerateConfig(
        max_mutants=args.max_mutants,
        max_tasks=args.max_tasks,
        test_command=args.test_command,
        test_paths=args.test_path,
        timeout_s=args.timeout,
        seed=args.seed,
        concurrency=args.concurrency,
        src=args.src or [],
        heldout_fraction=args.heldout_fraction,
        id_prefix=args.id_prefix,
        env=str(args.env.resolve()) if args.env else None,
    )
    if bad_session_args(args, "tasks generate"):
        return 2
    progress, bar = progress_for(console, 1, "mutants")

    def tick(total: int, done: int, kept: int) -> None:
        progress.update(bar, total=total, completed=done, last=f"{kept} kept")

    def job(sessions):
        return generate_tasks(args.repo, config, on_progress=tick, sessions=sessions)

    try:
        with progress:
            result = asyncio.run(_in_sessions(args, job))
    except GenerateError as e:
        print(f"cheetah tasks generate: {e}", file=sys.stderr)
        return 2
    dump_tasks(result.tasks, args.out)
    s = result.stats
    print(f"tests: {result.runner}; baseline {result.baseline_s:.1f} s, {result.limit_s:g} s "
          "per later run")  # fmt: skip
    print(
        f"{len(result.tasks)} tasks written to {args.out} "
        f"({s['candidates']} candidate mutants, {s['tried']} tried, {s['killed']} made tests "
        f"fail, {s['duplicates']} duplicates, {s['survived']} survived, {s['broken']} broke "
        f"the suite, {s['timeouts']} timed out)"
    )
    return 0 if result.tasks else 1


async def _in_sessions(args: argparse.Namespace, job):
    """``job(sessions)`` in the sandbox ``args`` asks for; ``--sandbox local`` (trusted repos
    only) gives ``None``: the generator then runs tests in copies on this host."""
    if args.sandbox == "local" and not args.env_url:
        return await job(None)
    return await with_sessions(args, job)


def suite_options(p: argparse.ArgumentParser) -> None:
    """How the repo's tests run and for how long (``GenerateConfig``'s fields of the same names)."""
    p.add_argument(
        "--test-command",
        help="a pytest command for the repos' tests (default: found per repo, see "
        "tasks/suite_layout.py); stored in each task, which the grader runs with its own "
        "arguments and the test files appended",
    )
    p.add_argument(
        "--test-path",
        action="append",
        default=[],
        help="a test file or folder given to pytest (repeat; default: found per repo)",
    )
    from cheetah.tasks.generate import GenerateConfig

    d = {k: f.default for k, f in GenerateConfig.model_fields.items()}
    p.add_argument(
        "--timeout",
        type=float,
        help=f"seconds for every test run (default: measured; the first run may take "
        f"{d['first_run_limit_s']:g} s, every later run {d['limit_factor']:g}x its time, at "
        f"least {d['limit_floor_s']:g} s)",
    )


GENERATE_SANDBOX_HELP = (
    "The repo's tests run in sandbox sessions (isolated here, or env servers through a "
    "fleet); --sandbox local runs them UNSANDBOXED in copies on this host, for repos you trust."
)


def _add_validate(sub: argparse._SubParsersAction) -> None:
    v = sub.add_parser(
        "validate",
        help="check that each task's checks fail as given and pass with its reference patch",
        description="For each task in FILE (JSONL, cheetah or SWE-bench records): its "
        "fail-to-pass checks must fail and pass-to-pass checks pass on the snapshot, and all "
        "must pass with the reference patch applied. Exit status 1 if any task is invalid. "
        "Checks run in isolated sessions (the default) or on env servers (fleet); --sandbox "
        "local runs them UNSANDBOXED in copies on this host, for task files you trust.",
    )
    v.add_argument("file", type=Path, help="task file (JSONL), or a bundled set's name")
    v.add_argument("--concurrency", type=int, default=2, help="tasks validated at once")
    v.add_argument("--check-timeout", type=float, default=120.0, help="seconds per check run")
    v.add_argument(
        "--test-command",
        help="pytest command for the test-id checks of tasks that name none (the grader "
        "appends its own arguments and the test files); eval grades with the task file's own, "
        "so write it there once the tasks validate",
    )
    session_options(v, "isolated")
    task_filters(v)
    v.set_defaults(func=_validate)


def add_tasks_command(subparsers) -> argparse.ArgumentParser:
    """``cheetah tasks validate FILE`` and ``cheetah tasks generate --repo PATH --out FILE``."""
    tasks = subparsers.add_parser(
        "tasks", help="validate, generate, fetch real code for, import and export tasks"
    )
    sub = tasks.add_subparsers(dest="tasks_verb", metavar="ACTION", required=True)

    _add_validate(sub)

    g = sub.add_parser(
        "generate",
        help="make bug-fix tasks by mutating a Python repo and keeping mutants its tests catch",
        description="Inject bugs into the repo's Python code with the ast module (flipped "
        "comparison/arithmetic operators, off-by-one constants and slices, dropped if-branches, "
        "swapped call arguments, wrong constants), run the repo's tests on each mutant and keep "
        "those that make tests fail. Queries are written from the failing tests' output, "
        "never naming the mutation. " + GENERATE_SANDBOX_HELP,
    )
    g.add_argument("--repo", type=Path, required=True, help="repository with Python code and tests")
    g.add_argument("--out", type=Path, required=True, help="task file to write (JSONL)")
    g.add_argument("--max-mutants", type=int, default=150, help="mutants to try at most")
    g.add_argument("--max-tasks", type=int, default=50, help="stop after this many tasks")
    suite_options(g)
    g.add_argument("--src", action="append", help="folder or file to mutate (default: auto)")
    g.add_argument("--seed", type=int, default=0, help="seed for sampling mutants")
    g.add_argument("--concurrency", type=int, default=2, help="test runs at once")
    g.add_argument("--heldout-fraction", type=float, default=0.2, help="share put in heldout")
    g.add_argument("--id-prefix", help="task id prefix (default: the repo folder name)")
    g.add_argument("--env", type=Path, help="the repo's Python environment (tasks fetch builds it)")
    session_options(g, "isolated")
    g.set_defaults(func=_generate)

    c = sub.add_parser(
        "curriculum",
        help="a tiered curriculum with held-out functions and repos, from several repos",
        description="Run the generator on each repo and turn every kept mutant into up to "
        "five tasks, one per tier: 'line' (file, function and the buggy line quoted; inverted "
        "operators only), 'locate' (the line quoted, no file named), 'named' (file and "
        "function named; inverted operators only), 'file' (file named) and 'behaviour' "
        "(failing tests only). How each repo's tests run is found per repo (pytest as the "
        "repo configures it, else test files by name; the package list's or the repo's "
        "[tool.cheetah] test_command/test_paths), and a repo that yields nothing is named "
        "with why and the limit it ran under. Held-out tasks are chosen by "
        "function (no held-out function is trained on); --heldout-repo repos are held out "
        "whole. " + GENERATE_SANDBOX_HELP,
    )
    c.add_argument("--repos", type=Path, nargs="+", required=True, help="repositories")
    c.add_argument("--out", type=Path, required=True, help="task file to write (JSONL)")
    c.add_argument("--heldout-repo", action="append", default=[], help="repo name held out")
    c.add_argument(
        "--heldout-fraction", type=float, default=0.2, help="share of functions held out"
    )
    c.add_argument("--max-mutants", type=int, default=400, help="mutants to try per repo")
    c.add_argument("--seed", type=int, default=0, help="seed for sampling mutants")
    c.add_argument("--concurrency", type=int, default=2, help="test runs at once")
    suite_options(c)
    c.add_argument(
        "--envs",
        type=Path,
        help="folder of per-repo Python environments (ENVS/<repo name>; tasks fetch builds them)",
    )
    session_options(c, "isolated")
    c.set_defaults(func=_curriculum)
    add_io_verbs(sub)
    return tasks


def _curriculum(args: argparse.Namespace) -> int:

    from cheetah.tasks.curriculum import TIERS, build_curriculum
    from cheetah.tasks.generate import GenerateConfig, GenerateError
    from cheetah.tasks.loaders import dump_tasks

    if bad_session_args(args, "tasks curriculum"):
        return 2
    missing = [str(r) for r in args.repos if not r.is_dir()]
    if missing:
        print(f"cheetah tasks curriculum: no repository at {', '.join(missing)}", file=sys.stderr)
        return 2
    names = {r.resolve().name for r in args.repos}
    unknown = set(args.heldout_repo) - names
    if unknown:
        print(f"cheetah tasks curriculum: --heldout-repo {sorted(unknown)} is not among --repos",
              file=sys.stderr)  # fmt: skip
        return 2
    config = GenerateConfig(
        max_mutants=args.max_mutants,
        max_tasks=args.max_mutants,
        seed=args.seed,
        concurrency=args.concurrency,
        test_command=args.test_command,
        test_paths=args.test_path,
        timeout_s=args.timeout,
    )
    pace = Pace()

    def tick(repo: str, total: int, done: int, kept: int) -> None:
        if pace.due(final=done == total):  # a line every ~10 s, in logs too
            print(f"{repo}: {done}/{total} mutants tried, {kept} kept", flush=True)

    skipped: dict[str, str] = {}
    results: dict = {}

    def job(sessions):
        return build_curriculum(
            args.repos,
            args.out.parent,
            heldout_repos=set(args.heldout_repo),
            heldout_fraction=args.heldout_fraction,
            config=config,
            on_progress=tick,
            sessions=sessions,
            envs=args.envs.resolve() if args.envs else None,
            skipped=skipped,
            results=results,
        )

    try:
        tasks, stats = asyncio.run(_in_sessions(args, job))
    except GenerateError as e:
        print(f"cheetah tasks curriculum: {e}", file=sys.stderr)
        return 2
    dump_tasks(tasks, args.out)
    for tier in TIERS:
        of = [t for t in tasks if t.tier == tier]
        held = sum(t.split == "heldout" for t in of)
        print(f"tier {tier}: {len(of)} tasks ({len(of) - held} train, {held} held-out)")
    for repo, why in skipped.items():
        first = why.strip().splitlines()[0] if why.strip() else "?"
        print(f"{repo}: SKIPPED, {first}", file=sys.stderr)
    for repo, s in stats.items():
        r = results[repo]
        print(f"{repo}: tests: {r.runner}; baseline {r.baseline_s:.1f} s, limit {r.limit_s:g} s; "
              f"{s['tried']} mutants tried, {s['killed'] - s['duplicates']} kept, "
              f"{s['survived']} survived, {s['timeouts']} timed out, {s['broken']} broke "
              f"the suite, {s['duplicates']} duplicates")  # fmt: skip
    print(f"{len(tasks)} tasks written to {args.out}; generator stats: {json.dumps(stats)}")
    return 0 if tasks else 1


def add_commands(sub: argparse._SubParsersAction) -> None:
    add_tasks_command(sub)
