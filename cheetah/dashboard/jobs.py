"""Background agent jobs: ``cheetah agent`` runs started from the dashboard, kept in SQLite.

A job is one process, ``cheetah agent --repo=REPO --model=MODEL --max-turns=N --sandbox
--out=FILE -- QUERY`` (``agent_argv``): every value the client sent is joined to its flag
or follows ``--``, so none is ever read as an option. The agent works on an isolated
copy of the repo (the files under the root are never touched) and the job keeps its
trajectory, its output (with the diff) and its exit status. Jobs live in ``jobs.sqlite``
under the jobs directory, so the list survives a dashboard restart; a job that was
running when the dashboard stopped is marked ``interrupted`` at the next start (its
process died with the dashboard's session). With jobs off (no token or no snapshot root)
the manager writes nothing: no directory, no database; jobs an earlier dashboard kept are
listed from its database opened read-only.

What a client may name is bounded by ``JobRules``, checked before a row is written or a
process started:

- **repo**: an absolute path that resolves (``realpath``, after every link) to a
  directory at or under one of the operator's snapshot roots; the job gets the resolved
  path. Without a root, jobs are refused (``JobsDisabled``). The copy is made by the
  sandbox with the dashboard's rights, so everything under a root is readable by whoever
  may start jobs.
- **model**: ``default``, ``tiny``, an ``http(s)://`` URL (the job's process will send
  the prompt, i.e. repo content, there), or ``scripted:FILE`` / a model file or directory
  under one of the operator's model roots. Anything else would name a host path.
- **query**: not blank, at most ``max_query_chars`` characters; **max_turns**: 1..200.

Deliberately left out: queueing beyond ``max_running`` (a new job over the limit is
refused with a clear error), running jobs on remote machines, per-client quotas.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    query TEXT NOT NULL, repo TEXT NOT NULL, model TEXT NOT NULL, max_turns INTEGER NOT NULL,
    status TEXT NOT NULL, exit_code INTEGER, created REAL NOT NULL, finished REAL,
    pid INTEGER
);
"""

MAX_JOB_ID = 2**63 - 1  # SQLite's INTEGER range: a larger id is no job, never an overflow
MAX_TURNS = 200
MAX_NAME_CHARS = 4096  # a repo path or model spec (PATH_MAX; one argv string may hold 128 KiB)
IN_PROCESS_MODELS = ("default", "tiny")  # built in or bundled: they name no host path


class JobError(ValueError):
    """A job request that cannot be run (bad repo, model or query, too many running)."""


class JobsDisabled(JobError):
    """Jobs are off: the dashboard was started without a snapshot root."""


@dataclass(frozen=True)
class JobRules:
    """What a job may name. Roots are resolved directories (see ``resolve_roots``)."""

    snapshot_roots: tuple[Path, ...]
    model_roots: tuple[Path, ...]
    max_query_chars: int


@dataclass
class Job:
    id: int
    query: str
    repo: str
    model: str
    max_turns: int
    status: str  # running | finished | limit | failed | cancelled | interrupted
    exit_code: int | None
    created: float
    finished: float | None
    pid: int | None

    def to_dict(self) -> dict:
        return asdict(self)


# -- what a job may name (pure) ---------------------------------------------------------
def resolve_roots(paths: Iterable[str | Path], flag: str) -> tuple[Path, ...]:
    """Each path resolved after its links; ValueError naming ``flag`` for one that is not
    a directory."""
    roots = []
    for p in paths:
        real = Path(os.path.realpath(p))
        if not real.is_dir():
            raise ValueError(f"{flag} {str(p)!r} is not a directory")
        roots.append(real)
    return tuple(roots)


