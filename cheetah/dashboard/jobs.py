"""Background agent jobs: ``cheetah agent`` runs started from the dashboard, kept in SQLite.

A job is one ``cheetah agent QUERY --repo REPO --model MODEL --sandbox --out FILE``
process: the agent works on an isolated copy of the repo (the user's files are never
touched) and the job keeps its trajectory, its output (with the diff) and its exit
status. Jobs live in ``jobs.sqlite`` under the jobs directory, so the list survives a
dashboard restart; a job that was running when the dashboard stopped is marked
``interrupted`` at the next start (its process died with the dashboard's session).

Deliberately left out: queueing beyond ``max_running`` (a new job over the limit is
refused with a clear error), running jobs on remote machines.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    query TEXT NOT NULL, repo TEXT NOT NULL, model TEXT NOT NULL, max_turns INTEGER NOT NULL,
    status TEXT NOT NULL, exit_code INTEGER, created REAL NOT NULL, finished REAL,
    pid INTEGER
);
"""


class JobError(ValueError):
    """A job request that cannot be run (bad repo, too many running)."""


@dataclass
class Job:
    id: int
    query: str
    repo: str
    model: str
    max_turns: int
    status: str  # running | finished | failed | cancelled | interrupted
    exit_code: int | None
    created: float
    finished: float | None
    pid: int | None

    def to_dict(self) -> dict:
        return asdict(self)


class JobManager:
    def __init__(self, directory: str | Path, max_running: int = 2) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_running = max_running
        self._db = sqlite3.connect(self.dir / "jobs.sqlite", check_same_thread=False)
        self._db.executescript(_SCHEMA)
        self._db.execute(
            "UPDATE jobs SET status = 'interrupted', finished = ? WHERE status = 'running'",
            (time.time(),),
        )
        self._db.commit()
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._tasks: set[asyncio.Task] = set()

    def _row(self, row: tuple) -> Job:
        return Job(*row)

    def list(self) -> list[Job]:
        rows = self._db.execute("SELECT * FROM jobs ORDER BY id DESC").fetchall()
        return [self._row(r) for r in rows]

    def get(self, job_id: int) -> Job | None:
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
        if not query.strip():
            raise JobError("the query is empty")
        if not Path(repo).is_dir():
            raise JobError(f"repo {repo!r} is not a directory on the dashboard's machine")
        if not 1 <= max_turns <= 200:
            raise JobError(f"max_turns must be between 1 and 200, got {max_turns}")
        if len(self._procs) >= self.max_running:
            raise JobError(f"{self.max_running} jobs are already running; wait or cancel one")
        cur = self._db.execute(
            "INSERT INTO jobs (query, repo, model, max_turns, status, created) "
            "VALUES (?, ?, ?, ?, 'running', ?)",
            (query, str(Path(repo).resolve()), model, max_turns, time.time()),
        )
        self._db.commit()
        job_id = int(cur.lastrowid)
        traj_path, log_path = self.paths(job_id)
        argv = [sys.executable, "-m", "cheetah.cli", "agent", query, "--repo", repo]
        argv += ["--model", model, "--max-turns", str(max_turns), "--sandbox"]
        argv += ["--out", str(traj_path)]
        with log_path.open("w") as log:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, "COLUMNS": "100"},
            )
        self._procs[job_id] = proc
        self._db.execute("UPDATE jobs SET pid = ? WHERE id = ?", (proc.pid, job_id))
        self._db.commit()
        task = asyncio.create_task(self._wait(job_id, proc))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return self.get(job_id)  # type: ignore[return-value]

    async def _wait(self, job_id: int, proc: asyncio.subprocess.Process) -> None:
        code = await proc.wait()
        self._procs.pop(job_id, None)
        status = self.get(job_id).status  # type: ignore[union-attr]
        if status == "running":
            status = "finished" if code == 0 else "failed"
        self._db.execute(
            "UPDATE jobs SET status = ?, exit_code = ?, finished = ? WHERE id = ?",
            (status, code, time.time(), job_id),
        )
        self._db.commit()

    async def cancel(self, job_id: int) -> bool:
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
        self._db.close()
