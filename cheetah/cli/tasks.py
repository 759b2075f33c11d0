"""CLI verbs for tasks: ``cheetah tasks validate|generate|curriculum`` and ``cheetah eval``.

Parsing and printing only; the work lives in ``cheetah.tasks``.
``tasks generate`` uses local temp copies (UNSANDBOXED, trusted repos only).
``eval`` runs through the env fleet by default (the servers of ``--env-url``, or one
isolated server it starts); ``tasks validate`` uses local copies unless told otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from cheetah.cli.flags import LIMIT_FLAGS, add_flags, from_flags
from cheetah.harness.loop import AgentLimits
from cheetah.progress import Pace
from cheetah.search.code_search import EmbeddingCodeSearch

SESSIONS_HELP = (
    "Workspaces are temp copies of each task's snapshot and commands run unsandboxed with "
    "your rights: use trusted task files and models only."
)


class _LineProgress:
    """``rich.progress.Progress``'s few methods used here, as plain lines: one every ~10 s
    and one at the end, for output that is not a terminal (logs, CI)."""

    def __init__(self, console, total: int, what: str) -> None:
        self.console, self.what = console, what
        self.total, self.completed, self.last, self.pace = total, 0, "", Pace()

    def __enter__(self) -> _LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._line()

    def update(self, _task, *, advance: int = 0, total=None, completed=None, last="") -> None:
        self.total = self.total if total is None else total
        self.completed = (self.completed if completed is None else completed) + advance
        self.last = last or self.last
        if self.pace.due():
            self._line()

    def _line(self) -> None:
        self.console.print(
            f"{self.what}: {self.completed}/{self.total} {self.last}", soft_wrap=True
        )


def _progress(console, total: int, what: str):
    """A progress bar on a terminal, a line every ~10 s otherwise."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not console.is_terminal:
        return _LineProgress(console, total, what), 0
    progress = Progress(
        TextColumn(f"[bold]{what}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[last]}"),
        console=console,
        transient=False,
    )
    task = progress.add_task(what, total=total, last="")
    return progress, task


def _load(path: Path, args: argparse.Namespace, verb: str):
    from cheetah.tasks.loaders import TaskFileError, load_tasks, select_tasks

    try:
        tasks = load_tasks(path)
    except TaskFileError as e:
        print(f"cheetah {verb}: malformed task file:\n{e}", file=sys.stderr)
        return None
    return select_tasks(
        tasks,
        split=getattr(args, "split", None),
        tier=getattr(args, "tier", None),
        ids=getattr(args, "id", None),
        limit=getattr(args, "limit", None),
    )


def _sessions(args: argparse.Namespace, code_search=None):
    """An async context giving the ``TaskSessions`` that ``--sandbox``/``--env-url`` ask for
    (``code_search`` backs codebase_search in sessions of this process; env servers have
    their own)."""
    import contextlib

    from cheetah.tasks.fleet import fleet_sessions
    from cheetah.tasks.session import local_sessions

    if args.env_url or args.sandbox == "fleet":
        token = None
        if args.env_url:
            from cheetah.sandbox.server import read_token

            token = read_token(args.env_token_file)
        return fleet_sessions(args.env_url or [], token, backend="isolated")
    return contextlib.nullcontext(local_sessions(args.sandbox, code_search=code_search))


def _bad_session_args(args: argparse.Namespace, verb: str) -> bool:
    """Print what is wrong with --env-url/--env-token-file (before any work starts)."""
    if args.env_url and not args.env_token_file:
        print(f"cheetah {verb}: --env-url needs --env-token-file", file=sys.stderr)
        return True
    return False


async def _with_sessions(args: argparse.Namespace, job, code_search=None):
    """Run ``job(sessions)`` inside the session context of ``args``."""
    async with _sessions(args, code_search) as sessions:
        return await job(sessions)