def _plain(what: str, text: str, max_chars: int = MAX_NAME_CHARS) -> None:
    """JobError unless ``text`` can be an argv string and a SQLite value."""
    if len(text) > max_chars:
        raise JobError(f"{what} has {len(text)} characters; the limit is {max_chars}")
    if "\x00" in text:
        raise JobError(f"{what} contains a NUL character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise JobError(f"{what} is not valid Unicode text (a lone surrogate)") from None


def _inside(path: str, roots: Sequence[Path], what: str, flag: str) -> Path:
    """``path`` resolved after its links, when it is absolute and lands at or under one of
    ``roots``; JobError naming the roots otherwise. Paths outside get one message whether
    or not they exist."""
    names = ", ".join(str(r) for r in roots) or "none configured"
    if not os.path.isabs(path):
        raise JobError(f"{what} {path!r} must be an absolute path under {flag} ({names})")
    real = Path(os.path.realpath(path))
    if not any(real == r or r in real.parents for r in roots):
        raise JobError(f"{what} {path!r} is not under {flag} ({names})")
    return real


def resolve_repo(repo: str, rules: JobRules) -> Path:
    """The directory a job works on: ``repo`` resolved, at or under a snapshot root."""
    if not rules.snapshot_roots:
        raise JobsDisabled(
            "jobs are off: start the dashboard with --snapshot-root DIR (repeatable) to let "
            "jobs run on the repos under DIR"
        )
    _plain("repo", repo)
    real = _inside(repo, rules.snapshot_roots, "repo", "--snapshot-root")
    if not real.is_dir():
        raise JobError(f"repo {repo!r} is not a directory under --snapshot-root")
    return real


def check_model(model: str, rules: JobRules) -> str:
    """The ``--model`` value a job runs with, or JobError saying what a job's model may be.

    ``default`` / ``tiny`` and ``http(s)://`` URLs go through as given; ``scripted:FILE`` and
    a model path are resolved and must lie under a model root."""
    _plain("model", model)
    if model in IN_PROCESS_MODELS:
        return model
    if model.startswith(("http://", "https://")):
        return _checked_url(model)
    allowed = (
        "a job's model is 'default', 'tiny', an http(s):// URL of an OpenAI-compatible "
        "server, or scripted:FILE / a model path under --model-root"
    )
    scripted = model.startswith("scripted:")
    path = model.removeprefix("scripted:")
    if not os.path.isabs(path):
        raise JobError(f"model {model!r} is not allowed: {allowed}")
    if not rules.model_roots:
        raise JobError(f"model {model!r} names a host path: {allowed} (none is configured)")
    real = _inside(path, rules.model_roots, "model path", "--model-root")
    if scripted and not real.is_file():
        raise JobError(f"model {model!r}: {path!r} is not a file under --model-root")
    if not real.exists():
        raise JobError(f"model {model!r}: {path!r} does not exist under --model-root")
    return f"scripted:{real}" if scripted else str(real)


def _checked_url(model: str) -> str:
    try:
        host = urlsplit(model).hostname
    except ValueError:
        host = None
    if not host or any(c.isspace() or ord(c) < 32 for c in model):
        raise JobError(f"model {model!r} is not a valid http(s) URL")
    return model


def check_query(query: str, rules: JobRules) -> None:
    if not query.strip():
        raise JobError("the query is empty")
    _plain("the query", query, rules.max_query_chars)


def agent_argv(query: str, repo: Path, model: str, max_turns: int, out: Path) -> list[str]:
    """The command of one job. Values are joined to their flags (``--repo=...``) and the
    query follows ``--``, so a query like ``--help`` is the query's text."""
    return [
        sys.executable, "-m", "cheetah.cli", "agent",
        f"--repo={repo}", f"--model={model}", f"--max-turns={max_turns}",
        "--sandbox", f"--out={out}", "--", query,
    ]  # fmt: skip


# -- the jobs ----------------------------------------------------------------------------
class JobManager:
    def __init__(
        self, directory: str | Path, rules: JobRules, max_running: int = 2, enabled: bool = True
    ) -> None:
        """``enabled`` False: jobs are off (see the module docstring); nothing is written."""
        self.dir = Path(directory)
        self.rules = rules
        self.max_running = max_running
        self.enabled = enabled
        self._db = self._open() if enabled else self._open_read_only()
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._tasks: set[asyncio.Task] = set()
        self._starting = asyncio.Lock()  # the running-jobs check and the spawn, together

    def _open(self) -> sqlite3.Connection:
        self.dir.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(self.dir / "jobs.sqlite", check_same_thread=False)
        db.executescript(_SCHEMA)
        db.execute(
            "UPDATE jobs SET status = 'interrupted', finished = ? WHERE status = 'running'",
            (time.time(),),
        )
        db.commit()
        return db

    def _open_read_only(self) -> sqlite3.Connection | None:
        path = self.dir / "jobs.sqlite"
        if not path.is_file():
            return None
        uri = f"{path.resolve().as_uri()}?mode=ro"
        return sqlite3.connect(uri, uri=True, check_same_thread=False)

    def _row(self, row: tuple) -> Job:
        return Job(*row)

    def list(self) -> list[Job]:
        if self._db is None:
            return []
        rows = self._db.execute("SELECT * FROM jobs ORDER BY id DESC").fetchall()
        return [self._row(r) for r in rows]

    def get(self, job_id: int) -> Job | None:
        if self._db is None or not 1 <= job_id <= MAX_JOB_ID:
            return None
        row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._row(row) if row else None

    def paths(self, job_id: int) -> tuple[Path, Path]:
        return self.dir / f"job-{job_id}.json", self.dir / f"job-{job_id}.log"

    def detail(self, job_id: int) -> dict | None:
        job = self.get(job_id)
        if job is None:
            return None
        traj_path, log_path = self.paths(job_id)
        out = job.to_dict()
        out["log"] = log_path.read_text(errors="replace")[-20_000:] if log_path.exists() else ""
        try:
            out["trajectory"] = json.loads(traj_path.read_text())
        except (OSError, ValueError):
            out["trajectory"] = None
        return out

    async def start(self, query: str, repo: str, model: str, max_turns: int = 20) -> Job:
        """Check the request against the rules, then write the row and start the process."""
        real_repo = resolve_repo(repo, self.rules)
        if not self.enabled:
            raise JobsDisabled("jobs are off: start the dashboard with --token-file")
        check_query(query, self.rules)
        model_spec = check_model(model, self.rules)
        if not 1 <= max_turns <= MAX_TURNS:
            raise JobError(f"max_turns must be between 1 and {MAX_TURNS}, got {max_turns}")
        async with self._starting:
            if len(self._procs) >= self.max_running:
                raise JobError(f"{self.max_running} jobs are already running; wait or cancel one")
            cur = self._db.execute(
                "INSERT INTO jobs (query, repo, model, max_turns, status, created) "
                "VALUES (?, ?, ?, ?, 'running', ?)",
                (query, str(real_repo), model_spec, max_turns, time.time()),
            )
            self._db.commit()
            job_id = int(cur.lastrowid)
            await self._spawn(
                job_id, agent_argv(query, real_repo, model_spec, max_turns, self.paths(job_id)[0])
            )
        return self.get(job_id)  # type: ignore[return-value]

    async def _spawn(self, job_id: int, argv: list[str]) -> None:
        _, log_path = self.paths(job_id)
        with log_path.open("w") as log:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, "COLUMNS": "100"},
                )
            except OSError as e:  # e.g. E2BIG: an argv over the kernel's limit
                log.write(f"cannot start the agent: {e.strerror or e}\n")
                self._finish(job_id, "failed", None)
                raise JobError(f"cannot start the agent: {e.strerror or e}") from None
        self._procs[job_id] = proc
        self._db.execute("UPDATE jobs SET pid = ? WHERE id = ?", (proc.pid, job_id))
        self._db.commit()
        task = asyncio.create_task(self._wait(job_id, proc))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _finish(self, job_id: int, status: str, code: int | None) -> None:
        self._db.execute(
            "UPDATE jobs SET status = ?, exit_code = ?, finished = ? WHERE id = ?",
            (status, code, time.time(), job_id),
        )
        self._db.commit()

    async def _wait(self, job_id: int, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        self._procs.pop(job_id, None)
        status = self.get(job_id).status  # type: ignore[union-attr]
        if status == "running":
            status = "finished" if code == 0 else self._stopped_or_failed(job_id)
        self._finish(job_id, status, code)

    def _stopped_or_failed(self, job_id: int) -> str:
        """``limit`` when the job's trajectory says a limit stopped the agent (``cheetah
        agent`` then exits non-zero), else ``failed``."""
        try:
            traj = json.loads(self.paths(job_id)[0].read_text())
        except (OSError, ValueError):
            return "failed"
        return (
            "limit" if isinstance(traj, dict) and traj.get("stop_reason") == "limit" else "failed"
        )

    async def cancel(self, job_id: int) -> bool:
        """Whether the job was running and is now being stopped (False for any other id)."""
        proc = self._procs.get(job_id)
        if proc is None:
            return False
        self._db.execute("UPDATE jobs SET status = 'cancelled' WHERE id = ?", (job_id,))
        self._db.commit()
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        return True

    async def wait_all(self) -> None:
        if self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def close(self) -> None:
        for job_id in list(self._procs):
            await self.cancel(job_id)
        await self.wait_all()
        if self._db is not None:
            self._db.close()
