"""What the task verbs share (``cheetah tasks ...`` and ``cheetah eval``): loading a task
file with the filter flags (a tier or id the file lacks is named, with the tiers it has),
where fetched repos and their environments are (``--repos``, ``--envs``), choosing where
task sessions run (``--sandbox``, ``--env-url``), and progress that is a bar on a terminal
and a line every ~10 s in logs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cheetah.progress import Pace


class LineProgress:
    """``rich.progress.Progress``'s few methods used here, as plain lines: one every ~10 s
    and one at the end, for output that is not a terminal (logs, CI)."""

    def __init__(self, console, total: int, what: str) -> None:
        self.console, self.what = console, what
        self.total, self.completed, self.last, self.pace = total, 0, "", Pace()

    def __enter__(self) -> LineProgress:
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


def progress_for(console, total: int, what: str):
    """A progress bar on a terminal, a line every ~10 s otherwise."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    if not console.is_terminal:
        return LineProgress(console, total, what), 0
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


def load_task_file(path: Path, args: argparse.Namespace, verb: str):
    from cheetah.tasks.loaders import TaskFileError, load_tasks, select_tasks

    try:
        tasks = load_tasks(path)
    except TaskFileError as e:
        head = ":\n" if len(e.problems) > 1 else ": "  # one problem reads on one line
        print(f"cheetah {verb}: cannot use the task file{head}{e}", file=sys.stderr)
        return None
    if (unknown := unknown_filter(tasks, args, path)) is not None:
        print(f"cheetah {verb}: {unknown}", file=sys.stderr)
        return None
    return select_tasks(
        tasks,
        split=getattr(args, "split", None),
        tier=getattr(args, "tier", None),
        ids=getattr(args, "id", None),
        limit=getattr(args, "limit", None),
    )


def unknown_filter(tasks, args: argparse.Namespace, path: Path) -> str | None:
    """What a ``--tier`` or ``--id`` names that ``tasks`` lack (with the tiers there are),
    or None: a typo must not read as "no task matches"."""
    tier = getattr(args, "tier", None)
    tiers = sorted({t.tier for t in tasks})
    if tier is not None and tier not in tiers:
        return f"no task of tier {tier!r} in {path}; its tiers are: {', '.join(tiers) or 'none'}"
    known = {t.id for t in tasks}
    missing = [i for i in getattr(args, "id", None) or [] if i not in known]
    if missing:
        return f"no task with id {', '.join(map(repr, missing))} in {path}"
    return None


def fetched_options(p: argparse.ArgumentParser) -> None:
    """``--repos`` and ``--envs``: where ``cheetah tasks fetch`` laid out the repos the tasks
    name, and their environments (``tasks/fetched.py``)."""
    p.add_argument(
        "--repos",
        type=Path,
        metavar="DIR",
        help="where the fetched repos of the tasks are (`cheetah tasks fetch --out`; default: "
        "$CHEETAH_REPOS_DIR, else ~/.cache/cheetah/repos)",
    )
    p.add_argument(
        "--envs",
        type=Path,
        metavar="DIR",
        help="where their environments are (`cheetah tasks fetch --envs`; default: "
        "$CHEETAH_ENVS_DIR, else ~/.cache/cheetah/envs)",
    )


def use_fetched_dirs(args: argparse.Namespace, verb: str) -> bool:
    """Point this process (and the servers it starts) at ``--repos``/``--envs``: they set
    ``$CHEETAH_REPOS_DIR``/``$CHEETAH_ENVS_DIR``, which ``tasks/fetched.py`` reads. False,
    with the reason printed, for a folder that is not there."""
    import os

    for flag, var in (("repos", "CHEETAH_REPOS_DIR"), ("envs", "CHEETAH_ENVS_DIR")):
        folder = getattr(args, flag, None)
        if folder is None:
            continue
        if not folder.is_dir():
            print(f"cheetah {verb}: --{flag} {str(folder)!r} is not a directory", file=sys.stderr)
            return False
        os.environ[var] = str(folder.resolve())
    return True


def task_sessions(args: argparse.Namespace, code_search=None):
    """An async context giving the ``TaskSessionOpener`` that ``--sandbox``/``--env-url`` ask for
    (``code_search`` backs codebase_search in sessions of this process; env servers have
    their own)."""
    import contextlib

    from cheetah.tasks.remote_sessions import fleet_sessions
    from cheetah.tasks.session import local_sessions

    if args.env_url or args.sandbox == "fleet":
        token = None
        if args.env_url:
            from cheetah.core.http_gate import read_token

            token = read_token(args.env_token_file)
        return fleet_sessions(args.env_url or [], token, backend="isolated")
    return contextlib.nullcontext(local_sessions(args.sandbox, code_search=code_search))


def bad_session_args(args: argparse.Namespace, verb: str) -> bool:
    """Print what is wrong with --env-url/--env-token-file (before any work starts)."""
    if args.env_url and not args.env_token_file:
        print(f"cheetah {verb}: --env-url needs --env-token-file", file=sys.stderr)
        return True
    return False


async def with_sessions(args: argparse.Namespace, job, code_search=None):
    """Run ``job(sessions)`` inside the session context of ``args``; sessions of this process
    are closed at the end, and SIGTERM or SIGINT cancels the job, closes them and raises
    ``Stopped`` (``cheetah/stop.py``): a stopped eval or validate leaves no sandbox behind."""
    from cheetah.stop import stop_on_signal

    async with stop_on_signal(), task_sessions(args, code_search) as sessions:
        try:
            return await job(sessions)
        finally:
            aclose = getattr(sessions.env, "aclose", None)
            if aclose is not None and not (args.env_url or args.sandbox == "fleet"):
                await aclose()  # in process: every session, then the runtime mounts


def session_options(p: argparse.ArgumentParser, default: str) -> None:
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


def task_filters(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", choices=["train", "heldout"], help="only tasks of this split")
    p.add_argument("--tier", help="only tasks of this tier (e.g. easy)")
    p.add_argument("--id", action="append", help="only this task id (repeatable)")
    p.add_argument("--limit", type=int, help="only the first N tasks (after the filters)")