def _validate(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cheetah.tasks.grader import GraderConfig
    from cheetah.tasks.validate import validate_tasks

    tasks = _load(args.file, args, "tasks validate")
    if tasks is None or _bad_session_args(args, "tasks validate"):
        return 2
    console = Console(stderr=True)
    progress, bar = _progress(console, len(tasks), "validating")

    def done(v) -> None:
        progress.update(bar, advance=1, last=f"{v.task_id}: {'ok' if v.ok else 'FAILED'}")
        if not v.ok:
            progress.console.print(f"[red]{v.task_id}[/red]:")
            for p in v.problems:
                progress.console.print(f"  - {p}")

    config = GraderConfig(check_timeout_s=args.check_timeout)
    with progress:
        results = asyncio.run(
            _with_sessions(
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
        timeout_s=args.timeout,
        seed=args.seed,
        concurrency=args.concurrency,
        src=args.src or [],
        heldout_fraction=args.heldout_fraction,
        id_prefix=args.id_prefix,
    )
    progress, bar = _progress(console, 1, "mutants")

    def tick(total: int, done: int, kept: int) -> None:
        progress.update(bar, total=total, completed=done, last=f"{kept} kept")

    try:
        with progress:
            result = asyncio.run(generate_tasks(args.repo, config, on_progress=tick))
    except GenerateError as e:
        print(f"cheetah tasks generate: {e}", file=sys.stderr)
        return 2
    dump_tasks(result.tasks, args.out)
    s = result.stats
    print(
        f"{len(result.tasks)} tasks written to {args.out} "
        f"({s['candidates']} candidate mutants, {s['tried']} tried, {s['killed']} made tests "
        f"fail, {s['duplicates']} duplicates, {s['survived']} survived, {s['broken']} broke "
        f"the suite, {s['timeouts']} timed out)"
    )
    return 0 if result.tasks else 1


def _eval(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cheetah.harness.policy import PolicyError
    from cheetah.harness.select import policy_from_spec
    from cheetah.tasks.evaluate import EvalConfig, run_eval
    from cheetah.tasks.grader import GraderConfig
    from cheetah.tasks.oracle import OraclePolicy
    from cheetah.tasks.report import write_report

    tasks = _load(args.tasks, args, "eval")
    if tasks is None or _bad_session_args(args, "eval"):
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
    config = EvalConfig(
        samples=args.samples,
        concurrency=args.concurrency,
        limits=limits,
        grader=GraderConfig(check_timeout_s=args.check_timeout),
    )
    console = Console(stderr=True)
    progress, bar = _progress(console, len(tasks) * args.samples, "eval")

    def done(res) -> None:
        mark = "error" if res.error and not res.correct else ("pass" if res.correct else "fail")
        progress.update(bar, advance=1, last=f"{res.task_id}#{res.sample}: {mark}")

    with progress:
        report = asyncio.run(
            _with_sessions(
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


def _session_options(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument(
        "--sandbox",
        choices=["fleet", "isolated", "local"],
        default=default,
        help="where agents and checks run: 'fleet' = sessions on env servers through the "
        "fleet client (the --env-url servers, or one isolated server started for this run), "
        "'isolated' = isolated sessions in this process, 'local' = temp copies run "
        f"UNSANDBOXED (trusted tasks and models only). Default: {default}",
    )
    p.add_argument(
        "--env-url",
        action="append",
        metavar="URL",
        help="an env server (cheetah env serve) to run on; repeat for a fleet (implies fleet)",
    )
    p.add_argument("--env-token-file", help="file holding the env servers' bearer token")


def _task_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", choices=["train", "heldout"], help="only tasks of this split")
    p.add_argument("--tier", help="only tasks of this tier (e.g. easy)")
    p.add_argument("--id", action="append", help="only this task id (repeatable)")
    p.add_argument("--limit", type=int, help="only the first N tasks (after the filters)")


def add_tasks_command(subparsers) -> argparse.ArgumentParser:
    """``cheetah tasks validate FILE`` and ``cheetah tasks generate --repo PATH --out FILE``."""
    tasks = subparsers.add_parser("tasks", help="validate and generate tasks")
    sub = tasks.add_subparsers(dest="tasks_verb", metavar="ACTION", required=True)

    v = sub.add_parser(
        "validate",
        help="check that each task's checks fail as given and pass with its reference patch",
        description="For each task in FILE (JSONL, cheetah or SWE-bench records): its "
        "fail-to-pass checks must fail and pass-to-pass checks pass on the snapshot, and all "
        "must pass with the reference patch applied. Exit status 1 if any task is invalid. "
        + SESSIONS_HELP.rstrip(".")
        + " (the default; --sandbox isolated or fleet for untrusted ones).",
    )
    v.add_argument("file", type=Path, help="task file (JSONL)")
    v.add_argument("--concurrency", type=int, default=2, help="tasks validated at once")
    v.add_argument("--check-timeout", type=float, default=120.0, help="seconds per check run")
    _session_options(v, "local")
    _task_filters(v)
    v.set_defaults(func=_validate)

    g = sub.add_parser(
        "generate",
        help="make bug-fix tasks by mutating a Python repo and keeping mutants its tests catch",
        description="Inject bugs into the repo's Python code with the ast module (flipped "
        "comparison/arithmetic operators, off-by-one constants and slices, dropped if-branches, "
        "swapped call arguments, wrong constants), run the repo's tests on each mutant and keep "
        "those that make tests fail. Queries are written from the failing tests' output, "
        "never naming the mutation. " + SESSIONS_HELP,
    )
    g.add_argument("--repo", type=Path, required=True, help="repository with Python code and tests")
    g.add_argument("--out", type=Path, required=True, help="task file to write (JSONL)")
    g.add_argument("--max-mutants", type=int, default=150, help="mutants to try at most")
    g.add_argument("--max-tasks", type=int, default=50, help="stop after this many tasks")
    g.add_argument(
        "--test-command",
        default="python -m pytest -q -rA --tb=short -p no:cacheprovider",
        help="runs the repo's tests; its output must be pytest's with -rA",
    )
    g.add_argument("--src", action="append", help="folder or file to mutate (default: auto)")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds per test run")
    g.add_argument("--seed", type=int, default=0, help="seed for sampling mutants")
    g.add_argument("--concurrency", type=int, default=2, help="test runs at once")
    g.add_argument("--heldout-fraction", type=float, default=0.2, help="share put in heldout")
    g.add_argument("--id-prefix", help="task id prefix (default: the repo folder name)")
    g.set_defaults(func=_generate)

    c = sub.add_parser(
        "curriculum",
        help="a tiered curriculum with held-out functions and repos, from several repos",
        description="Run the generator on each repo and turn every kept mutant into up to "
        "three tasks: 'named' (file and function named; inverted operators only), 'file' "
        "(file named) and 'behaviour' (failing tests only). Held-out tasks are chosen by "
        "function (no held-out function is trained on); --heldout-repo repos are held out "
        "whole. UNSANDBOXED: the repos' tests run on this machine (trusted repos only).",
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
    c.set_defaults(func=_curriculum)
    return tasks


def _curriculum(args: argparse.Namespace) -> int:

    from cheetah.tasks.curriculum import TIERS, build_curriculum
    from cheetah.tasks.generate import GenerateConfig, GenerateError
    from cheetah.tasks.loaders import dump_tasks

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
    )
    pace = Pace()

    def tick(repo: str, total: int, done: int, kept: int) -> None:
        if pace.due(final=done == total):  # a line every ~10 s, in logs too
            print(f"{repo}: {done}/{total} mutants tried, {kept} kept", flush=True)

    try:
        tasks, stats = asyncio.run(
            build_curriculum(
                args.repos,
                args.out.parent,
                heldout_repos=set(args.heldout_repo),
                heldout_fraction=args.heldout_fraction,
                config=config,
                on_progress=tick,
            )
        )
    except GenerateError as e:
        print(f"cheetah tasks curriculum: {e}", file=sys.stderr)
        return 2
    dump_tasks(tasks, args.out)
    for tier in TIERS:
        of = [t for t in tasks if t.tier == tier]
        held = sum(t.split == "heldout" for t in of)
        print(f"tier {tier}: {len(of)} tasks ({len(of) - held} train, {held} held-out)")
    print(f"{len(tasks)} tasks written to {args.out}; generator stats: {json.dumps(stats)}")
    return 0 if tasks else 1


def add_eval_command(subparsers) -> argparse.ArgumentParser:
    """``cheetah eval --tasks FILE --model MODEL --samples K --concurrency N --out DIR``."""
    from cheetah.harness.select import MODEL_HELP

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
    e.add_argument("--tasks", type=Path, required=True, help="task file (JSONL)")
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
    _session_options(e, "fleet")
    _task_filters(e)
    e.set_defaults(func=_eval)
    return e


def add_commands(sub: argparse._SubParsersAction) -> None:
    add_tasks_command(sub)
    add_eval_command(sub)
